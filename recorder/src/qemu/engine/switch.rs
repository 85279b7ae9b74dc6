//! Threads under QEMU (issue 43): the plugin lets one guest thread run at a time, so the
//! blocks of all of them come in one order, and a switch is written as the step backend
//! writes it, the hardware's own way for threads that share a logical processor under the
//! CR3 filter: an interrupt (FUP.PGD) after the outgoing thread's last instruction, TIP.PGE
//! at the incoming thread's next one (§4.2.6, table 19: a far transfer into the untraced
//! kernel and back).
//!
//! A thread gives up its turn at a system call's entry, or is interrupted before a block
//! when it ran too long while others waited: the call runs in the kernel while
//! another thread runs, and it retires when its thread runs again, before what it returned
//! and wrote are logged, so no thread sees in the history what another's call wrote before
//! that call ended. Until then the outgoing thread's block waits here, its system call not
//! retired, and the incoming thread's first instruction is either the first of a new
//! thread, or the system call it left at.

use std::collections::HashMap;

use super::{Counts, Engine, Kernel, Pending};
use rtit_replay_core::cofi::{Cofi, FarKind};

/// How the thread that ran until a switch left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    /// At a system call's entry, its block's counts then: the call has not retired.
    Syscall(Counts),
    /// By its `exit`, which retired.
    Exited,
    /// Interrupted as block `next` was to start (it ran too long while others waited),
    /// the counts of the block before then.
    Preempted {
        /// The counts of the block that ran last.
        counts: Counts,
        /// The block it did not start.
        next: u32,
    },
}

/// How the thread that runs from a switch on starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// Its first instruction, at this address (a new thread).
    Fresh(u64),
    /// The system call it left at, which retires next.
    Syscall,
    /// The block it was interrupted before, which starts next.
    Block(u32),
}

/// One switch between threads (Linux thread ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch {
    /// The thread that ran until here.
    pub from: i64,
    /// How it left.
    pub left: Left,
    /// The thread that runs from here.
    pub to: i64,
    /// How it starts.
    pub resume: Resume,
}

/// The threads waiting for their turn in a system call, by thread id: the block that ends
/// with the call, from the call on.
#[derive(Debug, Default)]
pub(super) struct Waiting(HashMap<i64, Pending>);

impl Engine {
    /// From now on the program has threads: a thread's `exit` no longer ends the recording.
    pub fn set_threaded(&mut self) {
        self.threaded = true;
    }

    /// Whether the program has threads ([`Self::set_threaded`]).
    pub fn threaded(&self) -> bool {
        self.threaded
    }

    /// A switch between threads, where the engine is in the ring. Returns the position of
    /// the incoming thread's first instruction and its address, where its registers are
    /// logged; `None` if nothing is traced here (not yet, or no longer) or the switch does
    /// not fit what the engine has (counted as an anomaly).
    pub fn switch(&mut self, s: Switch) -> Option<(u64, u64)> {
        if self.ended || self.model.is_none() {
            return None;
        }
        match s.left {
            Left::Syscall(counts) => {
                let Some(p) = self.pending.take() else {
                    self.stats.anomalies += 1;
                    return None;
                };
                let block = self.block(p.id);
                let (last, kept) = (block.last(), block.kept());
                if last.cofi != Cofi::Far(FarKind::Syscall) || counts.started != kept as u64 || block.is_vsyscall() {
                    self.stats.anomalies += 1;
                    return None;
                }
                // Everything before the call retired; the call did not: the kernel ran from
                // it (FUP.PGD at the call).
                self.retire_part(p.id, p.first.min(kept - 1), kept - 1);
                self.interrupt();
                self.waiting.0.insert(
                    s.from,
                    Pending {
                        id: p.id,
                        first: kept - 1,
                    },
                );
            }
            // Its `exit` retired into the kernel: nothing of it is pending.
            Left::Exited => self.pending = None,
            Left::Preempted { counts, next } => {
                // The block before went to `next`, as any block does; then the kernel ran
                // (FUP.PGD there).
                let to = self.block(next).start();
                if let Some(p) = self.pending.take() {
                    self.resolve(p, counts, Some(to));
                }
                self.leave_kernel(to);
                self.interrupt();
            }
        }
        self.kernel = Kernel::User;
        self.syscall_base = None;
        let ip = match s.resume {
            Resume::Fresh(ip) => ip,
            Resume::Block(id) => self.block(id).start(),
            Resume::Syscall => {
                let Some(p) = self.waiting.0.remove(&s.to) else {
                    self.stats.anomalies += 1;
                    return None;
                };
                // Its call retires in the stretch of `code-ran.bin` under way now, which
                // may have been cut since the block was noted.
                self.code.note(p.id);
                self.pending = Some(p);
                self.block(p.id).last().ip
            }
        };
        self.iret(ip);
        Some((self.position(), ip))
    }

    /// Where a thread waiting in a system call ([`Switch`]) resumes: the call's address.
    pub fn waiting_at(&self, tid: i64) -> Option<u64> {
        self.waiting.0.get(&tid).map(|p| self.block(p.id).last().ip)
    }
}

//! The program's threads under the step backend (issue 43): one runs at a time, so the order
//! of everything they do is exact. The one being stepped is the recorder's; the others wait
//! here, each stopped before its next instruction, or inside a system call that blocked
//! (a futex wait for another thread, a read) with its single step still under way.
//!
//! The trace is one stream, as the hardware writes it when the threads share one logical
//! processor with the CR3 filter on (they share CR3): a switch is the kernel running between
//! two user instructions, an interrupt (FUP.PGD, §3.2.2) after the outgoing thread's last
//! one and TIP.PGE at the incoming thread's next one. What the trace cannot show there, the
//! incoming thread's registers, is logged as a signal delivery's are (`signals.jsonl`, with
//! no frame): replay sets them at that position as at a handler's entry.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use rtit_replay_core::recording::{SignalEntry, ThreadSwitch};
use rtit_replay_core::syscall::MemoryWrite;

use super::tracee::{Regs, Tracee};
use super::{Insn, StepError};

/// Instructions a thread runs before the next ready one gets its turn: spin loops that wait
/// for another thread make progress (about 60 ms of stepping).
pub(super) const SLICE: u64 = 1_000;

/// How long a single step over a system call may take before the thread counts as blocked
/// in it, and another runs meanwhile.
const BLOCKED_AFTER: Duration = Duration::from_millis(2);

/// The same for a call that waits by its nature (a futex wait, a sleep, a poll, `wait4`,
/// `sched_yield` …): the others run as they would natively while it waits. Waiting the full
/// 2 ms there changed what programs did: a signal sent to a thread during another one's
/// `usleep(1000)` was not handled before the next one came, and the two merged.
const WAITS_AFTER: Duration = Duration::from_micros(20);

/// How long the step of the instruction about to run (system call `nr`, or `u64::MAX` for
/// none, with `regs`) may take before its thread counts as blocked.
pub(super) fn patience(nr: u64, regs: &Regs) -> Duration {
    const FUTEX_WAITS: [u64; 4] = [0, 9, 6, 11]; // WAIT, WAIT_BITSET, LOCK_PI, WAIT_REQUEUE_PI
    let waits = match nr {
        // futex: the waiting operations (the private flag and the clock bit aside).
        202 => FUTEX_WAITS.contains(&(regs.rsi & 0x7f)),
        // sched_yield, pause, nanosleep, wait4, rt_sigtimedwait, rt_sigsuspend,
        // epoll_wait, clock_nanosleep, waitid, pselect6, ppoll, epoll_pwait, select, poll,
        // epoll_pwait2, futex_waitv
        24 | 34 | 35 | 61 | 128 | 130 | 232 | 230 | 247 | 270 | 271 | 281 | 23 | 7 | 441 | 449 => true,
        _ => false,
    };
    if waits {
        WAITS_AFTER
    } else {
        BLOCKED_AFTER
    }
}

/// What the thread being stepped holds that a waiting one keeps here.
pub(super) struct Held {
    /// The thread (the process's memory is the same for all).
    pub tracee: Tracee,
    /// The registers before its next instruction (before the one under way, if one is).
    pub regs: Regs,
    /// A signal to deliver with its next step.
    pub pending: Option<Signal>,
}

/// A thread that waits for its turn.
pub(super) struct Waiting {
    pub held: Held,
    /// A single step under way (a system call blocked in the kernel) or ended and not yet
    /// taken: the instruction, the system call's number, and how the step ended, once it has.
    pub flight: Option<(Insn, u64, Option<WaitStatus>)>,
}

/// How a waiting thread stands.
enum Standing {
    /// It can run: stopped before an instruction, or its step has ended.
    Ready,
    /// Its step is still under way.
    Busy,
    /// Its step (a `clone`) stopped at the new thread's creation (PTRACE_EVENT_CLONE): the
    /// new thread's id; its own step goes on.
    Cloned(Pid),
}

impl Waiting {
    /// How it stands now; looks whether a step under way ended (without waiting).
    fn standing(&mut self) -> Result<Standing, StepError> {
        let tid = self.held.tracee.pid;
        match &mut self.flight {
            None | Some((_, _, Some(_))) => Ok(Standing::Ready),
            Some((_, _, ended)) => {
                let status = waitpid(tid, Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL))
                    .map_err(|e| StepError::Ptrace(format!("waitpid: {e}")))?;
                if status == WaitStatus::StillAlive {
                    return Ok(Standing::Busy);
                }
                if let Some(new) = clone_event(tid, &status)? {
                    ptrace::step(tid, None).map_err(|e| StepError::Ptrace(format!("PTRACE_SINGLESTEP: {e}")))?;
                    return Ok(Standing::Cloned(new));
                }
                *ended = Some(status);
                Ok(Standing::Ready)
            }
        }
    }
}

/// The threads that wait, in the order they get their turns.
#[derive(Default)]
pub(super) struct Threads {
    waiting: VecDeque<Waiting>,
    /// Every thread the program created while recorded (thread ids).
    pub created: Vec<Pid>,
    /// Where the kernel clears each thread's id when it ends (CLONE_CHILD_CLEARTID,
    /// set_tid_address), where known.
    pub clear_tids: std::collections::HashMap<Pid, u64>,
}

impl Threads {
    /// Whether a thread other than the one being stepped exists.
    pub fn any(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// A new thread, stopped at its start (PTRACE_O_TRACECLONE made it a tracee): it waits for
    /// its turn.
    pub fn created(&mut self, parent: &Tracee, tid: Pid) -> Result<(), StepError> {
        // Its first stop (SIGSTOP) may come after the parent's event.
        match waitpid(tid, Some(WaitPidFlag::__WALL)).map_err(|e| StepError::Ptrace(format!("waitpid: {e}")))? {
            WaitStatus::Stopped(..) | WaitStatus::PtraceEvent(..) => {}
            other => return Err(StepError::Ptrace(format!("new thread {tid}: {other:?}"))),
        }
        let tracee = parent.thread(tid)?;
        let regs = tracee.regs()?;
        self.created.push(tid);
        self.waiting.push_back(Waiting {
            held: Held {
                tracee,
                regs,
                pending: None,
            },
            flight: None,
        });
        Ok(())
    }

    /// The current thread's turn ends: it waits at the back.
    pub fn wait(&mut self, w: Waiting) {
        self.waiting.push_back(w);
    }

    /// The first waiting thread that can run now, taken out.
    /// A `clone` that blocked long enough for its thread to wait may make the new thread
    /// meanwhile: that one waits too (the clone's own step goes on).
    pub fn take_ready(&mut self) -> Result<Option<Waiting>, StepError> {
        let mut i = 0;
        while i < self.waiting.len() {
            match self.waiting[i].standing()? {
                Standing::Ready => return Ok(self.waiting.remove(i)),
                Standing::Busy => i += 1,
                Standing::Cloned(new) => {
                    let w = &self.waiting[i];
                    let nr = w.flight.as_ref().map_or(u64::MAX, |f| f.1);
                    let clear = clear_tid(&w.held.tracee, nr, &w.held.regs);
                    let parent = w.held.tracee.thread(w.held.tracee.pid)?;
                    self.created(&parent, new)?;
                    if let Some(at) = clear {
                        self.clear_tids.insert(new, at);
                    }
                }
            }
        }
        Ok(None)
    }

    /// The next thread that can run, taken out; blocks (looking at `interrupted`) while
    /// every one is inside a system call. `None` if there is none at all, or rtit was asked
    /// to stop meanwhile.
    pub fn next(&mut self, interrupted: &crate::interrupt::Interrupt) -> Result<Option<Waiting>, StepError> {
        while !self.waiting.is_empty() && !interrupted.is_set() {
            if let Some(w) = self.take_ready()? {
                return Ok(Some(w));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        Ok(None)
    }

    /// Where the recording ends (`position`, one past its last instruction), the registers
    /// of every thread that waits, as entries of `signals` from and to that thread: no later
    /// switch tells them (`rtit_replay_core::threads`). A thread the program's end already
    /// took keeps the registers it waited with, its vector registers unknown.
    pub fn log_ends(&self, signals: &mut Vec<SignalEntry>, position: u64) {
        for w in &self.waiting {
            let regs = &w.held.regs;
            let mut registers = super::regs_map(regs);
            if let Ok((vectors, _)) = w.held.tracee.vectors() {
                registers.extend(vectors);
            }
            let tid = i64::from(w.held.tracee.pid.as_raw());
            signals.push(SignalEntry {
                position,
                ip: regs.rip,
                registers,
                frame: MemoryWrite::new(regs.rsp, &[]),
                only_kernel: true,
                switch: Some(ThreadSwitch { from: tid, to: tid }),
            });
        }
    }

    /// Every thread id that waits (for letting them go, or killing them).
    pub fn tids(&self) -> Vec<Pid> {
        self.waiting.iter().map(|w| w.held.tracee.pid).collect()
    }
}

/// Reaps the killed program's threads `tids`, then its leader `pid`. The kernel reports the
/// leader's end only once every other thread's is reaped (waiting for the leader alone hung
/// after a ^C with threads blocked), and a thread whose step had ended reports that stop
/// first, before its end (waiting once for it hung the same way, under load).
pub(super) fn reap(tids: impl IntoIterator<Item = Pid>, pid: Pid) {
    let mut all: Vec<Pid> = tids.into_iter().filter(|&t| t != pid).collect();
    all.sort();
    all.dedup();
    all.push(pid);
    for t in all {
        loop {
            match waitpid(t, Some(WaitPidFlag::__WALL)) {
                Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
}

/// Waits for the single step of thread `tid`; with other threads about, gives up after
/// `patience` ([`patience`]; `None`: the step is under way, blocked in the kernel). A step
/// of a system call (`syscall`) is also given up when rtit is asked to stop (`interrupted`;
/// `None` then too): it may block for as long as the program likes, and a signal to rtit
/// does not end the wait. A PTRACE_EVENT stop is returned as it comes.
pub(super) fn wait_step(
    tid: Pid,
    others: bool,
    patience: Duration,
    syscall: bool,
    interrupted: &crate::interrupt::Interrupt,
) -> Result<Option<WaitStatus>, StepError> {
    let flags = WaitPidFlag::__WALL;
    if !others && !syscall {
        // Any other instruction's step ends at once: the fast path.
        return waitpid(tid, Some(flags))
            .map(Some)
            .map_err(|e| StepError::Ptrace(format!("waitpid: {e}")));
    }
    let since = Instant::now();
    loop {
        match waitpid(tid, Some(flags | WaitPidFlag::WNOHANG))
            .map_err(|e| StepError::Ptrace(format!("waitpid: {e}")))?
        {
            WaitStatus::StillAlive if interrupted.is_set() => return Ok(None),
            WaitStatus::StillAlive if others && since.elapsed() >= patience => return Ok(None),
            // Most calls return within microseconds; a long one is not spun on.
            WaitStatus::StillAlive if since.elapsed() < SPIN => std::thread::yield_now(),
            WaitStatus::StillAlive => std::thread::sleep(Duration::from_micros(500)),
            status => return Ok(Some(status)),
        }
    }
}

/// How long a system call's step is spun on before the wait sleeps between looks.
const SPIN: Duration = Duration::from_millis(1);

/// Whether `status` is thread `tid`'s PTRACE_EVENT_CLONE stop; then the new thread's id.
pub(super) fn clone_event(tid: Pid, status: &WaitStatus) -> Result<Option<Pid>, StepError> {
    match status {
        WaitStatus::PtraceEvent(_, _, event) if *event == ptrace::Event::PTRACE_EVENT_CLONE as i32 => {
            ptrace::getevent(tid)
                .map(|t| Some(Pid::from_raw(t as i32)))
                .map_err(|e| StepError::Ptrace(format!("PTRACE_GETEVENTMSG: {e}")))
        }
        _ => Ok(None),
    }
}

/// clone's and clone3's flags for the thread-id words the kernel writes.
const CLONE_VM: u64 = 0x100;
const CLONE_PIDFD: u64 = 0x1000;
const CLONE_PARENT_SETTID: u64 = 0x0010_0000;
const CLONE_CHILD_CLEARTID: u64 = 0x0020_0000;
const CLONE_CHILD_SETTID: u64 = 0x0100_0000;

/// The thread-id words a `clone` or `clone3` (`nr`, registers `before`) names: its flags,
/// and the parent's and the child's addresses (struct clone_args for clone3: flags at 0,
/// child_tid at 16, parent_tid at 24).
fn tid_words(tracee: &Tracee, nr: u64, before: &Regs) -> Option<(u64, u64, u64)> {
    let read = |at: u64| {
        let mut b = [0u8; 8];
        (tracee.read(at, &mut b) == 8).then(|| u64::from_le_bytes(b))
    };
    match nr {
        crate::sideband::nr::CLONE => Some((before.rdi, before.rdx, before.r10)),
        crate::sideband::nr::CLONE3 => Some((read(before.rdi)?, read(before.rdi + 24)?, read(before.rdi + 16)?)),
        _ => None,
    }
}

/// What a `clone` or `clone3` that created a thread made the kernel write besides what
/// the call's table says, read after the call: the new thread's id at the child's
/// CLONE_CHILD_SETTID address (in the memory the thread shares) and, for clone3, at
/// CLONE_PARENT_SETTID's, and the pidfd at CLONE_PIDFD's (glibc's pthread_create has the
/// kernel write the id into the thread's descriptor). For clone3 that is everything it
/// writes; `None` if its argument block cannot be read.
pub(super) fn clone_writes(tracee: &Tracee, nr: u64, before: &Regs) -> Option<Vec<MemoryWrite>> {
    let (flags, parent, child) = tid_words(tracee, nr, before)?;
    let mut at = Vec::new();
    if nr == crate::sideband::nr::CLONE3 {
        if flags & CLONE_PARENT_SETTID != 0 {
            at.push(parent);
        }
        if flags & CLONE_PIDFD != 0 {
            let mut b = [0u8; 8];
            (tracee.read(before.rdi + 8, &mut b) == 8).then_some(())?;
            at.push(u64::from_le_bytes(b));
        }
    }
    if flags & CLONE_CHILD_SETTID != 0 && flags & CLONE_VM != 0 {
        at.push(child);
    }
    at.into_iter()
        .filter(|&a| a != 0)
        .map(|a| {
            let mut word = [0u8; 4];
            (tracee.read(a, &mut word) == 4).then(|| MemoryWrite::new(a, &word))
        })
        .collect()
}

/// Where the kernel clears the id of the thread a `clone` or `clone3` creates when it ends
/// (CLONE_CHILD_CLEARTID), if it does.
pub(super) fn clear_tid(tracee: &Tracee, nr: u64, before: &Regs) -> Option<u64> {
    let (flags, _, child) = tid_words(tracee, nr, before)?;
    (flags & CLONE_CHILD_CLEARTID != 0 && child != 0).then_some(child)
}

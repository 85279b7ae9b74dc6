//! The plugin's side of the program's threads (`crate::threads`): a `clone` that creates
//! one, a thread's `exit`, the switches the engine writes and the registers logged at each
//! (in the recording's `signals.jsonl`, as the step backend logs them), and the threads
//! that still wait where the recording ends.

use rtit_recorder::qemu::engine::{Call, Counts};
use rtit_recorder::sideband::nr;
use rtit_replay_core::recording::{SignalEntry, ThreadSwitch};
use rtit_replay_core::syscall::MemoryWrite;

use super::Plugin;

/// CLONE_CHILD_CLEARTID: the kernel (here QEMU) clears the new thread's id at this address
/// when it ends, and wakes a futex there (how `pthread_join` waits).
const CLONE_CHILD_CLEARTID: u64 = 0x0020_0000;

/// The message a recording ends with at a thread the QEMU in use cannot record.
const NEEDS_REGISTERS: &str = "the program creates a thread, which the qemu backend records with QEMU 9.0 or later only (its plugins read a thread's registers): run `rtit build-qemu` once (it builds QEMU 10, which `rtit record` then takes), or record with `--backend step`";

/// The message a recording ends with at a fork while a thread waits inside QEMU.
pub(super) const FORK_BLOCKED: &str = "the program forks while one of its threads, interrupted by rtit, waits inside QEMU's execution loop, where QEMU's fork would wait for it for ever: the recording stops here, and the program runs on";

/// The message a recording ends with where QEMU waits for a thread rtit holds.
const STALLED: &str = "QEMU stopped every thread (a signal, a flush of its translations) while one of the program's threads, interrupted by rtit, waited for its turn inside QEMU's execution loop: the recording stops here, and the program runs on";

/// What the threads of the program keep of the plugin's.
#[derive(Debug, Default)]
pub(super) struct Threads {
    /// The switches the engine wrote, as `signals.jsonl` entries.
    pub(super) switches: Vec<SignalEntry>,
    /// Where each thread's id is cleared when it ends, by thread id.
    clear_tid: std::collections::HashMap<i64, u64>,
}

impl Plugin {
    /// What a `clone` that creates a thread does to the recording: the program has threads
    /// from now on, if this QEMU lets the plugin read their registers.
    pub(super) fn thread_created(&mut self) -> Call {
        if !crate::threads::supported() {
            return Call::Stops(NEEDS_REGISTERS.into());
        }
        if !self.engine.threaded() {
            crate::threads::begin();
            self.engine.set_threaded();
        }
        Call::Returns
    }

    /// A thread waiting for its turn inside QEMU's execution loop found QEMU waiting for it
    /// (`crate::threads::preempt`): the recording ends where the engine is, and the program
    /// runs on unrecorded.
    pub fn stall(&mut self) {
        self.take_blocks(usize::MAX);
        self.engine.stop();
        self.syscall_record = None;
        self.stop_and_run_on(Counts::default(), STALLED.into());
    }

    /// Where the running thread parks as block `block` is about to start (`crate::park`):
    /// the position of its first instruction and its address, the engine brought up to
    /// date; `None` if not tracing, if the block before was cut short, or if the block ends
    /// in a far transfer (the next block parks).
    ///
    /// A block that ends in a system call may end the thread's turn there, and the engine
    /// keeps such a block until its thread runs again (`threads`): its first instruction
    /// then goes after what the others ran meanwhile, not at the position it would have
    /// now. Parked before a futex wait in `pthread_join`, an anchor had the joining thread's
    /// registers where a worker went on.
    pub fn parked_at(&mut self, block: rtit_recorder::qemu::engine::Started) -> Option<(u64, u64)> {
        self.take_blocks(usize::MAX);
        if !self.engine.tracing() || self.engine.ended() {
            return None;
        }
        if matches!(
            self.engine.block(block.id).last().cofi,
            rtit_replay_core::cofi::Cofi::Far(_)
        ) {
            return None;
        }
        // As `rtit record` places a stop between blocks: the running block's base and the
        // instructions of it that started (a system call's block, settled already, counts
        // whole), where the block before ran whole.
        let base = self.engine.block_base()?;
        let whole = (self.engine.pending_kept()).map_or(true, |kept| block.before.started == kept as u64);
        whole.then(|| (base + block.before.started, self.engine.block(block.id).start()))
    }

    /// Whether call `number` (arguments `a`) creates a process while a thread waits inside
    /// QEMU's execution loop (`crate::threads::preempt`): QEMU forks in an exclusive section,
    /// which waits for every thread in that loop to leave it.
    pub(super) fn fork_blocked(&self, number: u64, a: [u64; 6]) -> bool {
        if !crate::threads::waiting_inside() {
            return false;
        }
        let flags = match number {
            nr::CLONE3 => self.read_u64(a[0]).unwrap_or(0),
            _ => a[0],
        };
        nr::creates_process(number, flags).is_some()
    }

    /// Whether an `exit` ends one thread of several (not the process).
    pub(super) fn thread_exit(&self, number: u64) -> bool {
        number == nr::EXIT && crate::threads::on() && !crate::threads::last_alive()
    }

    /// A thread's `exit` retired (its log entry, if traced, in `record`): the id it clears
    /// as it ends is logged with it, and the next thread's turn comes.
    pub(super) fn thread_ends(&mut self, record: Option<rtit_replay_core::syscall::SyscallRecord>) {
        let tid = crate::threads::tid();
        if let Some(mut r) = record {
            if let Some(&at) = self.threads.clear_tid.get(&tid) {
                r.writes.push(MemoryWrite::new(at, &[0; 4]));
            }
            r.complete = true;
            self.syscalls.push(r);
        }
        self.threads.clear_tid.remove(&tid);
        crate::threads::exit();
    }

    /// A call returned `ret`: a thread it created, and where a thread's id is cleared.
    pub(super) fn note_thread(&mut self, number: u64, a: [u64; 6], ret: i64) {
        match number {
            nr::SET_TID_ADDRESS => {
                self.threads.clear_tid.insert(crate::threads::tid(), a[0]);
            }
            nr::CLONE | nr::CLONE3 if ret > 0 && crate::threads::on() => {
                let (flags, child_tid) = match number {
                    nr::CLONE => (a[0], Some(a[3])),
                    _ => (self.read_u64(a[0]).unwrap_or(0), self.read_u64(a[0] + 16)),
                };
                if flags & nr::CLONE_THREAD == 0 {
                    return;
                }
                crate::threads::created();
                if let Some(at) = child_tid.filter(|&at| flags & CLONE_CHILD_CLEARTID != 0 && at != 0) {
                    self.threads.clear_tid.insert(ret, at);
                }
            }
            _ => {}
        }
    }

    /// The engine reached a switch's mark: the switch, logged with the incoming thread's
    /// registers where it resumes.
    pub(super) fn settle_switch(&mut self) {
        let Some((s, mut registers)) = crate::threads::take_switch() else {
            self.notes.push("a switch's mark in the ring without its switch".into());
            return;
        };
        if self.capture.take().is_some() {
            self.notes
                .push("the engine's capture ends at the first switch between threads".into());
        }
        let Some((position, ip)) = self.engine.switch(s) else {
            if self.engine.tracing() && !self.engine.ended() {
                self.notes.push(format!(
                    "a switch from thread {} to {} that the engine could not place",
                    s.from, s.to
                ));
            }
            return;
        };
        // A resumed call's address (QEMU's rip is past it by then), or a new thread's first.
        registers.insert("rip".into(), format!("{ip:#x}"));
        let rsp = hex(registers.get("rsp")).unwrap_or(0);
        self.threads.switches.push(SignalEntry {
            position,
            ip,
            registers,
            frame: MemoryWrite::new(rsp, &[]),
            only_kernel: true,
            switch: Some(ThreadSwitch { from: s.from, to: s.to }),
        });
    }

    /// Where the recording ends (one past its last position), an entry from and to each
    /// thread that waits, with its registers: no later switch tells them.
    pub(super) fn waiting_threads(&self) -> Vec<SignalEntry> {
        let position = self.engine.position();
        let mut ends: Vec<SignalEntry> = crate::threads::parked()
            .into_iter()
            .map(|(tid, mut registers)| {
                let ip = self
                    .engine
                    .waiting_at(tid)
                    .or_else(|| hex(registers.get("rip")))
                    .unwrap_or(0);
                registers.insert("rip".into(), format!("{ip:#x}"));
                let rsp = hex(registers.get("rsp")).unwrap_or(0);
                SignalEntry {
                    position,
                    ip,
                    registers,
                    frame: MemoryWrite::new(rsp, &[]),
                    only_kernel: true,
                    switch: Some(ThreadSwitch { from: tid, to: tid }),
                }
            })
            .collect();
        ends.sort_by_key(|e| e.switch.map(|s| s.to));
        ends
    }
}

fn hex(v: Option<&String>) -> Option<u64> {
    u64::from_str_radix(v?.trim_start_matches("0x"), 16).ok()
}

//! The program's threads (issue 43). QEMU user mode runs each guest thread on a vCPU of its
//! own, truly in parallel; the plugin lets one run at a time (`turns`), as rr runs its
//! tracees on one core, so that the blocks of all of them go into the ring in one order and
//! memory is exactly what that order wrote. A thread's turn ends at a system call's entry
//! (except for calls that never wait: see [`passes_turn`]), where it may wait in the kernel
//! for another thread; it takes its turn again when the call returns and a thread of the
//! program gave it up. A thread that runs on without a system call while another waits is
//! interrupted before a block ([`preempt`]); it waits for its turn there, inside QEMU's
//! execution loop, the one place a plugin can hold it (QEMU's exclusive sections, which
//! wait for every thread in that loop, come from a fork, a flush of all translations, a
//! 17th thread: a fork then ends the recording first, see `state::threads`). The engine writes a switch as the hardware writes one between
//! threads that share a logical processor (`rtit_recorder::qemu::engine::Switch`), and the
//! incoming thread's registers, read where it stopped running, are logged there.
//!
//! Needs QEMU 9.0 or later (plugin API 2), whose plugins read registers; under 7.2 the
//! recording stops before the first thread, as before.
#![allow(unsafe_code)]

mod turns;

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use rtit_recorder::outcome::RegisterMap;
use rtit_recorder::qemu::engine::{Counts, Left, Resume, Started, Switch, SWITCH_MARK};
use rtit_recorder::sideband::nr;

pub use turns::{created, last_alive, nobody_runs, parked};

/// Set once the program created a thread: from then on system calls pass the turn.
static THREADED: AtomicBool = AtomicBool::new(false);

/// The switches pushed into the ring (as [`SWITCH_MARK`]s), in order, with the incoming
/// thread's registers, for the engine's thread.
static SWITCHES: Mutex<VecDeque<(Switch, RegisterMap)>> = Mutex::new(VecDeque::new());

/// A system call this thread left its turn at: its number, arguments and block's counts.
#[derive(Debug, Clone, Copy)]
pub struct LeftAt {
    pub number: u64,
    pub args: [u64; 6],
    pub counts: Counts,
}

thread_local! {
    /// The call this thread left its turn at, until it returns.
    static LEFT_AT: Cell<Option<LeftAt>> = const { Cell::new(None) };
}

/// The calling thread's id (QEMU user mode gives the program the host's thread ids).
pub fn tid() -> i64 {
    i64::from(nix::unistd::gettid().as_raw())
}

/// Whether a thread can be recorded: this QEMU lets the plugin read registers.
pub fn supported() -> bool {
    crate::registers::available()
}

/// Whether the program has threads.
pub fn on() -> bool {
    THREADED.load(Ordering::Relaxed)
}

/// The running thread creates the program's first other thread.
pub fn begin() {
    turns::begin(tid());
    THREADED.store(true, Ordering::Relaxed);
}

/// Whether a thread gives up its turn at system call `number`: every call that may wait
/// in the kernel, not those that change what the plugin or the engine does next (thread
/// and process creation, exits, execve), nor `rt_sigreturn`, which never waits and whose
/// return sets every register from the signal frame.
pub fn passes_turn(number: u64) -> bool {
    on() && !matches!(
        number,
        nr::CLONE
            | nr::CLONE3
            | nr::FORK
            | nr::VFORK
            | nr::RT_SIGRETURN
            | nr::EXIT
            | nr::EXIT_GROUP
            | nr::EXECVE
            | nr::EXECVEAT
    )
}

/// At the entry of a call that [`passes_turn`]: the thread leaves its turn there, its
/// registers (before the call) kept for where it resumes.
pub fn leave(call: LeftAt) {
    let registers = crate::registers::state();
    LEFT_AT.set(Some(call));
    turns::leave(tid(), Left::Syscall(call.counts), Some(turns::Parked { registers }));
}

/// At a call's return: if the thread left its turn at it, waits for its turn, and returns
/// the call, which the caller notes now (its place in the ring is here: after the switch,
/// if another thread ran meanwhile). `None` if it did not leave, or the recording is over.
pub fn back(vcpu: u32) -> Option<LeftAt> {
    let call = LEFT_AT.take()?;
    let came = turns::wait(tid(), None, false).ok()?;
    switch_in(vcpu, came, Resume::Syscall, call.counts);
    Some(call)
}

/// A new thread's vCPU starts (QEMU 9.0 and later run this on the thread, outside its
/// execution loop, before its first block): it waits for its turn.
pub fn arrive(vcpu: u32) {
    if !on() {
        return;
    }
    let registers = crate::registers::state();
    let rip = registers
        .get("rip")
        .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0);
    if let Ok(came) = turns::wait(tid(), Some(turns::Parked { registers }), false) {
        switch_in(vcpu, came, Resume::Fresh(rip), Counts::default());
    }
}

/// The thread got its turn: if another ran last, its blocks are counted on this vCPU's
/// counter from now on (the block it is in having `counts` started: a system call's block,
/// for a stop between its return and the next block to place), and the switch goes into
/// the ring.
fn switch_in(vcpu: u32, came: turns::Came, resume: Resume, counts: Counts) {
    let Some((from, left)) = came.from else { return };
    crate::versioned::runs(vcpu);
    crate::ring::restart(counts);
    let s = Switch {
        from,
        left,
        to: tid(),
        resume,
    };
    lock().push_back((s, came.registers));
    crate::push(Started {
        id: SWITCH_MARK,
        before: Counts::default(),
    });
}

/// Another thread waited long enough for its turn (`published::PREEMPT`) and block `next`
/// is about to start on this one (`counts`: the block before's): this thread leaves its
/// turn there and waits for it, unless `rtit record` is about to stop the program
/// (`published::HOLD`: then at a later block). Its registers are those before the block
/// (QEMU's state at a block's start is whole; its rip may be stale, and the block's address
/// is the engine's). If QEMU comes to wait for it meanwhile (an exclusive section: a stop
/// of its gdbstub for a signal, a flush of its translations), the recording ends here and
/// the program runs on.
pub fn preempt(vcpu: u32, next: u32, counts: Counts) -> Preempted {
    use crate::published::{HOLD, INSIDE};
    INSIDE.fetch_add(1, Ordering::SeqCst);
    if HOLD.load(Ordering::SeqCst) != 0 {
        INSIDE.fetch_sub(1, Ordering::SeqCst);
        return Preempted::Not;
    }
    crate::published::open(crate::published::PREEMPT);
    let tid = tid();
    let registers = crate::registers::state_in_loop();
    turns::leave(tid, Left::Preempted { counts, next }, Some(turns::Parked { registers }));
    let came = turns::wait(tid, None, true);
    INSIDE.fetch_sub(1, Ordering::SeqCst);
    match came {
        Ok(came) => {
            switch_in(vcpu, came, Resume::Block(next), Counts::default());
            Preempted::Resumed
        }
        Err(turns::Gone::Over) => Preempted::Resumed,
        Err(turns::Gone::Stalled) => Preempted::Stalled,
    }
}

/// What came of [`preempt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preempted {
    /// `rtit record` is about to stop the program: the thread goes on, for now.
    Not,
    /// The thread had its turn again (or the recording is over and it runs on).
    Resumed,
    /// QEMU waits for the thread to leave its execution loop: the caller ends the
    /// recording, and the program runs on.
    Stalled,
}

/// Whether a thread waits inside QEMU's execution loop: a fork would wait for it for ever
/// (QEMU forks in an exclusive section).
pub fn waiting_inside() -> bool {
    crate::published::INSIDE.load(Ordering::SeqCst) > 0
}

/// The running thread ends (its `exit`, which the engine retired): the next one's turn.
pub fn exit() {
    turns::leave(tid(), Left::Exited, None);
}

/// The next switch the engine reached, in the ring's order.
pub fn take_switch() -> Option<(Switch, RegisterMap)> {
    lock().pop_front()
}

fn lock() -> std::sync::MutexGuard<'static, VecDeque<(Switch, RegisterMap)>> {
    SWITCHES.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

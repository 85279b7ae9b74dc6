//! What is read and written without the plugin's lock, each on cache lines of its own: the
//! inline counter QEMU's translated code adds to, the flags the vCPU's callback reads at
//! every block, the position and the handler table `rtit record` reads from outside, the
//! signal delivery it writes from outside, the request to stop, and whether this process is a child the program forked.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// A value on cache lines of its own: the vCPU's translated code adds to the counters at
/// every instruction and its callback reads the flags at every block, while the feeder
/// thread writes the plugin's state (which lives in `shared::PLUGIN`) and the position on another
/// core; sharing a line made each wait for the other (a flag beside the plugin's state took
/// half the vCPU's callback). 128 bytes: a line and the one the prefetcher pairs with it.
#[repr(align(128))]
pub struct Line<T>(pub T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Instructions of blocks that reached their last instruction, since QEMU started: an inline
/// add of the block's count before its last instruction (one a block: an add before every
/// instruction took a fifth of QEMU's thread, issue 20). A block cut short before its last
/// instruction (a fault, a store into the block) adds nothing; where it stopped is then told
/// by what follows it (see `rtit_recorder::qemu::engine`). Only ever added to: the callbacks
/// read it and take differences, as a swap per block (a locked instruction on a line the
/// translated code had just written) cost a tenth of a recording.
pub static STARTED: Line<AtomicU64> = Line(AtomicU64::new(0));

/// The position before the running block while tracing, else `u64::MAX`, with the engine up
/// to date (the ring empty, `ring::PUSHED` = `ring::TAKEN`): `rtit record --truth` and the
/// signal-handler log read it (with [`STARTED`] and `ring::BLOCK_STARTED`) from outside while
/// QEMU's gdbstub holds the program between two blocks, to place what they read.
pub static POSITION: Line<AtomicU64> = Line(AtomicU64::new(u64::MAX));
/// The first address of the block the engine has pending (the running one, once the engine
/// is up to date), 0 if none: `rtit record` reads it, with [`POSITION`], where the running
/// block was cut short (its count is 0), to count its instructions up to the stop.
pub static PENDING_START: Line<AtomicU64> = Line(AtomicU64::new(0));
/// Where the program was when QEMU's gdbstub last reported a signal that goes to no handler
/// of the program's, as `rtit record` reads it there (0: none yet): if that signal ends the
/// program within a block, the instruction it faulted at (the counts do not say which).
pub static FAULTED: Line<AtomicU64> = Line(AtomicU64::new(0));
/// Whether the engine traces: until it does, each block goes to it at once on the vCPU
/// (`Plugin::take_now`), not through the ring.
pub static TRACING: Line<AtomicBool> = Line(AtomicBool::new(false));

/// The handler the program installed for each signal (0: default, 1: ignored), as its
/// successful `rt_sigaction` calls set them: `rtit record` reads it from outside when QEMU's
/// gdbstub reports a signal, to stop the program at the handler's entry and log it.
pub static HANDLERS: [AtomicU64; 65] = [const { AtomicU64::new(0) }; 65];

/// A signal delivery `rtit record` saw at a handler's entry, while QEMU's gdbstub held the
/// program there with the engine up to date: the handler's address, where the interrupted
/// code resumes (the signal frame's saved RIP), and the signal (Linux's number); 0 in the
/// first word once the engine has it. Written from outside, between two blocks; the engine
/// takes it before the handler's block (`Engine::signal_delivered`), the next one pushed.
pub static DELIVERED: Line<[AtomicU64; 3]> = Line([const { AtomicU64::new(0) }; 3]);

/// Threads waiting for their turn inside QEMU's execution loop (`threads::preempt`):
/// `rtit record` stops the program (a sample, an anchor) only while none does, since QEMU
/// 10.0's gdbstub flushes its translations at a stop, in an exclusive section that would
/// wait for them for ever.
pub static INSIDE: Line<AtomicU64> = Line(AtomicU64::new(0));
/// Set by `rtit record` (from outside) while it is about to stop the program: no thread is
/// interrupted meanwhile (see [`INSIDE`]).
pub static HOLD: Line<AtomicU64> = Line(AtomicU64::new(0));

/// The id of the program's thread whose turn it is (`threads`; 0: nobody's, or the program
/// has one thread): `rtit record` sends it the sample signal, which a thread waiting for its
/// turn would handle only once it runs again.
pub static RUNNING: Line<AtomicU64> = Line(AtomicU64::new(0));

/// Set by `rtit record` (from outside) when it wants an anchor while a thread waits inside
/// QEMU's execution loop, where QEMU's gdbstub cannot stop the program (see [`INSIDE`]):
/// the running thread parks at its next block instead (`park`).
pub static PARK: Line<AtomicU64> = Line(AtomicU64::new(0));
/// Set by the running thread once parked, with where ([`PARKED_AT`]) and its registers
/// ([`PARKED_REGISTERS`]); cleared as it goes on.
pub static PARKED: Line<AtomicU64> = Line(AtomicU64::new(0));
/// The position of the instruction the parked thread stops before, and the length of
/// [`PARKED_REGISTERS`]' text.
pub static PARKED_AT: Line<[AtomicU64; 2]> = Line([const { AtomicU64::new(0) }; 2]);
/// The parked thread's registers, as JSON (name → hex value).
pub static PARKED_REGISTERS: Line<[AtomicU8; 4096]> = Line([const { AtomicU8::new(0) }; 4096]);

/// The signal `rtit record` received, once it asks the recording to stop (0: it has not).
/// The vCPU reads it at every block, before taking the lock.
pub static STOP: Line<AtomicI32> = Line(AtomicI32::new(0));

/// Set in a child the program forked (QEMU forks itself for the guest's fork): the child
/// runs unrecorded and must write nothing into the parent's files. Read before taking the
/// lock, which the child may have inherited held. Set too once the recording stopped before
/// something it cannot follow, while the program runs on unrecorded ([`go_inert`]).
pub static INERT: Line<AtomicBool> = Line(AtomicBool::new(false));

/// In a forked child, before anything else runs there (`pthread_atfork`): no callback of
/// the child touches the plugin from then on.
pub extern "C" fn forked_child() {
    go_inert();
}

/// No callback touches the plugin from now on, and the vCPU's leaves the ring alone.
pub fn go_inert() {
    INERT.store(true, Ordering::Relaxed);
    close(INERT_SET);
}

/// Why the vCPU's callback cannot just note the block in the ring, as bits ([`INERT_SET`],
/// [`STOPPING`], [`NOT_TRACING`]; 0: it can): one word the callback reads at every block,
/// where it read three flags on three lines (issue 20: the callback is QEMU's cost at every
/// block). Each flag stays where its readers read it; this sums them up for the callback.
pub static GATE: Line<AtomicU32> = Line(AtomicU32::new(NOT_TRACING));
/// [`INERT`] is set.
pub const INERT_SET: u32 = 1;
/// [`STOP`] is set.
pub const STOPPING: u32 = 2;
/// [`TRACING`] is not set.
pub const NOT_TRACING: u32 = 4;
/// A thread waited long enough for its turn: the one that runs is interrupted
/// (`threads`).
pub const PREEMPT: u32 = 8;
/// [`PARK`] is set.
pub const PARKING: u32 = 16;

/// Sets `bit` of [`GATE`].
pub fn close(bit: u32) {
    GATE.fetch_or(bit, Ordering::Relaxed);
}

/// Clears `bit` of [`GATE`].
pub fn open(bit: u32) {
    GATE.fetch_and(!bit, Ordering::Relaxed);
}

/// Whether this process is a forked child of the recorded one.
#[inline]
pub fn inert() -> bool {
    INERT.load(Ordering::Relaxed)
}

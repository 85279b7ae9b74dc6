//! What QEMU's callbacks, the stop thread and a forked child share: the plugin behind its
//! lock, the inline counters, the request to stop, and whether this process is a child the
//! program forked.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use crate::state::Plugin;

/// A value on cache lines of its own: the vCPU's translated code adds to the counters at
/// every instruction and its callback reads the flags at every block, while the feeder
/// thread writes the plugin's state (which lives in [`PLUGIN`]) and the position on another
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

/// Instructions that started since QEMU started (an inline add before each instruction of
/// every block). Only ever added to: the callbacks read it and take differences, as a swap
/// per block (a locked instruction on a line the translated code had just written) cost a
/// tenth of a recording.
pub static STARTED: Line<AtomicU64> = Line(AtomicU64::new(0));
/// Completed memory accesses of blocks' last instructions since QEMU started (an inline add
/// after each).
pub static ACCESSED: Line<AtomicU64> = Line(AtomicU64::new(0));

/// The position before the running block while tracing, else `u64::MAX`, with the engine up
/// to date (the ring empty, `ring::PUSHED` = `ring::TAKEN`): `rtit record --truth` and the
/// signal-handler log read it (with [`STARTED`] and `ring::BLOCK_STARTED`) from outside while
/// QEMU's gdbstub holds the program between two blocks, to place what they read.
pub static POSITION: Line<AtomicU64> = Line(AtomicU64::new(u64::MAX));
/// Whether the engine traces: until it does, each block goes to it at once on the vCPU
/// (`Plugin::take_now`), not through the ring.
pub static TRACING: Line<AtomicBool> = Line(AtomicBool::new(false));

/// The handler the program installed for each signal (0: default, 1: ignored), as its
/// successful `rt_sigaction` calls set them: `rtit record` reads it from outside when QEMU's
/// gdbstub reports a signal, to stop the program at the handler's entry and log it.
pub static HANDLERS: [AtomicU64; 65] = [const { AtomicU64::new(0) }; 65];

/// The plugin; `None` once it has finished.
pub static PLUGIN: Line<Mutex<Option<Plugin>>> = Line(Mutex::new(None));

/// The signal `rtit record` received, once it asks the recording to stop (0: it has not).
/// The vCPU reads it at every block, before taking the lock.
pub static STOP: Line<AtomicI32> = Line(AtomicI32::new(0));

/// Set in a child the program forked (QEMU forks itself for the guest's fork): the child
/// runs unrecorded and must write nothing into the parent's files. Read before taking the
/// lock, which the child may have inherited held.
pub static INERT: Line<AtomicBool> = Line(AtomicBool::new(false));

/// Runs `f` on the plugin, if it has not finished.
pub fn with_plugin<R>(f: impl FnOnce(&mut Plugin) -> R) -> Option<R> {
    let mut guard = lock();
    guard.as_mut().map(f)
}

/// Spins for the lock before sleeping on it: it is held for a batch of blocks at most (tens
/// of microseconds), while a sleep and a wake-up through the kernel took longer than that,
/// and the vCPU and the feeder waking each other so made recordings several times slower.
pub fn lock() -> MutexGuard<'static, Option<Plugin>> {
    for _ in 0..SPINS {
        match PLUGIN.try_lock() {
            Ok(guard) => return guard,
            Err(TryLockError::Poisoned(e)) => return e.into_inner(),
            Err(TryLockError::WouldBlock) => std::hint::spin_loop(),
        }
    }
    PLUGIN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Tries of [`lock`] before it sleeps: about a millisecond.
const SPINS: u32 = 1 << 16;

/// In a forked child, before anything else runs there (`pthread_atfork`): no callback of
/// the child touches the plugin from then on.
pub extern "C" fn forked_child() {
    INERT.store(true, Ordering::Relaxed);
}

/// Whether this process is a forked child of the recorded one.
#[inline]
pub fn inert() -> bool {
    INERT.load(Ordering::Relaxed)
}

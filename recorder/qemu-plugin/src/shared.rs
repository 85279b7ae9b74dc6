//! What QEMU's callbacks, the stop thread and a forked child share: the plugin behind its
//! lock, the inline counters, the request to stop, and whether this process is a child the
//! program forked.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Mutex;

use rtit_recorder::qemu::engine::Counts;

use crate::state::Plugin;

/// Instructions of the running block that started (an inline add before each).
pub static STARTED: AtomicU64 = AtomicU64::new(0);
/// Completed memory accesses of the running block's last instruction (an inline add after
/// each).
pub static ACCESSED: AtomicU64 = AtomicU64::new(0);

/// The position before the running block while tracing, else `u64::MAX`: `rtit record
/// --truth` reads it (with [`STARTED`]) from outside while QEMU's gdbstub holds the program
/// between two blocks, to place a register sample.
pub static POSITION: AtomicU64 = AtomicU64::new(u64::MAX);

/// The handler the program installed for each signal (0: default, 1: ignored), as its
/// successful `rt_sigaction` calls set them: `rtit record` reads it from outside when QEMU's
/// gdbstub reports a signal, to stop the program at the handler's entry and log it.
pub static HANDLERS: [AtomicU64; 65] = [const { AtomicU64::new(0) }; 65];

/// The plugin; `None` once it has finished.
pub static PLUGIN: Mutex<Option<Plugin>> = Mutex::new(None);

/// The signal `rtit record` received, once it asks the recording to stop (0: it has not).
/// The vCPU reads it at every block, before taking the lock.
pub static STOP: AtomicI32 = AtomicI32::new(0);

/// Set in a child the program forked (QEMU forks itself for the guest's fork): the child
/// runs unrecorded and must write nothing into the parent's files. Read before taking the
/// lock, which the child may have inherited held.
pub static INERT: AtomicBool = AtomicBool::new(false);

/// Runs `f` on the plugin, if it has not finished.
pub fn with_plugin<R>(f: impl FnOnce(&mut Plugin) -> R) -> Option<R> {
    let mut guard = PLUGIN.lock().unwrap_or_else(|e| e.into_inner());
    guard.as_mut().map(f)
}

/// The running block's counters; `reset` starts the next block's.
pub fn counts(reset: bool) -> Counts {
    if reset {
        Counts {
            started: STARTED.swap(0, Ordering::Relaxed),
            accessed: ACCESSED.swap(0, Ordering::Relaxed),
        }
    } else {
        Counts {
            started: STARTED.load(Ordering::Relaxed),
            accessed: ACCESSED.load(Ordering::Relaxed),
        }
    }
}

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

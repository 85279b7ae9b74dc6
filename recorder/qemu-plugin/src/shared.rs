//! The plugin behind its lock, as QEMU's callbacks, the feeder and the stop thread take it,
//! and how the plugin starts threads of its own.

use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, TryLockError};

use crate::published::Line;
use crate::ring::WANTED;
use crate::state::Plugin;

/// The plugin; `None` once it has finished.
pub static PLUGIN: Line<Mutex<Option<Plugin>>> = Line(Mutex::new(None));

/// Runs `f` on the plugin, if it has not finished.
pub fn with_plugin<R>(f: impl FnOnce(&mut Plugin) -> R) -> Option<R> {
    let mut guard = lock();
    guard.as_mut().map(f)
}

/// The recording is over while the program runs on (`Plugin::stop_and_run_on`): no plugin
/// from now on, as after the program's end.
pub fn retire() {
    drop(lock().take());
}

/// The lock, for any thread but the feeder: the feeder's batch ends early while one waits
/// (`ring::WANTED`).
pub fn lock() -> MutexGuard<'static, Option<Plugin>> {
    WANTED.fetch_add(1, Ordering::Relaxed);
    let guard = lock_as_feeder();
    WANTED.fetch_sub(1, Ordering::Relaxed);
    guard
}

/// Spins for the lock before sleeping on it: it is held for a batch of blocks at most (tens
/// of microseconds), while a sleep and a wake-up through the kernel took longer than that,
/// and the vCPU and the feeder waking each other so made recordings several times slower.
pub fn lock_as_feeder() -> MutexGuard<'static, Option<Plugin>> {
    for _ in 0..SPINS {
        match PLUGIN.try_lock() {
            Ok(guard) => return guard,
            Err(TryLockError::Poisoned(e)) => return e.into_inner(),
            Err(TryLockError::WouldBlock) => std::hint::spin_loop(),
        }
    }
    PLUGIN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Tries of [`lock_as_feeder`] before it sleeps: about a millisecond.
const SPINS: u32 = 1 << 16;

/// Starts a thread of the plugin's own that blocks every signal: QEMU's signal handlers
/// assume they run on a vCPU thread, and, like QEMU's own threads, this one inherits the mask
/// it is created with.
pub fn spawn_quiet(name: &str, stack: usize, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
    let mut old = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), Some(&mut old))
        .map_err(|e| format!("pthread_sigmask: {e}"))?;
    let spawned = std::thread::Builder::new().name(name.into()).stack_size(stack).spawn(f);
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    spawned
        .map(drop)
        .map_err(|e| format!("cannot start the {name} thread: {e}"))
}

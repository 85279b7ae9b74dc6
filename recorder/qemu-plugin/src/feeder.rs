//! The feeder thread: runs the retirement engine on the blocks the vCPU notes in the ring
//! (`ring`), beside the vCPU on another core, so that QEMU runs the program while the engine
//! encodes what it ran (issue 20). It takes a batch at a time under the plugin's lock; the
//! vCPU takes the lock only where it needs the engine up to date (system calls, the end, a
//! full ring). It takes blocks a few hundred at a time and naps in between.

use std::time::Duration;

use crate::published::inert;
use crate::ring;

/// Blocks taken per hold of the lock: the vCPU, waiting for it at a system call, waits for
/// at most this many (a few tens of microseconds).
pub const BATCH: usize = 1024;

/// Blocks waiting before the feeder takes them while the vCPU keeps adding: taking each
/// as soon as it comes made the two cores pass the ring's cache lines back and forth.
const MIN_BATCH: u64 = 256;

/// A nap between looks (the program sits in a system call, QEMU translates, or fewer than
/// [`MIN_BATCH`] blocks came).
const NAP: Duration = Duration::from_micros(20);

/// Starts the thread.
pub fn start() -> Result<(), String> {
    crate::shared::spawn_quiet("rtit-feeder", 1 << 20, run)
}

fn run() {
    // Blocks pushed in all when the feeder last napped: a few blocks left waiting are taken
    // once the vCPU stopped adding (QEMU's gdbstub holds the program, which `rtit record`
    // reads only once the engine caught up).
    let mut before_nap = u64::MAX;
    loop {
        if inert() {
            return;
        }
        crate::park::mirror();
        let (waiting, pushed) = ring::waiting();
        if waiting == 0 || (waiting < MIN_BATCH && pushed != before_nap) {
            before_nap = pushed;
            std::thread::sleep(NAP);
            continue;
        }
        let mut guard = crate::shared::lock_as_feeder();
        let Some(plugin) = guard.as_mut() else {
            // The plugin finished: nothing more to feed.
            return;
        };
        plugin.take_batch(BATCH);
    }
}

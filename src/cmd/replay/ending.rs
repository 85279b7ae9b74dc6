//! How `rtit replay` ends. The first replay of a long recording writes its history beside
//! it in the background (gigabytes, see `timeline::cache`); whichever way rtit ends first
//! (the gdb it started quits, an error, Ctrl-C or SIGTERM/SIGHUP, a recording refused while
//! serving), the temporary it was writing is removed, not left until a later replay clears
//! stale ones.
//!
//! SIGTERM, SIGHUP and Ctrl-C (unless the gdb rtit started runs: then Ctrl-C is gdb's) are
//! handled on a thread of their own. Without a gdb rtit ends there and then; with one the
//! signal is passed on to that gdb, so that it does not linger on the terminal talking to
//! no one, and rtit ends once gdb has.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use anyhow::{Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rtit_replay_core::timeline::cache;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The gdb rtit started and is waiting for (0: none), for the signal thread to pass a
/// signal on to.
static GDB: AtomicU32 = AtomicU32::new(0);

/// The signal that is ending rtit, once one came (0: none).
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

/// Handles the signals that end rtit, on a thread of its own, from now on. Ctrl-C while the
/// gdb rtit started runs is that gdb's (it interrupts a `continue`), and rtit must outlive it
/// to answer; a second SIGTERM or SIGHUP ends rtit at once, should gdb not quit on the first.
pub fn handle_signals() -> Result<()> {
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP]).context("cannot handle signals")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let gdb = GDB.load(Ordering::SeqCst);
                if signal == SIGINT && gdb != 0 {
                    continue;
                }
                // The first signal is the one rtit says it ended by.
                let first = SIGNALLED
                    .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok();
                if gdb == 0 || !first {
                    exit(128 + SIGNALLED.load(Ordering::SeqCst));
                }
                // gdb quits on SIGTERM and SIGHUP; `gdb_ended` then ends rtit.
                if let Ok(signal) = Signal::try_from(signal) {
                    let _ = kill(Pid::from_raw(gdb as i32), signal);
                }
            }
        })
        .context("cannot start the signal thread")?;
    Ok(())
}

/// The gdb rtit waits for from now on.
pub fn gdb_started(pid: u32) {
    GDB.store(pid, Ordering::SeqCst);
}

/// After the gdb rtit started has ended: if a signal ended it, rtit ends too, with the
/// signal's status (128 + its number, as a shell reports a process it killed).
pub fn gdb_ended() {
    GDB.store(0, Ordering::SeqCst);
    match SIGNALLED.load(Ordering::SeqCst) {
        0 => {}
        signal => exit(128 + signal),
    }
}

/// Ends rtit with `code` (and the signal's name, if one ended it), after removing the history
/// it was storing and the files of the gdb it started.
pub fn exit(code: i32) -> ! {
    abandon_stores();
    super::gdb_files::remove();
    match SIGNALLED.load(Ordering::SeqCst) {
        0 => {}
        signal => {
            let name = Signal::try_from(signal).map_or_else(|_| format!("signal {signal}"), |s| s.to_string());
            eprintln!("rtit: ended by {name}");
        }
    }
    std::process::exit(code)
}

/// Removes the history being stored, if any, and says so: the next replay decodes again.
pub fn abandon_stores() {
    if cache::abandon_stores() > 0 {
        eprintln!(
            "rtit: the history was not kept beside the recording (rtit ended before it was written); the next replay decodes it again"
        );
    }
}

/// Removes the history being stored when dropped: `run` returning, with an error or after
/// its gdb quit, ends rtit.
pub struct AbandonOnDrop;

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        abandon_stores();
    }
}

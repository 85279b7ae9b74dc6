//! What a long monitor command tells gdb while it works, so that gdb keeps waiting for the
//! answer.

use gdbstub::output;
use gdbstub::outputln;
use gdbstub::target::ext::monitor_cmd::ConsoleOutput;

/// How long a monitor command waits for a history still being decoded before it tells gdb it
/// is waiting, and then between two console packets: each restarts gdb's wait for the
/// answer (its default remote timeout is 2 s), so the command can wait as long as the decode
/// takes. It gave up after one second before, and a script's `monitor goto` right after
/// connecting to a large recording was skipped, every answer after it about position 0. Half
/// a second, not one: on a loaded machine a dot came more than 2 s after the last, gdb gave up
/// and NACKed the next packet, and gdbstub (which does not retransmit) dropped the connection.
pub(crate) const HISTORY_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// What a long monitor command tells gdb while it works: after half a second what it is
/// doing, then a dot every half second, each of which restarts gdb's wait for the answer
/// (see [`HISTORY_WAIT`]).
pub(crate) struct KeepAlive {
    doing: &'static str,
    since: std::time::Instant,
    told: Option<std::time::Instant>,
}

impl KeepAlive {
    pub(crate) fn new(doing: &'static str) -> Self {
        Self {
            doing,
            since: std::time::Instant::now(),
            told: None,
        }
    }

    /// Says what is being done, or a dot, when it is time; never asks to stop (false).
    pub(crate) fn tell(&mut self, out: &mut ConsoleOutput<'_>) -> bool {
        let now = std::time::Instant::now();
        match self.told {
            None if now - self.since >= HISTORY_WAIT => {
                output!(out, "{}", self.doing);
                out.flush();
                self.told = Some(now);
            }
            Some(t) if now - t >= HISTORY_WAIT => {
                output!(out, ".");
                out.flush();
                self.told = Some(now);
            }
            _ => {}
        }
        false
    }

    /// Ends the line of dots, if one was begun.
    pub(crate) fn end(&self, out: &mut ConsoleOutput<'_>) {
        if self.told.is_some() {
            outputln!(out, "");
        }
    }
}

//! Registers through QEMU's gdbstub. QEMU user mode 7.2's plugin API cannot read registers,
//! so QEMU runs with its gdbstub (`-g SOCKET`) and rtit reads them there:
//!
//! - where tracing starts (`--start`): a breakpoint at the start point, the registers read
//!   when it is hit (before the instruction runs, which is where the plugin begins tracing),
//!   the breakpoint removed, and the program let go (spec §6: the state at the first
//!   position is what replay builds every value from);
//! - samples for `rtit record --truth`: rtit stops the program at random moments by sending
//!   QEMU a signal that QEMU hands to its gdbstub before the program (a stop between two
//!   translation blocks), reads the registers and the plugin's position counters from
//!   QEMU's memory, and continues without the signal, so the program never sees it. The
//!   recorder keeps a sample only where the trace's own instruction address at that
//!   position is the sampled `rip`.
//!
//! - signal deliveries: every signal the gdbstub reports is passed on to the program as it
//!   came; one the program handles is run to the handler's entry and logged there
//!   (`signals`).
//!
//! So QEMU always runs with its gdbstub.

mod anchors;
mod cut;
pub(crate) mod guest;
mod remote;
mod signals;
mod start;
mod watch;

pub use anchors::{AnchorEvery, AnchorPlan, PARKED_EVERY, STOPPED_EVERY};
pub use start::StartPoint;
pub use watch::{Plan, Watch, Watched, SAMPLE_SIGNAL};

/// A failure to talk to QEMU's gdbstub.
#[derive(Debug, thiserror::Error)]
pub enum GdbstubError {
    /// QEMU's gdbstub socket did not appear or refused the connection.
    #[error("cannot connect to QEMU's gdbstub at {path}: {source}")]
    Connect {
        /// The socket.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The plugin did not say where its counters are.
    #[error("{path}: {problem}")]
    Counters {
        /// The file.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// The gdbstub said something unexpected.
    #[error("QEMU's gdbstub: {0}")]
    Protocol(String),
    /// Reading or writing the socket failed.
    #[error("QEMU's gdbstub: {0}")]
    Io(std::io::Error),
    /// The watching thread panicked.
    #[error("the thread watching QEMU's gdbstub stopped unexpectedly")]
    Panicked,
    /// Writing the anchors failed.
    #[error("anchors: {0}")]
    Anchors(String),
}

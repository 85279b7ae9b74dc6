//! Register samples for `rtit record --truth` with the qemu backend. QEMU user mode 7.2's
//! plugin API cannot read registers, so QEMU runs with its gdbstub (`-g SOCKET`) and rtit
//! stops the program through it at random moments: it sends QEMU a signal that QEMU hands
//! to its gdbstub before the program (a stop between two translation blocks), reads the
//! registers, reads the plugin's position counters from QEMU's memory, and continues
//! without the signal, so the program never sees it. The recorder keeps a sample only where
//! the trace's own instruction address at that position is the sampled `rip`.

mod remote;
mod sampler;

pub use sampler::{Sampler, SAMPLE_SIGNAL};

/// A failure of sampling.
#[derive(Debug, thiserror::Error)]
pub enum TruthError {
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
    /// The sampling thread panicked.
    #[error("the register sampler stopped unexpectedly")]
    Panicked,
}

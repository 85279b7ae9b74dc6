//! What can go wrong when recording under QEMU.

use super::find::PLUGIN_FILE;
use super::stop::StopError;
use crate::interrupt::{NamesTheSignal, Stopped};
use crate::step::StartAt;

/// A failure of the qemu backend.
#[derive(Debug, thiserror::Error)]
pub enum QemuError {
    /// No `qemu-x86_64` that can load plugins.
    #[error(transparent)]
    NoQemu(#[from] super::find::NoQemu),
    /// The plugin library is missing.
    #[error("the rtit QEMU plugin ({PLUGIN_FILE}) is not next to rtit or in $RTIT_QEMU_PLUGIN; build it with `cargo build --release -p rtit-qemu-plugin`")]
    NoPlugin,
    /// The program cannot be recorded.
    #[error(transparent)]
    Program(#[from] crate::step::StepError),
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// QEMU ended without the plugin's report.
    #[error("qemu-x86_64 ended ({status}) without the plugin's report in {dir}")]
    NoReport {
        /// How QEMU ended.
        status: String,
        /// Where the report should be.
        dir: String,
    },
    /// Reading registers through QEMU's gdbstub failed.
    #[error(transparent)]
    Gdbstub(#[from] super::gdbstub::GdbstubError),
    /// Stopping QEMU on a signal failed.
    #[error(transparent)]
    Stop(#[from] StopError),
    /// The report is unreadable.
    #[error("{path}: {problem}")]
    BadReport {
        /// The file.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// The start point never ran.
    #[error("--start {0}: never executed")]
    StartNotReached(String),
    /// The start symbol is in no program of the run (the first does not define it, and it
    /// ran no other).
    #[error("--start {at}: {program} does not define it")]
    StartNotDefined {
        /// The symbol.
        at: String,
        /// The program.
        program: String,
    },
    /// Before the start point ran, the program did something the recording cannot follow
    /// (a thread, execve): it ran on unrecorded, and nothing was recorded.
    #[error("--start {at}: {reason} before reaching it; it ran on unrecorded and {then}")]
    StoppedBeforeStart {
        /// The start point.
        at: String,
        /// What it did.
        reason: String,
        /// How it ended then.
        then: String,
    },
    /// rtit record received a signal before there was a recording to keep.
    #[error(transparent)]
    Interrupted(#[from] Stopped),
    /// `--check-fast-path` found the fast path's packets differ from the unit model's.
    #[error("--check-fast-path: the fast path and the unit model wrote different packets: {0}")]
    FastPathDiffers(String),
    /// `--check-fast-path` was asked for and the plugin did not check.
    #[error("the plugin did not check its fast path (its report in {0} says nothing of it)")]
    NotChecked(String),
}

impl NamesTheSignal for QemuError {
    fn names_the_signal(&self) -> bool {
        matches!(self, Self::Interrupted(_) | Self::Stop(StopError::Killed { .. }))
    }
}

/// What the qemu backend is doing, for the message when a signal ends it before there is a
/// recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Finding QEMU and the program; starting QEMU.
    Launching,
    /// Waiting for QEMU's gdbstub and connecting to it.
    Connecting,
    /// QEMU runs, and tracing has not started (as far as the plugin's report says).
    Starting,
    /// Tracing started.
    Recording,
}

impl Phase {
    /// What rtit was doing, as the message says it.
    pub(super) fn during(self, start: &StartAt) -> String {
        match (self, start) {
            (Self::Launching, _) => "starting QEMU".into(),
            (Self::Connecting, _) => "connecting to QEMU's gdbstub".into(),
            (Self::Starting, StartAt::Entry) => "starting the program under QEMU".into(),
            (Self::Starting, StartAt::Symbol(s)) => format!("running the program to {s}"),
            (Self::Starting, StartAt::Address(a)) => format!("running the program to {a:#x}"),
            (Self::Recording, _) => "recording".into(),
        }
    }
}

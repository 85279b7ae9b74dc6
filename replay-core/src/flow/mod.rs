//! Flow reconstruction: from the packet stream and the images back to every executed
//! instruction (the flow layer of docs/design.md).
//!
//! The decoder walks basic blocks from a known IP and takes from the trace only what the code
//! cannot tell: a TNT bit per conditional branch, a TIP per indirect branch, at a near RET a
//! TNT bit when it was compressed (§4.2.3.2) or else a TIP, FUP.FAR + TIP at far transfers,
//! FUP.PGD/FUP.PGE where tracing stops and resumes, FUP.BuffOvf as a gap. Its output is the
//! history as runs of sequential instructions plus events, pushed into a [`FlowSink`].
//!
//! Files: `block` (decoded, cached basic blocks), `source` (packet lookahead without the
//! timing packets), `timing` (TSC and cycles, errata E6/E7), `decoder` (the walk),
//! `packets` (what the walk takes from the trace), `failure` (a disagreement on its way to
//! the report), `binding` (where asynchronous packets bind), `resume` (clean points: where two decodes
//! can be compared and one taken up again), `watched` (a decode stopped and taken up again
//! at them), `spin` (catching a walk the trace can never end), `positions` (trace offsets to
//! positions).

mod binding;
mod block;
mod decoder;
mod failure;
mod packets;
mod positions;
mod resume;
mod source;
mod spin;
mod timing;
mod watched;

pub use block::{decode_insn, Block, BlockCache, BlockError, InsnStream, Terminator};
pub use decoder::{FlowConfig, FlowDecoder, IpFilter};
pub use positions::OffsetPositions;
pub use resume::{CleanPoint, Resume, Watch};
pub use timing::Timing;

use std::fmt;

use crate::packet::Tnt;

/// What a trace's bytes leave unsaid at its end, from the recording: the TNT bits still in
/// RTIT_TNT_BUFF when tracing stopped (clearing TriggerEn need not write them out, §4.2.8;
/// software reads them with RDMSR, §4.2.2), and how many instructions ran while traced. With
/// it the decoder walks on past the last packet, using those bits, to exactly that count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEnd {
    /// The partial TNT left in RTIT_TNT_BUFF (`None`: empty, the register read 1).
    pub tnt_buff: Option<Tnt>,
    /// Instructions the recorder saw retire while tracing.
    pub instructions: u64,
}

/// What happened between instructions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// Tracing starts or resumes at `ip` (FUP.PGE, or a resynchronisation).
    Enabled {
        /// The next instruction.
        ip: u64,
    },
    /// Tracing stops; `ip` is where execution continues untraced (the FUP.PGD's IP), if known.
    Disabled {
        /// The next instruction, untraced.
        ip: Option<u64>,
    },
    /// An interrupt or fault while tracing: the instruction at `ip` did not execute (yet);
    /// execution continued at `target`.
    Interrupt {
        /// The instruction that did not execute.
        ip: u64,
        /// The handler.
        target: u64,
    },
    /// Instructions were lost (an internal buffer overflow, §4.2.5); tracing resumes at `ip`.
    Gap {
        /// The next instruction after the gap.
        ip: u64,
    },
    /// Trace bytes were lost here (the output region wrapped before rtit copied them out):
    /// what ran in between is unknown; the history resumes at the next IP the trace gives.
    Lost {
        /// How many bytes, if known.
        bytes: Option<u64>,
    },
    /// The trace is inconsistent with the code (or undecodable); the decoder resynchronises.
    Error {
        /// The instruction at which the inconsistency was found, if any.
        ip: Option<u64>,
        /// What is wrong.
        message: String,
    },
    /// TraceSTOP: tracing stopped at a TraceStop range (§4.2.11).
    Stop,
    /// The program was spinning in a loop through `ip` that needs nothing from the trace (a
    /// hang in `for (;;);`): the trace cannot tell how many passes it made, and the history
    /// shows its first. Where the trace ends there (stopped by a signal), the recorder's count
    /// tells how many `instructions` ran beyond the history; where an interrupt or a signal
    /// took the program out of the loop, nobody knows (`None`).
    Spins {
        /// An instruction of the loop.
        ip: u64,
        /// Instructions that ran but are not shown, if known.
        instructions: Option<u64>,
    },
}

impl EventKind {
    /// The short name `rtit insns --json` uses.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Enabled { .. } => "enabled",
            Self::Disabled { .. } => "disabled",
            Self::Interrupt { .. } => "interrupt",
            Self::Gap { .. } => "gap",
            Self::Lost { .. } => "lost",
            Self::Error { .. } => "error",
            Self::Stop => "stop",
            Self::Spins { .. } => "spins",
        }
    }
}

/// An event with where it happened: the trace offset of the packet that told it, and the
/// position (number of instructions before it in the history).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowEvent {
    /// What happened.
    pub kind: EventKind,
    /// Byte offset in the trace.
    pub offset: usize,
    /// Instructions executed before it.
    pub position: u64,
}

impl FlowEvent {
    /// Instructions that ran but the history does not show, as far as they are known.
    pub fn unshown(&self) -> u64 {
        match self.kind {
            EventKind::Spins {
                instructions: Some(n), ..
            } => n,
            _ => 0,
        }
    }

    /// Whether an unknown number of instructions ran here that the history does not show.
    pub fn unshown_unknown(&self) -> bool {
        matches!(self.kind, EventKind::Spins { instructions: None, .. })
    }
}

impl fmt::Display for FlowEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] ", self.kind.name())?;
        match &self.kind {
            EventKind::Enabled { ip } | EventKind::Gap { ip } => write!(f, "at {ip:#x}")?,
            EventKind::Disabled { ip: Some(ip) } => write!(f, "continuing untraced at {ip:#x}")?,
            EventKind::Disabled { ip: None } => write!(f, "tracing stopped")?,
            EventKind::Lost { bytes: Some(n) } => write!(f, "{n} bytes of trace lost (the output region wrapped)")?,
            EventKind::Lost { bytes: None } => write!(f, "trace bytes lost (the output region wrapped)")?,
            EventKind::Interrupt { ip, target } => write!(f, "at {ip:#x} to {target:#x}")?,
            EventKind::Error { ip, message } => {
                if let Some(ip) = ip {
                    write!(f, "at {ip:#x}: ")?;
                }
                write!(f, "{message}")?;
            }
            EventKind::Stop => write!(f, "TraceSTOP")?,
            EventKind::Spins {
                ip,
                instructions: Some(n),
            } => write!(
                f,
                "the program spins in a loop through {ip:#x} that needs nothing from the trace: {n} more instructions ran there until the recording stopped (the first passes are shown)"
            )?,
            EventKind::Spins { ip, instructions: None } => write!(
                f,
                "the program was in a loop through {ip:#x} that needs nothing from the trace: it may have made any number of passes before this (one shown)"
            )?,
        }
        write!(f, " (trace offset {:#x}, position {})", self.offset, self.position)
    }
}

/// One item of the reconstructed history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowItem {
    /// `count` instructions executed one after another in memory, from `ip`.
    Run {
        /// The first.
        ip: u64,
        /// How many.
        count: u64,
    },
    /// An event.
    Event(FlowEvent),
}

/// Receives the history as the decoder reconstructs it.
pub trait FlowSink {
    /// `count` instructions executed one after another in memory, from `ip`.
    fn run(&mut self, ip: u64, count: u64);
    /// An event between instructions.
    fn event(&mut self, event: FlowEvent);
}

impl FlowSink for Vec<FlowItem> {
    fn run(&mut self, ip: u64, count: u64) {
        self.push(FlowItem::Run { ip, count });
    }

    fn event(&mut self, event: FlowEvent) {
        self.push(FlowItem::Event(event));
    }
}

#[cfg(test)]
mod tests;

//! Errors of the packet layer: what is wrong, and at which byte offset.

use super::PacketKind;
use crate::ip::NoPreviousIp;

/// A byte sequence that is not a valid packet, with the offset of the packet's first byte.
/// After returning one, the decoder resumes at the next PSB.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("trace offset {offset:#x}: {kind}")]
pub struct DecodeError {
    /// Byte offset of the packet (or cycle-count packet) that failed to decode.
    pub offset: usize,
    /// What is wrong with it.
    pub kind: DecodeErrorKind,
}

/// What is wrong with an undecodable packet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeErrorKind {
    /// A header byte figure 2 reserves (0xA0–0xAF, 0xC8–0xCF, 0xE0–0xFF).
    #[error("reserved packet header {0:#04x}")]
    ReservedHeader(u8),
    /// A TNT header with no branch bit (0x00 or 0x01).
    #[error("TNT header {0:#04x} holds no branch")]
    EmptyTnt(u8),
    /// A FUP/TIP header with the reserved CNT value 3 (§4.2.3).
    #[error("{packet} header {header:#04x} has the reserved IP size CNT=3")]
    ReservedIpSize {
        /// The packet kind from the event field.
        packet: PacketKind,
        /// The header byte.
        header: u8,
    },
    /// A cycle-count packet with the reserved CCNT value 0 (§4.2.14).
    #[error("cycle-count byte {0:#04x} has the reserved length CCNT=0")]
    ReservedCycleLength(u8),
    /// A PSB header not followed by 8 zero bytes.
    #[error("PSB header followed by {value:#04x} at payload byte {index}, expected 8 zero bytes")]
    MalformedPsb {
        /// Index (1–8) of the first non-zero payload byte.
        index: u8,
        /// Its value.
        value: u8,
    },
    /// The trace ends inside a packet.
    #[error("truncated {packet} packet: {needed} bytes needed, {available} left in the trace")]
    Truncated {
        /// The packet kind.
        packet: PacketKind,
        /// Size of the packet.
        needed: u8,
        /// Bytes left from its offset.
        available: u8,
    },
    /// Trace bytes before this offset were lost (the output region wrapped before they were
    /// copied out, §2.3); the recording lists the gap.
    #[error("{} of trace lost here (the output region wrapped before they were copied out)", lost_bytes(*bytes))]
    Lost {
        /// How many, if known.
        bytes: Option<u64>,
    },
    /// A match-compressed IP with no previous IP (cold start at a PSB or trace start).
    #[error("{packet}: {source}")]
    NoPreviousIp {
        /// The packet kind.
        packet: PacketKind,
        /// Details.
        source: NoPreviousIp,
    },
}

/// A packet value that has no encoding: a field out of its range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode {packet}: {field} = {value:#x} exceeds its maximum {max:#x}")]
pub struct EncodeError {
    /// Packet name.
    pub packet: &'static str,
    /// The field out of range.
    pub field: &'static str,
    /// Its value.
    pub value: u64,
    /// The largest value the field holds.
    pub max: u64,
}

fn lost_bytes(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "bytes".to_string(), |n| format!("{n} bytes"))
}

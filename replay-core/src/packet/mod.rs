//! RTIT packets (chapter 4 of the RTIT reference, figure 2): the [`Packet`] enum, a decoder
//! over a byte slice and the encoder that is its exact inverse.
//!
//! A packet value holds exactly what is transmitted (an IP payload stays compressed, a cycle
//! count keeps its byte length), so `encode(decode(bytes)) == bytes` and
//! `decode(encode(packets)) == packets`. The context a packet needs to be understood (the
//! previous IP for a compressed IP, Cycle_Acc to know that a cycle-count packet follows) is
//! kept by the [`PacketDecoder`].

mod decoder;
mod encoder;
mod error;
mod header;

pub use decoder::{Decoded, DecoderConfig, PacketDecoder};
pub use encoder::{encode, encode_all};
pub use error::{DecodeError, DecodeErrorKind, EncodeError};
pub use header::PSB_BYTES;

use crate::ip::IpPayload;

/// One RTIT packet, as transmitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Packet {
    /// Taken/not-taken bits of 1–6 conditional branches or compressed RETs (§4.2.2).
    Tnt(Tnt),
    /// Target IP of an indirect branch, a non-compressed RET or a far transfer (§4.2.3).
    Tip(IpPayload),
    /// Flow update: where the trace was when an event happened (§4.2.4–4.2.9).
    Fup(FupEvent, IpPayload),
    /// Packet stream boundary: a header and 8 zero bytes (§4.2.1).
    Psb,
    /// TraceSTOP: a TraceStop action cleared TraceActive (§4.2.11).
    TraceStop,
    /// Paging information: new CR3 and CR0.PG (§4.2.10).
    Pip(Pip),
    /// Mini time counter: 8 bits of the hardware TSC (§4.2.12).
    Mtc(Mtc),
    /// Super time sync: core/bus ratios and 40 bits of the hardware TSC (§4.2.13).
    Sts(Sts),
    /// Cycle count appended after certain packets in cycle-accurate mode (§4.2.14–4.2.15).
    Cyc(CycleCount),
}

/// The kind of a packet without its payload: how `rtit dump` and error messages name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// TNT.
    Tnt,
    /// TIP.
    Tip,
    /// A FUP with its event.
    Fup(FupEvent),
    /// PSB.
    Psb,
    /// TraceSTOP.
    TraceStop,
    /// PIP.
    Pip,
    /// MTC.
    Mtc,
    /// STS.
    Sts,
    /// Cycle count.
    Cyc,
}

impl PacketKind {
    /// The short name used by `rtit dump` (`tnt`, `tip`, `fup.pge`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Tnt => "tnt",
            Self::Tip => "tip",
            Self::Fup(event) => event.name(),
            Self::Psb => "psb",
            Self::TraceStop => "stop",
            Self::Pip => "pip",
            Self::Mtc => "mtc",
            Self::Sts => "sts",
            Self::Cyc => "cyc",
        }
    }
}

impl std::fmt::Display for PacketKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Packet {
    /// The kind of packet.
    pub const fn kind(&self) -> PacketKind {
        match self {
            Self::Tnt(_) => PacketKind::Tnt,
            Self::Tip(_) => PacketKind::Tip,
            Self::Fup(event, _) => PacketKind::Fup(*event),
            Self::Psb => PacketKind::Psb,
            Self::TraceStop => PacketKind::TraceStop,
            Self::Pip(_) => PacketKind::Pip,
            Self::Mtc(_) => PacketKind::Mtc,
            Self::Sts(_) => PacketKind::Sts,
            Self::Cyc(_) => PacketKind::Cyc,
        }
    }

    /// The short name used by `rtit dump` (`tnt`, `tip`, `fup.pge`, …).
    pub const fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// The IP payload of a TIP or FUP.
    pub const fn ip_payload(&self) -> Option<IpPayload> {
        match self {
            Self::Tip(p) | Self::Fup(_, p) => Some(*p),
            _ => None,
        }
    }

    /// Whether a cycle-count packet follows this packet when Cycle_Acc is set (§4.2.15): full
    /// TNT, TIP, every FUP, PIP, MTC and STS; not a partial TNT, TraceSTOP, PSB or a cycle count.
    pub const fn carries_cycle_count(&self) -> bool {
        match self {
            Self::Tnt(tnt) => tnt.is_full(),
            Self::Tip(_) | Self::Fup(..) | Self::Pip(_) | Self::Mtc(_) | Self::Sts(_) => true,
            Self::Psb | Self::TraceStop | Self::Cyc(_) => false,
        }
    }

    /// Encoded size in bytes.
    pub const fn encoded_len(&self) -> usize {
        match self {
            Self::Tnt(_) | Self::TraceStop => 1,
            Self::Tip(p) | Self::Fup(_, p) => 1 + p.size.bytes(),
            Self::Psb => PSB_BYTES.len(),
            Self::Pip(_) => 6,
            Self::Mtc(_) => 2,
            Self::Sts(_) => 7,
            Self::Cyc(c) => c.encoded_len() as usize,
        }
    }
}

/// The event of a flow update packet (§4.2.4). Event 110b is the TIP; 100b and 101b are
/// reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FupEvent {
    /// 000b FUP.PGE: PacketEn went 0 → 1; the IP is where tracing resumes (§4.2.7).
    PacketGenEnable,
    /// 001b FUP.PGD: PacketEn went 1 → 0; the IP is where it stopped (§4.2.8).
    PacketGenDisable,
    /// 010b FUP.BuffOvf: recovered from an internal buffer overflow (§4.2.5).
    BufferOverflow,
    /// 011b FUP.PCC: periodic cycle count (§4.2.6); information only.
    PeriodicCycleCount,
    /// 111b FUP.FAR: the source of a far transfer (§4.2.9).
    FarTransfer,
}

impl FupEvent {
    /// The 3-bit event field.
    pub const fn code(self) -> u8 {
        match self {
            Self::PacketGenEnable => 0b000,
            Self::PacketGenDisable => 0b001,
            Self::BufferOverflow => 0b010,
            Self::PeriodicCycleCount => 0b011,
            Self::FarTransfer => 0b111,
        }
    }

    /// The event for a 3-bit field, or `None` for TIP (110b) and the reserved 100b/101b.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0b000 => Some(Self::PacketGenEnable),
            0b001 => Some(Self::PacketGenDisable),
            0b010 => Some(Self::BufferOverflow),
            0b011 => Some(Self::PeriodicCycleCount),
            0b111 => Some(Self::FarTransfer),
            _ => None,
        }
    }

    /// The short name used by `rtit dump`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::PacketGenEnable => "fup.pge",
            Self::PacketGenDisable => "fup.pgd",
            Self::BufferOverflow => "fup.ovf",
            Self::PeriodicCycleCount => "fup.pcc",
            Self::FarTransfer => "fup.far",
        }
    }
}

/// A TNT packet: 1–6 taken/not-taken bits. Stored as the header byte itself, whose leading 1
/// marks how many bits follow it; the oldest branch is the bit just below the leading 1, the
/// newest is bit 0 (§3.3.13: TNT bits shift in from the right).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tnt(u8);

impl Tnt {
    /// Most bits one TNT packet holds.
    pub const MAX_BITS: u8 = 6;

    /// A TNT packet from its header byte; `None` for 0x00, 0x01 (no bits) and bytes with
    /// bit 7 set (not a TNT).
    #[inline]
    pub const fn from_header(byte: u8) -> Option<Self> {
        if byte >= 2 && byte < 0x80 {
            Some(Self(byte))
        } else {
            None
        }
    }

    /// A TNT packet from branch outcomes, oldest first; `None` unless 1–6 are given.
    pub fn from_bits(taken: &[bool]) -> Option<Self> {
        if taken.is_empty() || taken.len() > Self::MAX_BITS as usize {
            return None;
        }
        Some(Self(taken.iter().fold(1u8, |acc, &t| (acc << 1) | u8::from(t))))
    }

    /// The header byte.
    #[inline]
    pub const fn header(self) -> u8 {
        self.0
    }

    /// Number of branches (1–6).
    #[inline]
    pub const fn count(self) -> u8 {
        7 - self.0.leading_zeros() as u8
    }

    /// Whether this is a full packet (6 bits): only those carry a cycle count (§4.2.15).
    #[inline]
    pub const fn is_full(self) -> bool {
        self.count() == Self::MAX_BITS
    }

    /// Outcome `i`, counted from the oldest branch (0).
    #[inline]
    pub const fn taken(self, i: u8) -> bool {
        (self.0 >> (self.count() - 1 - i)) & 1 == 1
    }

    /// The outcomes, oldest first.
    pub fn iter(self) -> impl Iterator<Item = bool> {
        (0..self.count()).map(move |i| self.taken(i))
    }
}

impl std::fmt::Debug for Tnt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tnt(")?;
        for t in self.iter() {
            f.write_str(if t { "T" } else { "N" })?;
        }
        write!(f, ")")
    }
}

/// Payload of a paging information packet (§4.2.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pip {
    /// CR3[39:0].
    pub cr3: u64,
    /// CR0.PG.
    pub pg: bool,
}

/// Payload of a mini time counter packet (§4.2.12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mtc {
    /// RTIT_CTL.MTC_Range when the packet was sent (2 bits): which 8 TSC bits `tsc` holds.
    pub rng: u8,
    /// The 8 TSC bits.
    pub tsc: u8,
}

/// Payload of a super time sync packet (§4.2.13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sts {
    /// Actual core/bus ratio (6 bits).
    pub acbr: u8,
    /// Effective core/bus ratio (6 bits).
    pub ecbr: u8,
    /// Big time counter: hardware TSC[39:0].
    pub btc: u64,
}

/// A cycle-count packet (§4.2.14): RTIT_CNTP[21:0] in 1, 2 or 3 bytes.
///
/// The value is the raw payload; errata E6 (non-zero counts are one short) is for the
/// consumer to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CycleCount {
    value: u32,
    len: u8,
}

impl CycleCount {
    /// Largest count the 3-byte form holds (22 bits).
    pub const MAX: u32 = (1 << 22) - 1;

    /// The shortest encoding of `value`, as the hardware picks it; `None` above 22 bits.
    pub const fn new(value: u32) -> Option<Self> {
        let len = if value < 1 << 6 {
            1
        } else if value < 1 << 14 {
            2
        } else {
            3
        };
        Self::with_len(value, len)
    }

    /// An encoding of `value` in exactly `len` bytes (1–3), if it fits.
    pub const fn with_len(value: u32, len: u8) -> Option<Self> {
        if len == 0 || len > 3 || value >= 1 << (6 + 8 * (len as u32 - 1)) {
            return None;
        }
        Some(Self { value, len })
    }

    /// The cycle count.
    pub const fn value(self) -> u32 {
        self.value
    }

    /// Encoded length in bytes (the CCNT field).
    pub const fn encoded_len(self) -> u8 {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tnt_bits_are_oldest_first_below_the_stop_bit() {
        let t = Tnt::from_bits(&[true, false, false, true, true]).unwrap_or(Tnt(2));
        assert_eq!(t.header(), 0b0011_0011);
        assert_eq!(t.count(), 5);
        assert!(!t.is_full());
        assert_eq!(t.iter().collect::<Vec<_>>(), [true, false, false, true, true]);
        assert_eq!(format!("{t:?}"), "Tnt(TNNTT)");
        assert!(Tnt::from_header(0x7f).is_some_and(Tnt::is_full));
        assert_eq!(Tnt::from_header(0x02).map(Tnt::count), Some(1));
        assert_eq!(Tnt::from_header(0x03).map(|t| t.taken(0)), Some(true));
        for bad in [0x00, 0x01, 0x80, 0xff] {
            assert_eq!(Tnt::from_header(bad), None, "{bad:#x}");
        }
        assert_eq!(Tnt::from_bits(&[]), None);
        assert_eq!(Tnt::from_bits(&[true; 7]), None);
    }

    #[test]
    fn cycle_count_lengths() {
        assert_eq!(CycleCount::new(0).map(CycleCount::encoded_len), Some(1));
        assert_eq!(CycleCount::new(63).map(CycleCount::encoded_len), Some(1));
        assert_eq!(CycleCount::new(64).map(CycleCount::encoded_len), Some(2));
        assert_eq!(CycleCount::new(0x3fff).map(CycleCount::encoded_len), Some(2));
        assert_eq!(CycleCount::new(0x4000).map(CycleCount::encoded_len), Some(3));
        assert_eq!(CycleCount::new(CycleCount::MAX).map(CycleCount::encoded_len), Some(3));
        assert_eq!(CycleCount::new(CycleCount::MAX + 1), None);
        assert_eq!(CycleCount::with_len(64, 1), None);
        assert!(CycleCount::with_len(5, 3).is_some());
        assert_eq!(CycleCount::with_len(5, 0), None);
        assert_eq!(CycleCount::with_len(5, 4), None);
    }
}

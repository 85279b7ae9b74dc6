//! The RTIT model-specific registers (chapter 3 of the RTIT reference): addresses, RTIT_CTL
//! bits and reset values. Shared by the decoder (Cycle_Acc changes the byte format), the unit
//! model and the msr backend (which program them), and recordings (which store them).

/// MSR addresses (§3.3.2–§3.3.14).
pub mod msr {
    /// RTIT_LIP0: base of RANGE0 (§3.3.6).
    pub const LIP0: u32 = 0x760;
    /// RTIT_LIP1: base of RANGE1.
    pub const LIP1: u32 = 0x761;
    /// RTIT_LIP2: limit of RANGE0 (the range ends before it).
    pub const LIP2: u32 = 0x762;
    /// RTIT_LIP3: limit of RANGE1.
    pub const LIP3: u32 = 0x763;
    /// RTIT_CTL (§3.3.2). Must be read before any other RTIT MSR is accessed (§3.3.1).
    pub const CTL: u32 = 0x768;
    /// RTIT_STATUS (§3.3.3).
    pub const STATUS: u32 = 0x769;
    /// RTIT_CNTP, the cycle counter (§3.3.4).
    pub const CNTP: u32 = 0x76b;
    /// RTIT_EVENTS: filter and TraceStop event IDs (§3.3.5).
    pub const EVENTS: u32 = 0x76c;
    /// RTIT_LAST_LIP (§3.3.7).
    pub const LAST_LIP: u32 = 0x76e;
    /// RTIT_LAST_CALL_NLIP (§3.3.14).
    pub const LAST_CALL_NLIP: u32 = 0x76f;
    /// RTIT_BASE_ADDR: physical base of the output region (§3.3.10).
    pub const BASE_ADDR: u32 = 0x770;
    /// RTIT_LIMIT_MASK: size of the output region minus one (§3.3.11).
    pub const LIMIT_MASK: u32 = 0x771;
    /// RTIT_OFFSET: write offset in the output region (§3.3.12).
    pub const OFFSET: u32 = 0x772;
    /// RTIT_CR3_MATCH (§3.3.8).
    pub const CR3_MATCH: u32 = 0x777;
    /// RTIT_PKT_CNT: bytes since the last PSB and the PSB period (§3.3.9).
    pub const PKT_CNT: u32 = 0x77c;
    /// RTIT_TNT_BUFF: the partial TNT packet (§3.3.13).
    pub const TNT_BUFF: u32 = 0x77d;

    /// Every RTIT MSR with its name, for messages.
    pub const ALL: [(u32, &str); 16] = [
        (LIP0, "RTIT_LIP0"),
        (LIP1, "RTIT_LIP1"),
        (LIP2, "RTIT_LIP2"),
        (LIP3, "RTIT_LIP3"),
        (CTL, "RTIT_CTL"),
        (STATUS, "RTIT_STATUS"),
        (CNTP, "RTIT_CNTP"),
        (EVENTS, "RTIT_EVENTS"),
        (LAST_LIP, "RTIT_LAST_LIP"),
        (LAST_CALL_NLIP, "RTIT_LAST_CALL_NLIP"),
        (BASE_ADDR, "RTIT_BASE_ADDR"),
        (LIMIT_MASK, "RTIT_LIMIT_MASK"),
        (OFFSET, "RTIT_OFFSET"),
        (CR3_MATCH, "RTIT_CR3_MATCH"),
        (PKT_CNT, "RTIT_PKT_CNT"),
        (TNT_BUFF, "RTIT_TNT_BUFF"),
    ];

    /// The register's name, or `None` if `addr` is not an RTIT MSR.
    pub fn name(addr: u32) -> Option<&'static str> {
        ALL.iter().find(|&&(a, _)| a == addr).map(|&(_, n)| n)
    }
}

/// RTIT_CTL bits (§3.3.2, table 4).
pub mod ctl {
    /// Global enable.
    pub const TRACE_EN: u64 = 1 << 0;
    /// Cycle-accurate mode: cycle counts follow packets (§4.2.15).
    pub const CYCLE_ACC: u64 = 1 << 1;
    /// Trace CPL 0.
    pub const OS: u64 = 1 << 2;
    /// Trace CPL 1–3.
    pub const USER: u64 = 1 << 3;
    /// STS on MOV CR3.
    pub const STS_ON_CR3: u64 = 1 << 4;
    /// CR3 filtering against RTIT_CR3_MATCH.
    pub const CR3_EN: u64 = 1 << 7;
    /// 1: no special treatment of the TraceSTOP write address.
    pub const DEST: u64 = 1 << 8;
    /// MTC packets.
    pub const MTC_EN: u64 = 1 << 9;
    /// STS packets.
    pub const STS_EN: u64 = 1 << 10;
    /// RET compression (§4.2.3.2).
    pub const CMPRS_RET: u64 = 1 << 11;
    /// Fewer timing packets (table 17).
    pub const LESS_PKTS: u64 = 1 << 12;
    /// The second enable, cleared by a TraceStop action.
    pub const TRACE_ACTIVE: u64 = 1 << 13;
    /// Shift of the 2-bit MTC_Range field.
    pub const MTC_RANGE_SHIFT: u32 = 14;
    /// Mask of the MTC_Range field.
    pub const MTC_RANGE: u64 = 3 << MTC_RANGE_SHIFT;
    /// Bits that are not reserved: writing any other bit raises #GP.
    pub const WRITABLE: u64 = TRACE_EN
        | CYCLE_ACC
        | OS
        | USER
        | STS_ON_CR3
        | CR3_EN
        | DEST
        | MTC_EN
        | STS_EN
        | CMPRS_RET
        | LESS_PKTS
        | TRACE_ACTIVE
        | MTC_RANGE;
}

/// RTIT_STATUS bits (§3.3.3).
pub mod status {
    /// The IP is in the filtered region.
    pub const FILTER_EN: u64 = 1 << 0;
    /// In the right context (read-only).
    pub const CONTEXT_EN: u64 = 1 << 1;
    /// Trace_En && TraceActive (read-only).
    pub const TRIGGER_EN: u64 = 1 << 2;
    /// A buffer overflow is pending.
    pub const BUFFER_OVERFLOW: u64 = 1 << 3;
}

/// Event IDs of RTIT_EVENTS (§3.3.5, table 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventId {
    /// 000: RANGE0 = [RTIT_LIP0, RTIT_LIP2).
    Range0,
    /// 001: RANGE1 = [RTIT_LIP1, RTIT_LIP3).
    Range1,
    /// 010: RANGE0 or RANGE1.
    Either,
    /// 110: never.
    AlwaysOff,
    /// 111: always.
    AlwaysOn,
}

impl EventId {
    /// The event for a 3-bit field, `None` for the reserved 011, 100, 101.
    pub const fn from_bits(bits: u64) -> Option<Self> {
        match bits {
            0b000 => Some(Self::Range0),
            0b001 => Some(Self::Range1),
            0b010 => Some(Self::Either),
            0b110 => Some(Self::AlwaysOff),
            0b111 => Some(Self::AlwaysOn),
            _ => None,
        }
    }

    /// The 3-bit encoding.
    pub const fn bits(self) -> u64 {
        match self {
            Self::Range0 => 0b000,
            Self::Range1 => 0b001,
            Self::Either => 0b010,
            Self::AlwaysOff => 0b110,
            Self::AlwaysOn => 0b111,
        }
    }
}

/// RTIT_EVENTS with the given filter and TraceStop event IDs.
pub const fn events(filter: EventId, trace_stop: EventId) -> u64 {
    filter.bits() | (trace_stop.bits() << 3)
}

/// Reset values of the registers that have non-zero ones.
pub mod reset {
    /// RTIT_PKT_CNT: Pkt_Mask = 2 (a PSB about every 8 KiB).
    pub const PKT_CNT: u64 = 0x2_0000;
    /// RTIT_BASE_ADDR.
    pub const BASE_ADDR: u64 = 0xfdc0_0000;
    /// RTIT_LIMIT_MASK: bits 5:0 are reserved as 1.
    pub const LIMIT_MASK: u64 = 0x7f;
    /// RTIT_TNT_BUFF: an empty partial TNT (just the valid marker).
    pub const TNT_BUFF: u64 = 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_event_encodings() {
        assert_eq!(msr::name(msr::CTL), Some("RTIT_CTL"));
        assert_eq!(msr::name(0x764), None);
        assert_eq!(msr::name(0), None);
        for bits in 0..8 {
            match EventId::from_bits(bits) {
                Some(e) => assert_eq!(e.bits(), bits),
                None => assert!((3..=5).contains(&bits)),
            }
        }
        assert_eq!(events(EventId::AlwaysOn, EventId::AlwaysOff), 0x37);
        assert_eq!(ctl::WRITABLE, 0xff9f);
    }
}

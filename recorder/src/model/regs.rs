//! The configuration registers of the unit and the write rules of chapter 3: which bits are
//! reserved (a write that changes one raises #GP), which are read-only, which writes are
//! undefined. State that the unit itself updates (TNT buffer, LAST_LIP, counters) lives with
//! the output; this file holds what software configures.

use rtit_replay_core::ip::LIP_MASK;
use rtit_replay_core::regs::{ctl, msr, reset, EventId};

use super::ModelError;

/// The software-configured RTIT registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigRegs {
    /// RTIT_CTL.
    pub ctl: u64,
    /// RTIT_CR3_MATCH.
    pub cr3_match: u64,
    /// RTIT_EVENTS.
    pub events: u64,
    /// RTIT_LIP0–3, bits 47:0 (writes to 63:48 have no effect, §3.3.6).
    pub lip: [u64; 4],
    /// RTIT_BASE_ADDR.
    pub base_addr: u64,
    /// RTIT_LIMIT_MASK.
    pub limit_mask: u64,
}

impl Default for ConfigRegs {
    /// Reset values (chapter 3).
    fn default() -> Self {
        Self {
            ctl: 0,
            cr3_match: 0,
            events: 0,
            lip: [0; 4],
            base_addr: reset::BASE_ADDR,
            limit_mask: reset::LIMIT_MASK,
        }
    }
}

impl ConfigRegs {
    /// Whether a RTIT_CTL bit is set.
    #[inline]
    pub fn has(&self, bit: u64) -> bool {
        self.ctl & bit != 0
    }

    /// TriggerEn = Trace_En && TraceActive (§2.1.1).
    #[inline]
    pub fn trigger_en(&self) -> bool {
        self.has(ctl::TRACE_EN) && self.has(ctl::TRACE_ACTIVE)
    }

    /// MTC_Range (§4.2.12).
    pub fn mtc_range(&self) -> u8 {
        ((self.ctl & ctl::MTC_RANGE) >> ctl::MTC_RANGE_SHIFT) as u8
    }

    /// Filter_Event_ID; checked valid on write.
    pub fn filter_event(&self) -> EventId {
        EventId::from_bits(self.events & 7).unwrap_or(EventId::AlwaysOff)
    }

    /// TraceStop_Event_ID; checked valid on write.
    pub fn stop_event(&self) -> EventId {
        EventId::from_bits((self.events >> 3) & 7).unwrap_or(EventId::AlwaysOff)
    }

    /// RANGE0 or RANGE1 as [base, limit) of canonical addresses (§3.3.5).
    pub fn range(&self, n: usize) -> (u64, u64) {
        let canonical = rtit_replay_core::ip::canonical;
        (canonical(self.lip[n]), canonical(self.lip[n + 2]))
    }
}

/// The bits of each RTIT MSR a write may change; the rest are reserved (#GP when changed).
/// RTIT_LIP0–3 ignore writes to 63:48 instead; RTIT_STATUS ignores its read-only bits.
fn writable_bits(addr: u32) -> Option<u64> {
    Some(match addr {
        msr::CTL => ctl::WRITABLE,
        msr::STATUS => 0xf,
        msr::CNTP => (1 << 22) - 1,
        msr::EVENTS => 0x3f,
        msr::LIP0..=msr::LIP3 => u64::MAX,
        msr::LAST_LIP => (1 << 33) - 1,
        msr::LAST_CALL_NLIP => (1 << 49) - 1,
        msr::BASE_ADDR => ((1 << 36) - 1) & !0x3f,
        msr::LIMIT_MASK => (1 << 22) - 1,
        msr::OFFSET => (1 << 22) - 1,
        msr::CR3_MATCH => ((1 << 36) - 1) & !0x1f,
        msr::PKT_CNT => 0x3_3fff,
        msr::TNT_BUFF => 0x7f,
        _ => return None,
    })
}

/// Checks a write against the rules of chapter 3; returns the value the register takes.
pub fn check_write(addr: u32, value: u64, old_ctl: u64) -> Result<u64, ModelError> {
    let writable = writable_bits(addr).ok_or(ModelError::UnknownMsr(addr))?;
    let reserved = value & !writable;
    if reserved != 0 {
        return Err(ModelError::ReservedBits {
            msr: addr,
            value,
            bits: reserved,
        });
    }
    match addr {
        // Bits 5:0 are reserved as 1 (§3.3.11): clearing one changes a reserved bit.
        msr::LIMIT_MASK if value & 0x3f != 0x3f => Err(ModelError::ReservedBits {
            msr: addr,
            value,
            bits: !value & 0x3f,
        }),
        msr::TNT_BUFF if value == 0 => Err(ModelError::ZeroTntBuff),
        msr::EVENTS if EventId::from_bits(value & 7).is_none() || EventId::from_bits((value >> 3) & 7).is_none() => {
            Err(ModelError::Undefined(
                "RTIT_EVENTS with a reserved event ID (011, 100 or 101; table 7)",
            ))
        }
        msr::CTL => {
            let toggled = (old_ctl ^ value) & (ctl::TRACE_EN | ctl::TRACE_ACTIVE);
            if toggled == ctl::TRACE_EN | ctl::TRACE_ACTIVE {
                Err(ModelError::Undefined(
                    "Trace_En and TraceActive both change in one RTIT_CTL write (§3.3.2)",
                ))
            } else {
                Ok(value)
            }
        }
        msr::LIP0..=msr::LIP3 => Ok(value & LIP_MASK),
        _ => Ok(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_bits_raise_gp() {
        let gp = |addr, value| check_write(addr, value, 0).map_err(|e| e.is_gp());
        assert_eq!(gp(msr::CTL, 1 << 5), Err(true));
        assert_eq!(gp(msr::CTL, 1 << 16), Err(true));
        assert_eq!(gp(msr::CTL, ctl::TRACE_EN | ctl::USER | ctl::MTC_RANGE), Ok(0xc009));
        assert_eq!(gp(msr::STATUS, 1 << 4), Err(true));
        assert_eq!(gp(msr::CNTP, 1 << 22), Err(true));
        assert_eq!(gp(msr::EVENTS, 1 << 6), Err(true));
        assert_eq!(gp(msr::LAST_LIP, 1 << 33), Err(true));
        assert_eq!(gp(msr::LAST_CALL_NLIP, 1 << 49), Err(true));
        assert_eq!(gp(msr::BASE_ADDR, 0x1000_0020), Err(true));
        assert_eq!(gp(msr::BASE_ADDR, 1 << 36), Err(true));
        assert_eq!(gp(msr::BASE_ADDR, 0x1000_0000), Ok(0x1000_0000));
        assert_eq!(gp(msr::LIMIT_MASK, 0x1f_ffff), Ok(0x1f_ffff));
        assert_eq!(gp(msr::LIMIT_MASK, 0x1f_ffc0), Err(true), "bits 5:0 are reserved as 1");
        assert_eq!(gp(msr::LIMIT_MASK, 0x7f_ffff), Err(true));
        assert_eq!(gp(msr::OFFSET, 1 << 22), Err(true));
        assert_eq!(gp(msr::CR3_MATCH, 0x1234_5010), Err(true));
        assert_eq!(gp(msr::CR3_MATCH, 1 << 36), Err(true));
        assert_eq!(gp(msr::PKT_CNT, 1 << 14), Err(true));
        assert_eq!(gp(msr::PKT_CNT, 0x3_0000), Ok(0x3_0000));
        assert_eq!(gp(msr::TNT_BUFF, 0), Err(true));
        assert_eq!(gp(msr::TNT_BUFF, 0x80), Err(true));
        assert_eq!(gp(msr::TNT_BUFF, 1), Ok(1));
        // Writes to LIP_SIGN_EXT have no effect.
        assert_eq!(gp(msr::LIP2, 0xffff_8000_0000_1000), Ok(0x8000_0000_1000));
    }

    #[test]
    fn undefined_writes_are_refused_but_are_no_gp() {
        let both = ctl::TRACE_EN | ctl::TRACE_ACTIVE;
        let err = check_write(msr::CTL, both, 0).expect_err("both enables at once");
        assert!(!err.is_gp());
        assert!(check_write(msr::CTL, 0, both).is_err(), "both cleared at once");
        assert!(check_write(msr::CTL, both, ctl::TRACE_EN).is_ok());
        let err = check_write(msr::EVENTS, 0b011, 0).expect_err("reserved event id");
        assert!(!err.is_gp());
        assert!(check_write(msr::EVENTS, 0b100_111, 0).is_err());
        assert_eq!(check_write(0x10, 0, 0), Err(ModelError::UnknownMsr(0x10)));
    }
}

//! ContextEn and FilterEn (§2.1), and the range detection behind FilterEn and TraceStop
//! (§3.3.5).
//!
//! RANGE0 and RANGE1 are not compared against the IP continuously. A range is *entered* when
//! an instruction at its base executes or a taken branch or event lands inside it, and *left*
//! when the instruction at its limit executes or a taken branch or event lands outside. "An
//! instruction at its base executes" shows up, from the point of view of the instruction
//! before it, as its NLIP being the base (the FUP.PGE for walking into a region carries the
//! NLIP, §4.2.7). So enabling tracing inside a range does not count as entering it, and an
//! instruction that straddles the base does not either. The state is frozen while Trace_En or
//! ContextEn is 0 (§2.1.3, §2.4.3).

use rtit_replay_core::regs::{ctl, EventId};

use super::regs::ConfigRegs;

/// ContextEn (§2.1.2) for a CPL and CR3.
pub fn context_en(regs: &ConfigRegs, cpl: u8, cr3: u64, in_host: bool) -> bool {
    // RTIT_CR3_MATCH holds CR3[35:5] (§3.3.8).
    const CR3_BITS: u64 = ((1 << 36) - 1) & !0x1f;
    let cpl_off = if cpl == 0 {
        !regs.has(ctl::OS)
    } else {
        !regs.has(ctl::USER)
    };
    let cr3_off = regs.has(ctl::CR3_EN) && (cr3 & CR3_BITS) != (regs.cr3_match & CR3_BITS);
    !(cpl_off || cr3_off || in_host)
}

/// Whether each of RANGE0 and RANGE1 has been entered and not left since.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ranges {
    inside: [bool; 2],
}

impl Ranges {
    /// Updates both ranges for an operation that continues at `next_ip`; `transfer` says
    /// whether `next_ip` is the target of a taken branch or event rather than the NLIP.
    pub fn update(&mut self, regs: &ConfigRegs, transfer: bool, next_ip: u64) {
        for (n, inside) in self.inside.iter_mut().enumerate() {
            let (base, limit) = regs.range(n);
            if base >= limit {
                // An empty range, or base above limit (undefined, §3.3.5): never entered.
                *inside = false;
            } else if transfer {
                *inside = (base..limit).contains(&next_ip);
            } else if next_ip == base {
                *inside = true;
            } else if next_ip == limit {
                *inside = false;
            }
        }
    }

    /// Whether [`Self::update`] for sequential flow leaves both ranges as they are, wherever
    /// it goes: neither range has a base or limit to walk onto, and neither is entered.
    pub fn still_when_sequential(&self, regs: &ConfigRegs) -> bool {
        (0..2).all(|n| {
            let (base, limit) = regs.range(n);
            base >= limit && !self.inside[n]
        })
    }

    /// The value of an event ID (table 7).
    pub fn event(&self, id: EventId) -> bool {
        match id {
            EventId::Range0 => self.inside[0],
            EventId::Range1 => self.inside[1],
            EventId::Either => self.inside[0] || self.inside[1],
            EventId::AlwaysOff => false,
            EventId::AlwaysOn => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RANGE0 is RTIT_LIP0 to RTIT_LIP2 (§3.3.5): entries 0 and 2.
    fn regs_with_range0(base: u64, limit: u64) -> ConfigRegs {
        ConfigRegs {
            lip: [base, 0, limit, 0],
            ..ConfigRegs::default()
        }
    }

    #[test]
    fn context_en_follows_cpl_cr3_and_host_mode() {
        let mut r = ConfigRegs {
            ctl: ctl::USER,
            ..ConfigRegs::default()
        };
        assert!(context_en(&r, 3, 0x1000, false));
        assert!(!context_en(&r, 0, 0x1000, false), "OS clear: CPL 0 is not traced");
        assert!(!context_en(&r, 3, 0x1000, true), "SMM/VMX host");
        r.ctl = ctl::OS;
        assert!(context_en(&r, 0, 0x1000, false));
        assert!(!context_en(&r, 1, 0x1000, false), "USER covers CPL 1-3");
        r.ctl = ctl::USER | ctl::CR3_EN;
        r.cr3_match = 0x1234_5000;
        assert!(context_en(&r, 3, 0x1234_5000, false));
        // Bits outside CR3[35:5] are not compared (PCID bits, bit 63).
        assert!(context_en(&r, 3, 0x8000_0000_1234_5007, false));
        assert!(!context_en(&r, 3, 0x1234_6000, false));
    }

    #[test]
    fn ranges_enter_at_base_or_by_branch_and_leave_at_limit_or_by_branch() {
        let regs = regs_with_range0(0x100, 0x110);
        let mut r = Ranges::default();
        // Sequential flow in the middle of the range does not enter it.
        r.update(&regs, false, 0x104);
        assert!(!r.event(EventId::Range0));
        // The instruction at the base is next.
        r.update(&regs, false, 0x100);
        assert!(r.event(EventId::Range0) && r.event(EventId::Either));
        assert!(!r.event(EventId::Range1));
        // Sequential flow inside keeps it; the limit leaves it.
        r.update(&regs, false, 0x108);
        assert!(r.event(EventId::Range0));
        r.update(&regs, false, 0x110);
        assert!(!r.event(EventId::Range0));
        // A branch into the range enters it, one out of it leaves.
        r.update(&regs, true, 0x10e);
        assert!(r.event(EventId::Range0));
        r.update(&regs, true, 0x983);
        assert!(!r.event(EventId::Range0));
        // Sequential flow that skips the base (an instruction straddling it) does not enter.
        r.update(&regs, false, 0x101);
        assert!(!r.event(EventId::Range0));
        assert!(r.event(EventId::AlwaysOn) && !r.event(EventId::AlwaysOff));
    }

    #[test]
    fn an_empty_range_is_never_entered() {
        let regs = regs_with_range0(0, 0); // the reset values
        let mut r = Ranges::default();
        r.update(&regs, false, 0);
        r.update(&regs, true, 0);
        assert!(!r.event(EventId::Range0));
    }
}

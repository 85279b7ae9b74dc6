//! A deterministic synthetic clock, so that traces with timing packets are reproducible: each
//! operation takes a fixed number of core cycles, and the hardware TSC advances with them.
//! MTC packets come from TSC bits selected by MTC_Range (§4.2.12); STS packets carry the TSC
//! and the core/bus ratios (§4.2.13); RTIT_CNTP counts the same cycles (§3.3.4).

/// The synthetic clock.
#[derive(Debug, Clone)]
pub struct Clock {
    /// Core cycles each operation takes.
    pub cycles_per_op: u32,
    /// Hardware TSC.
    pub tsc: u64,
    /// The last MTC value the TSC had (sent or not).
    last_mtc: u8,
}

impl Clock {
    /// A clock at `tsc` taking `cycles_per_op` cycles per operation.
    pub fn new(tsc: u64, cycles_per_op: u32) -> Self {
        Self {
            cycles_per_op,
            tsc,
            last_mtc: 0,
        }
    }

    /// Advances by one operation; returns the cycles that passed.
    pub fn tick(&mut self) -> u32 {
        self.tsc += u64::from(self.cycles_per_op);
        self.cycles_per_op
    }

    /// Advances by `n` operations at once, and takes the watched TSC bits as seen at the
    /// end, as `n` ticks each followed by [`Self::mtc_change`] would (the value they leave
    /// is the last one's, whatever changed in between).
    #[inline]
    pub fn skip(&mut self, n: u64, range: u8) {
        self.tsc += n * u64::from(self.cycles_per_op);
        self.last_mtc = self.mtc_value(range);
    }

    /// The 8 TSC bits an MTC with this range carries: TSC[14+2r:7+2r].
    #[inline]
    pub fn mtc_value(&self, range: u8) -> u8 {
        (self.tsc >> (7 + 2 * u32::from(range))) as u8
    }

    /// Starts MTC tracking afresh (TriggerEn 0 → 1): no MTC for the value at that moment.
    pub fn reset_mtc(&mut self, range: u8) {
        self.last_mtc = self.mtc_value(range);
    }

    /// The new MTC value if the watched TSC bits changed since last asked.
    pub fn mtc_change(&mut self, range: u8) -> Option<u8> {
        let now = self.mtc_value(range);
        (now != self.last_mtc).then(|| {
            self.last_mtc = now;
            now
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtc_changes_with_the_selected_tsc_bits() {
        let mut c = Clock::new(0, 64);
        c.reset_mtc(0);
        assert_eq!(c.mtc_change(0), None);
        c.tick(); // TSC 64
        assert_eq!(c.mtc_change(0), None);
        c.tick(); // TSC 128: bit 7 set
        assert_eq!(c.mtc_change(0), Some(1));
        assert_eq!(c.mtc_change(0), None);
        // Range 3 watches TSC[20:13].
        let mut c = Clock::new(0x2000 * 5, 1);
        assert_eq!(c.mtc_value(3), 5);
        c.reset_mtc(3);
        assert_eq!(c.mtc_change(3), None);
    }
}

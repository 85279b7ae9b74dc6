//! Time from the timing packets, for information: the TSC from STS and MTC (§4.2.12–13) and
//! the core cycles from cycle counts (§4.2.14), with the workarounds of errata E6 (a non-zero
//! cycle count is one short) and E7 (the first MTC after enabling may be wrong: ignore it).

use crate::packet::{Mtc, Packet, Sts};

/// What the timing packets seen so far say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timing {
    /// The hardware TSC as far as known: the last STS, advanced by MTCs since.
    pub tsc: Option<u64>,
    /// Core cycles counted by cycle-count packets, E6 corrected.
    pub cycles: u64,
    /// MTCs ignored under E7.
    pub ignored_mtcs: u32,
    /// The next MTC is the first after trace enabling.
    first_mtc_pending: bool,
    seen_psb: bool,
}

impl Timing {
    /// Takes a timing packet into account; `false` if `packet` is none.
    pub fn update(&mut self, packet: &Packet) -> bool {
        match *packet {
            Packet::Psb => {
                // The first PSB of a trace is the one TriggerEn 0 → 1 sends (§4.2.1).
                if !self.seen_psb {
                    self.seen_psb = true;
                    self.first_mtc_pending = true;
                }
            }
            Packet::Cyc(c) => {
                let v = u64::from(c.value());
                self.cycles += if v == 0 { 0 } else { v + 1 };
            }
            Packet::Sts(Sts { btc, .. }) => self.tsc = Some(btc),
            Packet::Mtc(Mtc { rng, tsc }) => {
                if std::mem::take(&mut self.first_mtc_pending) {
                    self.ignored_mtcs += 1;
                } else if let Some(old) = self.tsc {
                    self.tsc = Some(advance(old, rng, tsc));
                }
            }
            _ => return false,
        }
        true
    }

    /// Trace enabling after a TraceSTOP: the next MTC is again the first (E7).
    pub fn restarted(&mut self) {
        self.seen_psb = false;
    }
}

/// The TSC after an MTC carrying `bits` for TSC[14+2r:7+2r]: the smallest value not below
/// `old` with those bits.
fn advance(old: u64, rng: u8, bits: u8) -> u64 {
    let shift = 7 + 2 * u32::from(rng);
    let unit = 1u64 << shift;
    let field = 0xffu64 << shift;
    let mut new = (old & !field & !(unit - 1)) | (u64::from(bits) << shift);
    if new < (old & !(unit - 1)) {
        new += field + unit;
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::CycleCount;

    #[test]
    fn e6_adds_one_to_non_zero_cycle_counts() {
        let mut t = Timing::default();
        for v in [0, 5, 1] {
            t.update(&Packet::Cyc(CycleCount::new(v).expect("small")));
        }
        assert_eq!(t.cycles, 6 + 2);
    }

    #[test]
    fn e7_ignores_the_first_mtc_after_enabling_and_mtc_advances_the_tsc() {
        let mut t = Timing::default();
        t.update(&Packet::Psb);
        t.update(&Packet::Sts(Sts {
            acbr: 1,
            ecbr: 1,
            btc: 0x1_2380,
        }));
        t.update(&Packet::Mtc(Mtc { rng: 0, tsc: 0x99 })); // ignored (E7)
        assert_eq!((t.tsc, t.ignored_mtcs), (Some(0x1_2380), 1));
        t.update(&Packet::Mtc(Mtc { rng: 0, tsc: 0x48 }));
        assert_eq!(t.tsc, Some(0x1_2400));
        // A wrap of the 8 bits: 0x48 → 0x02 means TSC[14:7] went past 0xff.
        t.update(&Packet::Mtc(Mtc { rng: 0, tsc: 0x02 }));
        assert_eq!(t.tsc, Some(0x1_8100));
        t.update(&Packet::Psb);
        t.update(&Packet::Mtc(Mtc { rng: 0, tsc: 0x03 }));
        assert_eq!(
            (t.tsc, t.ignored_mtcs),
            (Some(0x1_8180), 1),
            "a periodic PSB is no enabling"
        );
    }
}

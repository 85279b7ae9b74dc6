//! A run of instructions that are not branches, retired at once: what [`UnitModel::retire`]
//! does for each of them comes to counting them and moving the clock when nothing can
//! happen in between, and a backend that sees whole blocks (QEMU's translation blocks) hands
//! them over as one run instead of one call an instruction (issue 20).
//!
//! Nothing can happen in between when tracing is on and stays on for sequential flow: no
//! buffer overflow; PacketEn set; no IP filter range that sequential flow could enter or
//! leave (both empty, neither entered), with FilterEn and TraceStop not depending on one;
//! and no timing packet due per instruction (no cycle-accurate mode, whose FUP.PCC comes at
//! an instruction's start, and no MTC). Then each instruction's step (table 19 for a
//! non-branch with PacketEn set before and after) writes no packet, and changes only the
//! clock, RTIT_CNTP, the IP and the count of traced instructions, which this module changes
//! by the run's total. The unit model stays the oracle: [`tests`] compares the two on random
//! runs under random configurations, byte for byte and register for register.

use rtit_replay_core::regs::ctl;

use super::exec::CNTP_MASK;
use super::UnitModel;

impl UnitModel {
    /// Retires `count` instructions that are not branches, after which `next_ip` executes
    /// (the last one's NLIP), as `count` calls of [`UnitModel::retire`] would; false, with
    /// nothing done, where that needs them one by one.
    pub fn retire_straight(&mut self, count: u64, next_ip: u64) -> bool {
        if count == 0 {
            return true;
        }
        if !self.straight_is_exact() {
            return false;
        }
        self.traced += count;
        let cycles = u64::from(self.clock.cycles_per_op) * count;
        self.clock.skip(count, self.regs.mtc_range());
        self.out.cntp = ((u64::from(self.out.cntp) + cycles) & u64::from(CNTP_MASK)) as u32;
        self.cpu.ip = next_ip;
        true
    }

    /// Whether a run of non-branch instructions changes nothing but counts (see the module).
    fn straight_is_exact(&self) -> bool {
        self.overflow.is_none()
            && self.packet_en()
            && !self.out.cycle_accurate
            && !self.regs.has(ctl::MTC_EN)
            && self.ranges.still_when_sequential(&self.regs)
            && self.ranges.event(self.regs.filter_event())
            && !self.ranges.event(self.regs.stop_event())
    }
}

#[cfg(test)]
mod tests;

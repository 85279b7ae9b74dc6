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

use std::cell::Cell;

use rtit_replay_core::cofi::Cofi;
use rtit_replay_core::ip::LIP_MASK;
use rtit_replay_core::regs::ctl;

use super::exec::CNTP_MASK;
use super::{Retired, UnitModel};

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

    /// Retires a block: `plain` instructions that are not branches, then `last`, which is
    /// not a far transfer, as [`Self::retire_straight`] then [`Self::retire_near`] would (the
    /// same conditions, each checked once); false, with nothing done, where they would not.
    #[inline]
    pub fn retire_block(&mut self, plain: u64, last: &Retired) -> bool {
        if !near(last) || !self.straight_is_exact() {
            return false;
        }
        self.retire_block_exact(plain, last);
        true
    }

    /// [`Self::retire_block`] where the caller knows its conditions hold: `last` is a near
    /// instruction and [`Self::takes_runs`] said true since the last change of anything but
    /// these fast paths (a batch loop checks them once).
    #[inline(always)]
    pub fn retire_block_exact(&mut self, plain: u64, last: &Retired) {
        debug_assert!(near(last) && self.straight_is_exact());
        self.count_exact(plain + 1);
        self.near_packets(last);
    }

    /// The packets of a block's `last` instruction, as [`Self::retire_block_exact`] writes
    /// them, without counting the block's instructions: a batch loop counts a stretch of
    /// blocks in a local and hands the total to [`Self::count_exact`] at its end (issue 20:
    /// the count, the clock and RTIT_CNTP, each read and written back at every block, were
    /// chains through memory from one block to the next). Exact under the same conditions,
    /// under which no packet depends on the count, the clock or RTIT_CNTP (no cycle-accurate
    /// mode, no MTC), and only if the stretch's total is counted before anything else
    /// reads them.
    #[inline(always)]
    pub fn retire_packets_exact(&mut self, last: &Retired) {
        debug_assert!(near(last) && self.straight_is_exact());
        self.near_packets(last);
    }

    /// Counts `count` instructions retired with [`Self::retire_packets_exact`]'s conditions:
    /// the count of traced instructions, the clock and RTIT_CNTP move by them.
    #[inline(always)]
    pub fn count_exact(&mut self, count: u64) {
        self.traced += count;
        self.clock.skip(count, self.regs.mtc_range());
        let cycles = u64::from(self.clock.cycles_per_op) * count;
        self.out.cntp = ((u64::from(self.out.cntp) + cycles) & u64::from(CNTP_MASK)) as u32;
    }

    /// Retires one instruction that is not a far transfer (a near branch, or none), as
    /// [`UnitModel::retire`] would, where nothing but its own packets can come of it (the
    /// conditions of a straight run, which a taken branch does not change either: with no
    /// IP filter range, landing anywhere enters none); false, with nothing done, elsewhere.
    pub fn retire_near(&mut self, r: &Retired) -> bool {
        if !near(r) || !self.straight_is_exact() {
            return false;
        }
        self.near_now(r);
        true
    }

    /// [`Self::retire_near`] once its conditions hold.
    #[inline]
    fn near_now(&mut self, r: &Retired) {
        self.traced += 1;
        self.clock.skip(1, self.regs.mtc_range());
        self.out.cntp = (self.out.cntp + self.clock.cycles_per_op) & CNTP_MASK;
        self.near_packets(r);
    }

    /// What a near branch (or none) retired with PacketEn set changes besides the count and
    /// the clock.
    #[inline(always)]
    fn near_packets(&mut self, r: &Retired) {
        // Table 19, a near branch with PacketEn set before and after: its own packets alone.
        let compress = self.regs.has(ctl::CMPRS_RET);
        match r.cofi {
            Cofi::Conditional => self.out.tnt_bit(r.taken),
            Cofi::Return if compress && self.out.last_call_nlip == Some(r.next_ip & LIP_MASK) => self.out.tnt_bit(true),
            Cofi::Return | Cofi::IndirectJump | Cofi::IndirectCall => self.out.tip(r.next_ip),
            _ => {}
        }
        if compress && r.cofi.is_near_call() {
            self.out.last_call_nlip = Some(r.nlip() & LIP_MASK);
        }
        self.cpu.ip = r.next_ip;
    }

    /// Whether runs of non-branch instructions, and near branches, retire at once now
    /// ([`Self::retire_straight`], [`Self::retire_near`]); neither changes that.
    pub fn takes_runs(&self) -> bool {
        self.straight_is_exact()
    }

    /// Whether a run of non-branch instructions changes nothing but counts (see the module),
    /// found once until something may change it: the fast paths themselves change none of it.
    #[inline]
    fn straight_is_exact(&self) -> bool {
        match self.exact.0.get() {
            Some(exact) => exact,
            None => {
                let exact = self.find_exact();
                self.exact.0.set(Some(exact));
                exact
            }
        }
    }

    fn find_exact(&self) -> bool {
        self.overflow.is_none()
            && self.packet_en()
            && !self.out.cycle_accurate
            && !self.regs.has(ctl::MTC_EN)
            && self.ranges.still_when_sequential(&self.regs)
            && self.ranges.event(self.regs.filter_event())
            && !self.ranges.event(self.regs.stop_event())
    }
}

/// Whether `r` is an instruction the fast paths take: not a far transfer, and no change of
/// privilege.
fn near(r: &Retired) -> bool {
    let near = matches!(
        r.cofi,
        Cofi::None
            | Cofi::Conditional
            | Cofi::DirectJump
            | Cofi::DirectCall
            | Cofi::IndirectJump
            | Cofi::IndirectCall
            | Cofi::Return
    );
    near && r.next_cpl.is_none()
}

/// [`UnitModel::straight_is_exact`] as last found. Not part of the model's state: its
/// `Debug` says nothing, so a model compares equal (as text) however often it was asked.
#[derive(Clone, Default)]
pub(super) struct Exact(Cell<Option<bool>>);

impl Exact {
    /// Forgets what was found.
    pub(super) fn forget(&self) {
        self.0.set(None);
    }
}

impl std::fmt::Debug for Exact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("_")
    }
}

#[cfg(test)]
mod tests;

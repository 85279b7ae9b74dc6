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
use rtit_replay_core::regs::ctl;

use super::exec::CNTP_MASK;
use super::{Edge, Retired, UnitModel};

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
        near(last) && self.retire_edge(plain + 1, Edge::of(last.cofi, last.taken), last.next_ip, last.nlip())
    }

    /// Retires a block of `count` instructions whose last one (NLIP `nlip`, a near
    /// instruction) left by `edge` for `next`, as [`Self::retire_block`] would; false, with
    /// nothing done, where that needs them one by one.
    #[inline(always)]
    pub fn retire_edge(&mut self, count: u64, edge: Edge, next: u64, nlip: u64) -> bool {
        if !self.straight_is_exact() {
            return false;
        }
        self.count_exact(count);
        let compress = self.compresses_returns();
        self.edge_packets(edge, next, nlip, compress);
        self.cpu.ip = next;
        true
    }

    /// Counts `count` instructions retired where [`Self::takes_runs`] holds, whose packets
    /// [`Self::edge_packets`] wrote: the count of traced instructions, the clock and RTIT_CNTP
    /// move by them. No packet depends on them under those conditions (no cycle-accurate
    /// mode, no MTC), so a batch loop counts a stretch of blocks in a local and hands the
    /// total over at its end (issue 20: the count, the clock and RTIT_CNTP, each read and
    /// written back at every block, were chains through memory from one block to the next),
    /// as long as nothing reads them in between.
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
    /// the clock: its own packets ([`Self::edge_packets`]) and the IP.
    #[inline(always)]
    fn near_packets(&mut self, r: &Retired) {
        let compress = self.compresses_returns();
        self.edge_packets(Edge::of(r.cofi, r.taken), r.next_ip, r.nlip(), compress);
        self.cpu.ip = r.next_ip;
    }

    /// Counts a stretch of `count` instructions whose edges [`Self::edge_packets`] wrote,
    /// the last of which went on to `next_ip` ([`Self::count_exact`]'s conditions).
    #[inline(always)]
    pub fn end_stretch(&mut self, count: u64, next_ip: u64) {
        self.count_exact(count);
        self.cpu.ip = next_ip;
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

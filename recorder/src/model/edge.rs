//! What a near branch (or none) writes once it retired with PacketEn set before and after
//! (table 19): its own packets alone, which depend on how it left its block, its *edge*, and
//! not on the rest of its class. A backend that tells edges apart by the next block's start
//! (the qemu engine's fast path, issue 20) hands the edge over as it found it, instead of
//! rebuilding a [`super::Retired`] that the model would classify a second time.

use rtit_replay_core::cofi::Cofi;
use rtit_replay_core::ip::LIP_MASK;

use super::UnitModel;

/// How a near instruction went on to the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// No packet: no branch, or a direct jump.
    Plain,
    /// A conditional branch not taken (a TNT bit 0).
    NotTaken,
    /// A conditional branch taken (a TNT bit 1).
    Taken,
    /// A direct call: no packet, but its NLIP is LAST_CALL_NLIP under return compression.
    Call,
    /// A return: a TNT bit 1 when compressed (§4.2.3), else a TIP.
    Return,
    /// An indirect jump: a TIP.
    Jump,
    /// An indirect call: a TIP, and its NLIP is LAST_CALL_NLIP under return compression.
    IndirectCall,
}

impl Edge {
    /// The edge of an instruction of class `cofi` (a near one: far transfers have none); for
    /// a conditional branch, taken or not (`taken`).
    #[inline(always)]
    pub fn of(cofi: Cofi, taken: bool) -> Self {
        match cofi {
            Cofi::Conditional if taken => Self::Taken,
            Cofi::Conditional => Self::NotTaken,
            Cofi::DirectCall => Self::Call,
            Cofi::Return => Self::Return,
            Cofi::IndirectJump => Self::Jump,
            Cofi::IndirectCall => Self::IndirectCall,
            _ => Self::Plain,
        }
    }
}

impl UnitModel {
    /// Whether returns are compressed (RTIT_CTL.CmprsRet): a loop over many edges reads it
    /// once ([`Self::edge_packets`]).
    #[inline]
    pub fn compresses_returns(&self) -> bool {
        self.regs.has(rtit_replay_core::regs::ctl::CMPRS_RET)
    }

    /// The packets of a near instruction whose NLIP is `nlip` and which left by `edge` to
    /// `next`, with PacketEn set before and after; `compress` is
    /// [`Self::compresses_returns`]. The model's IP and counts are the caller's to move
    /// (see `straight`): exact only under the conditions of a straight run.
    #[inline(always)]
    pub fn edge_packets(&mut self, edge: Edge, next: u64, nlip: u64, compress: bool) {
        match edge {
            Edge::Plain => {}
            Edge::NotTaken => self.out.tnt_bit(false),
            Edge::Taken => self.out.tnt_bit(true),
            Edge::Call if compress => self.out.last_call_nlip = Some(nlip & LIP_MASK),
            Edge::Call => {}
            Edge::Return if compress && self.out.last_call_nlip == Some(next & LIP_MASK) => self.out.tnt_bit(true),
            Edge::Return | Edge::Jump => self.out.tip(next),
            Edge::IndirectCall => {
                self.out.tip(next);
                if compress {
                    self.out.last_call_nlip = Some(nlip & LIP_MASK);
                }
            }
        }
    }
}

//! A block cut short before its last instruction (issue 20). The plugin counts a block at
//! once, adding its instruction count before its last instruction (an add before every
//! instruction took a fifth of QEMU's thread), so a block that stopped earlier counts 0, and
//! where it stopped comes from what follows it:
//! - the next block starts at one of its instructions: a store into the block made QEMU
//!   re-translate it and re-run from the storing instruction, which had started;
//! - a signal handler's entry, with the frame `rtit record` read there
//!   ([`Engine::signal_delivered`]): the frame's saved RIP is the instruction that faulted;
//! - the process died: where QEMU's gdbstub reported the signal it died of
//!   ([`Engine::signal_at`]) is the instruction that faulted.
//!
//! Either way that instruction started and did not retire, the ones before it retired: the
//! count is what an add before every instruction would have said. Nothing else cuts a block
//! short under QEMU 7.2 user mode (a signal that does not come from the code waits for the
//! block's end); where none of these tells, the block is a gap in the trace, never a guess.

use super::{Counts, Engine, Pending};
use crate::model::Input;

impl Engine {
    /// `rtit record` saw the program at `ip` when QEMU's gdbstub reported a signal that goes
    /// to no handler: if the process dies of it, within the running block, it faulted there.
    pub fn signal_at(&mut self, ip: u64) {
        self.signal_ip = Some(ip);
    }

    /// The first address of the block the engine has pending: the running one, once it has
    /// every block the vCPU noted (`rtit record` counts a cut block's instructions from it).
    pub fn pending_start(&self) -> Option<u64> {
        self.pending.map(|p| self.hot[p.id as usize].start)
    }

    /// How many instructions the pending block keeps (`None` if none is pending).
    pub fn pending_kept(&self) -> Option<usize> {
        self.pending.map(|p| self.summaries[p.id as usize].kept as usize)
    }

    /// How many of pending block `p`'s instructions started, from `counts` and what came
    /// after it (`next`: the next block's start; `None`: the process died); `None` where
    /// nothing tells where a block cut short stopped.
    pub(super) fn started(&self, p: Pending, counts: Counts, next: Option<u64>) -> Option<usize> {
        let n = self.summaries[p.id as usize].kept as usize;
        if counts.started != 0 || n < 2 {
            return Some((counts.started as usize).min(n));
        }
        let at = match (self.delivered, next) {
            (Some((handler, resume)), Some(to)) if handler == to => resume,
            (_, Some(to)) => to,
            (_, None) => self.signal_ip?,
        };
        // Not the last: it would have counted the whole block.
        let insns = &self.blocks[p.id as usize].insns[..n - 1];
        insns.iter().position(|i| i.ip == at).map(|j| j + 1)
    }

    /// A pending block was cut short and nothing tells where (see [`Self::started`]): what
    /// it ran is lost in an overflow, which the next instruction that retires (the next
    /// block's first) clears with FUP.BuffOvf at its next IP (§4.2.5); as the process died,
    /// it is left out.
    pub(super) fn unknown_cut(&mut self, next: Option<u64>) {
        self.stats.gaps += 1;
        if next.is_some() {
            self.apply(Input::Overflow { instructions: 0 });
        }
    }
}

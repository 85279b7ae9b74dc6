//! How the engine feeds the unit model: a block's instructions (a straight run at once where
//! the model can take it so, [`crate::model::UnitModel::retire_straight`]), one instruction,
//! and the events the kernel's work stands for; each fed to the oracle too when the fast path
//! is checked.

use rtit_replay_core::cofi::{Cofi, FarKind};

use super::{Engine, Kernel, KERNEL};
use crate::model::{Input, Retired, UnitModel};
use crate::qemu::block::BlockInsn;

impl Engine {
    pub(super) fn model(&mut self) -> &mut UnitModel {
        self.model.as_mut().expect("tracing")
    }

    /// Retires instructions `from..to` of block `id`, each followed by the next (the last
    /// by its NLIP): at once where they are not branches and the model can take them so
    /// (nearly always), else one by one. Nothing is copied: a copy of each block's
    /// instructions cost an allocation per executed block.
    pub(super) fn retire_part(&mut self, id: u32, from: usize, to: usize) {
        if from >= to {
            return;
        }
        let s = &self.summaries[id as usize];
        let model = self.model.as_mut().expect("tracing");
        // Up to the last instruction: the run ends where it starts (a block is consecutive),
        // and its instructions need not be read at all.
        let whole = to + 1 == s.kept as usize;
        let unwatched = self.truth.is_none() && self.oracle.is_none();
        if whole && to <= s.straight as usize && unwatched && model.retire_straight((to - from) as u64, s.last.ip) {
            return;
        }
        let block = &self.blocks[id as usize];
        let insns = &block.insns[from..to];
        let one_by_one = |insn: &BlockInsn, i: usize| {
            let next = insns.get(i + 1).map_or_else(|| insn.nlip(), |n| n.ip);
            Retired::new(insn.ip, insn.len, insn.cofi, next)
        };
        if to <= block.straight && model.retire_straight(insns.len() as u64, insns[insns.len() - 1].nlip()) {
            // PacketEn was set throughout: the truth holds them all.
            if let Some(t) = &mut self.truth {
                t.extend(insns.iter().map(|i| i.ip));
            }
            if let Some(o) = &mut self.oracle {
                insns
                    .iter()
                    .enumerate()
                    .for_each(|(i, insn)| o.retire(&one_by_one(insn, i)));
            }
            return;
        }
        for (i, insn) in insns.iter().enumerate() {
            if let Some(t) = &mut self.truth {
                if model.packet_en() {
                    t.push(insn.ip);
                }
            }
            let r = one_by_one(insn, i);
            model.retire(&r);
            if let Some(o) = &mut self.oracle {
                o.retire(&r);
            }
        }
    }

    pub(super) fn retire(&mut self, insn: BlockInsn, next: u64, cpl: Option<u8>) {
        let model = self.model.as_mut().expect("tracing");
        if let Some(t) = &mut self.truth {
            if model.packet_en() {
                t.push(insn.ip);
            }
        }
        let mut r = Retired::new(insn.ip, insn.len, insn.cofi, next);
        if let Some(cpl) = cpl {
            r = r.to_cpl(cpl);
        }
        if !model.retire_near(&r) {
            model.retire(&r);
        }
        if let Some(o) = &mut self.oracle {
            o.retire(&r);
        }
    }

    /// Feeds an event (or a kernel instruction) to the model, and to the oracle.
    pub(super) fn apply(&mut self, input: Input) {
        self.model().apply(&input);
        if let Some(o) = &mut self.oracle {
            o.apply(&input);
        }
    }

    pub(super) fn fault(&mut self) {
        self.stats.faults += 1;
        let ip = self.model().cpu().ip;
        self.last_fault = Some(ip);
        self.apply(Input::Fault {
            handler: KERNEL,
            cpl: 0,
        });
        self.kernel = Kernel::Delivering;
    }

    pub(super) fn interrupt(&mut self) {
        self.stats.interrupts += 1;
        self.apply(Input::Interrupt {
            handler: KERNEL,
            cpl: 0,
        });
        self.kernel = Kernel::Delivering;
    }

    /// `last` retired and a signal was delivered after it, but where `last` went is unknown:
    /// its packets are lost in an overflow that ends at the handler (FUP.BuffOvf, §4.2.5).
    pub(super) fn gap(&mut self, last: BlockInsn, handler: u64) {
        self.stats.gaps += 1;
        self.apply(Input::Overflow { instructions: 0 });
        self.retire(last, handler, None);
    }

    pub(super) fn sysret(&mut self, to: u64) {
        let r = Retired::new(KERNEL + 0x40, 3, Cofi::Far(FarKind::Sysret), to).to_cpl(3);
        self.apply(Input::Retire(r));
    }

    pub(super) fn iret(&mut self, to: u64) {
        let r = Retired::new(KERNEL + 0x40, 3, Cofi::Far(FarKind::Iret), to).to_cpl(3);
        self.apply(Input::Retire(r));
    }
}

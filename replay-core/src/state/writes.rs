//! What an instruction writes, by iced-x86's `InstructionInfo`, made unknown: the one rule both
//! passes share (forwards: the value after is unknown; backwards: the value before is).

use iced_x86::{Instruction, InstructionInfo, InstructionInfoFactory, Mnemonic, Register};

use super::ops::{address_register, extent, writes};
use super::reg::Reg;
use super::State;

/// Forgets the memory `insn` writes, at addresses computed from the registers in `st` (the
/// registers before the instruction); all memory if an address or a size is not known.
pub fn forget_memory(st: &mut State, insn: &Instruction, info: &InstructionInfo) {
    for m in info.used_memory() {
        if writes(m.access()) {
            let size = extent(&st.regs, insn, m.memory_size().size(), &st.cpu);
            let address = m.virtual_address(0, |r, _, _| address_register(&st.regs, r, true));
            match (address, size) {
                (Some(a), Some(size)) => st.mem.forget(a, size),
                _ => {
                    super::why::insist(super::why::Cause::UnknownAddress(insn.mnemonic()));
                    st.mem.forget_all()
                }
            }
        }
    }
}

/// Registers an instruction writes, at most this many kept in a [`Written`].
const KEPT: usize = 6;

/// What `InstructionInfo` says an instruction writes, summarised once per distinct instruction
/// of a history: the backward pass needs it at every step, and making an `InstructionInfo`
/// each time took a tenth of a walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The registers it writes, the first `count` of them.
    regs: [Register; KEPT],
    count: u8,
    /// Whether it writes memory: its addresses depend on the registers at the time, so the
    /// `InstructionInfo` is made again when it does.
    pub memory: bool,
}

impl Written {
    /// The summary of `insn`, if its written registers fit.
    pub fn of(insn: &Instruction, factory: &mut InstructionInfoFactory) -> Option<Written> {
        let info = factory.info(insn);
        let mut w = Written {
            regs: [Register::None; KEPT],
            count: 0,
            memory: info.used_memory().iter().any(|m| writes(m.access())),
        };
        for r in info.used_registers().iter().filter(|r| writes(r.access())) {
            *w.regs.get_mut(usize::from(w.count))? = r.register();
            w.count += 1;
        }
        Some(w)
    }

    /// The registers it writes.
    pub fn registers(&self) -> &[Register] {
        &self.regs[..usize::from(self.count)]
    }
}

/// Forgets the registers `insn` writes; a segment register write (or WRFSBASE/WRGSBASE) also
/// changes the segment bases.
pub fn forget_registers(st: &mut State, insn: &Instruction, info: &InstructionInfo) {
    let written = info
        .used_registers()
        .iter()
        .filter(|r| writes(r.access()))
        .map(|r| r.register());
    forget_written_registers(st, insn, written);
}

/// [`forget_registers`] from the registers `insn` writes (its [`Written::registers`]).
pub fn forget_written_registers(st: &mut State, insn: &Instruction, written: impl Iterator<Item = Register>) {
    if super::vector::restores_all(insn) {
        st.vec.forget_all();
    }
    for r in written {
        if let Some(i) = super::vector::index(r) {
            st.vec.forget(i);
        }
        if let Some(i) = super::vector::opmask::index(r) {
            st.vec.k.set(i, 0, 0);
        }
        st.regs.forget(r);
        match r {
            Register::FS => st.regs.set(Reg::FsBase, None),
            Register::GS => st.regs.set(Reg::GsBase, None),
            _ => {}
        }
    }
    if matches!(insn.mnemonic(), Mnemonic::Wrfsbase | Mnemonic::Wrgsbase) {
        st.regs.set(Reg::FsBase, None);
        st.regs.set(Reg::GsBase, None);
    }
}

/// Whether `insn` replaces all of RFLAGS, including bits iced-x86's flag sets do not name (NT,
/// RF, ID …).
pub fn replaces_all_flags(insn: &Instruction) -> bool {
    matches!(
        insn.mnemonic(),
        Mnemonic::Popf | Mnemonic::Popfd | Mnemonic::Popfq | Mnemonic::Iret | Mnemonic::Iretd | Mnemonic::Iretq
    )
}

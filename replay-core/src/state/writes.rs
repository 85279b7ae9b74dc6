//! What an instruction writes, by iced-x86's `InstructionInfo`, made unknown: the one rule both
//! passes share (forwards: the value after is unknown; backwards: the value before is).

use iced_x86::{Instruction, InstructionInfo, Mnemonic, Register};

use super::ops::{address_register, extent, writes};
use super::reg::Reg;
use super::State;

/// Forgets the memory `insn` writes, at addresses computed from the registers in `st` (the
/// registers before the instruction); all memory if an address or a size is not known.
pub fn forget_memory(st: &mut State, insn: &Instruction, info: &InstructionInfo) {
    for m in info.used_memory() {
        if writes(m.access()) {
            let size = extent(&st.regs, insn, m.memory_size().size(), st.cpu.xcr0);
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

/// Forgets the registers `insn` writes; a segment register write (or WRFSBASE/WRGSBASE) also
/// changes the segment bases.
pub fn forget_registers(st: &mut State, insn: &Instruction, info: &InstructionInfo) {
    if super::vector::restores_all(insn) {
        st.vec.forget_all();
    }
    for r in info.used_registers() {
        if writes(r.access()) {
            if let Some(i) = super::vector::index(r.register()) {
                st.vec.forget(i);
            }
            if let Some(i) = super::vector::opmask::index(r.register()) {
                st.vec.k.set(i, 0, 0);
            }
            st.regs.forget(r.register());
            match r.register() {
                Register::FS => st.regs.set(Reg::FsBase, None),
                Register::GS => st.regs.set(Reg::GsBase, None),
                _ => {}
            }
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

//! Forward semantics: the state after an instruction from the state before it. Instructions
//! whose results matter for frames and values are computed; every other instruction makes
//! exactly what iced-x86's `InstructionInfoFactory` says it writes unknown, so an instruction
//! nobody modelled can lose knowledge but never produce a wrong value.

use iced_x86::{Instruction, InstructionInfoFactory, Mnemonic, OpKind, Register};

use super::alu::{is_cmov, is_setcc, signed_product, Alu, Shift, Unary};
use super::flags;
use super::ops::{effective_address, read, sign_extend, width, write};
use super::reg::{mask, RAX, RBP, RCX, RDI, RSI, RSP};
use super::State;
use crate::image::AddressSpace;

/// Applies the instruction `insn`. `next` is the address the history says ran next (the
/// branch outcome), if nothing came between.
pub fn step(
    st: &mut State,
    insn: &Instruction,
    next: Option<u64>,
    space: &AddressSpace,
    factory: &mut InstructionInfoFactory,
) {
    // (A partly known register is rare: the check before the call.)
    if (!st.regs.any_partial() || !super::partial::step(st, insn))
        && !modelled(st, insn, next, space)
        && !super::integer::step(st, insn, space)
        && !super::vector::step(st, insn, space)
        && !super::rounded::step(st, insn, space)
        && !super::float::step(st, insn, space)
        && !super::mxcsr::step(st, insn, space)
        && !super::xsave::step(st, insn, space)
    {
        let before = st.regs.clone();
        generic(st, insn, factory);
        super::mxcsr::after_generic(st, &before, insn, space);
    }
}

/// What an instruction nobody modelled does: its written registers, memory and flags become
/// unknown.
pub fn generic(st: &mut State, insn: &Instruction, factory: &mut InstructionInfoFactory) {
    super::why::insist(super::why::Cause::Unmodelled(insn.mnemonic()));
    let info = factory.info(insn);
    // Memory first: its addresses use the registers before the instruction.
    super::writes::forget_memory(st, insn, info);
    super::writes::forget_registers(st, insn, info);
    if super::writes::replaces_all_flags(insn) {
        st.flags.forget(flags::ALL);
    } else {
        st.flags.apply_generic(insn);
    }
}

fn push(st: &mut State, value: Option<u64>) {
    let rsp = st.regs.get(RSP).map(|v| v.wrapping_sub(8));
    st.regs.set(RSP, rsp);
    match rsp {
        Some(a) => st.mem.store(a, 8, value),
        None => {
            super::why::insist(super::why::Cause::UnknownAddress(Mnemonic::Push));
            st.mem.forget_all()
        }
    }
}

fn pop(st: &mut State, space: &AddressSpace) -> Option<u64> {
    let rsp = st.regs.get(RSP);
    st.regs.set(RSP, rsp.map(|v| v.wrapping_add(8)));
    st.mem.read_u64(rsp?, 8, space)
}

/// The instructions computed exactly. Returns false for the rest.
fn modelled(st: &mut State, insn: &Instruction, next: Option<u64>, space: &AddressSpace) -> bool {
    use Mnemonic as M;
    let w = width(insn, 0);
    let is_gpr_or_mem = |op: u32| match insn.op_kind(op) {
        OpKind::Register => insn.op_register(op).is_gpr(),
        _ => true,
    };
    match insn.mnemonic() {
        M::Mov if is_gpr_or_mem(0) && is_gpr_or_mem(1) => {
            let v = read(st, insn, 1, space);
            write(st, insn, 0, v);
        }
        M::Movzx => {
            let v = read(st, insn, 1, space);
            write(st, insn, 0, v);
        }
        M::Movsx | M::Movsxd => {
            let v = read(st, insn, 1, space).map(|v| sign_extend(v, width(insn, 1)) & mask(w));
            write(st, insn, 0, v);
        }
        M::Lea => {
            let v = effective_address(&st.regs, insn, 1).map(|a| a & mask(w));
            write(st, insn, 0, v);
        }
        M::Push if insn.stack_pointer_increment() == -8 => {
            let v = match insn.op_kind(0) {
                OpKind::Register if insn.op_register(0).is_gpr() => st.regs.read(insn.op_register(0)),
                OpKind::Register => return false,
                OpKind::Memory => read(st, insn, 0, space),
                // Immediates are sign-extended to 64 bits by iced already.
                _ => Some(insn.immediate(0)),
            };
            push(st, v);
        }
        M::Pop if insn.op_kind(0) == OpKind::Register && insn.op_register(0).size() == 8 => {
            let v = pop(st, space);
            write(st, insn, 0, v);
        }
        M::Call => push(st, Some(insn.next_ip())),
        M::Ret => {
            let extra = if insn.op_count() > 0 { insn.immediate(0) } else { 0 };
            let rsp = st.regs.get(RSP).map(|v| v.wrapping_add(8 + extra));
            st.regs.set(RSP, rsp);
        }
        M::Leave => {
            st.regs.set(RSP, st.regs.get(RBP));
            let v = pop(st, space);
            st.regs.set(RBP, v);
        }
        m @ (M::Add | M::Sub | M::Cmp | M::And | M::Or | M::Xor | M::Test) => {
            let Some(alu) = Alu::of(m) else { return false };
            let same = insn.op_kind(0) == OpKind::Register
                && insn.op_kind(1) == OpKind::Register
                && insn.op_register(0) == insn.op_register(1);
            let (a, b) = (read(st, insn, 0, space), read(st, insn, 1, space));
            let (a, b) = match (alu, same) {
                // xor r, r and sub r, r are zero whatever r held.
                (Alu::Xor | Alu::Sub, true) => (Some(0), Some(0)),
                _ => (a, b),
            };
            let r = match (a, b) {
                (Some(a), Some(b)) => Some(alu.apply(&mut st.flags, &st.cpu, a, b, w)),
                _ => {
                    st.flags.apply_generic(insn);
                    None
                }
            };
            if alu.writes() {
                write(st, insn, 0, r);
            }
        }
        m @ (M::Inc | M::Dec | M::Neg | M::Not) => {
            let Some(unary) = Unary::of(m) else { return false };
            let a = read(st, insn, 0, space);
            let r = a.map(|a| unary.apply(&mut st.flags, a, w));
            if a.is_none() {
                st.flags.apply_generic(insn);
            }
            write(st, insn, 0, r);
        }
        m @ (M::Shl | M::Sal | M::Shr | M::Sar) => {
            let Some(shift) = Shift::of(m) else { return false };
            let Some(count) = read(st, insn, 1, space).map(|c| Shift::count(c, w)) else {
                st.flags.apply_generic(insn);
                write(st, insn, 0, None);
                return true;
            };
            if count == 0 {
                return true;
            }
            let a = read(st, insn, 0, space);
            let r = a.map(|a| shift.apply(&mut st.flags, a, count, w));
            if a.is_none() {
                st.flags.apply_generic(insn);
            }
            write(st, insn, 0, r);
        }
        M::Imul if insn.op_count() >= 2 => {
            let (a, b) = if insn.op_count() == 3 {
                (read(st, insn, 1, space), read(st, insn, 2, space))
            } else {
                (read(st, insn, 0, space), read(st, insn, 1, space))
            };
            st.flags.apply_generic(insn);
            let r = a.zip(b).map(|(a, b)| signed_product(&mut st.flags, a, b, w));
            write(st, insn, 0, r);
        }
        M::Cdqe => {
            let v = st.regs.read(Register::EAX).map(|v| sign_extend(v, 4));
            st.regs.set(RAX, v);
        }
        M::Cwde => {
            let v = st.regs.read(Register::AX).map(|v| sign_extend(v, 2) & mask(4));
            st.regs.set(RAX, v);
        }
        M::Cdq => {
            let v = st
                .regs
                .read(Register::EAX)
                .map(|v| if v & (1 << 31) != 0 { mask(4) } else { 0 });
            st.regs.write(Register::EDX, v);
        }
        M::Cqo => {
            let v = st.regs.get(RAX).map(|v| if (v as i64) < 0 { u64::MAX } else { 0 });
            st.regs.write(Register::RDX, v);
        }
        M::Xchg if is_gpr_or_mem(0) && is_gpr_or_mem(1) => {
            let (a, b) = (read(st, insn, 0, space), read(st, insn, 1, space));
            write(st, insn, 0, b);
            write(st, insn, 1, a);
        }
        m if is_cmov(m) => {
            let v = match st.flags.condition(insn.condition_code()) {
                Some(true) => read(st, insn, 1, space),
                // A 32-bit cmov zero-extends its destination even when the move does not happen.
                Some(false) => read(st, insn, 0, space),
                None => None,
            };
            write(st, insn, 0, v);
        }
        m if is_setcc(m) => {
            let v = st.flags.condition(insn.condition_code()).map(u64::from);
            write(st, insn, 0, v);
        }
        M::Stosb | M::Stosw | M::Stosd | M::Stosq | M::Movsb | M::Movsw | M::Movsd | M::Movsq
            if is_repeated_string(insn) =>
        {
            rep_string(st, insn, space);
        }
        M::Stosb | M::Stosw | M::Stosd | M::Stosq | M::Movsb | M::Movsw | M::Movsd | M::Movsq
            if insn.op_kind(0) == OpKind::MemoryESRDI =>
        {
            single_string(st, insn, space);
        }
        M::Lodsb | M::Lodsw | M::Lodsd | M::Lodsq
            if insn.op_kind(1) == OpKind::MemorySegRSI && !insn.has_rep_prefix() =>
        {
            single_string(st, insn, space);
        }
        // Nothing but rip, which the history gives.
        M::Nop | M::Endbr64 | M::Pause => {}
        _ if insn.is_jmp_short_or_near() || insn.is_jmp_near_indirect() => {}
        _ if insn.is_jcc_short_or_near() => {
            let target = insn.near_branch_target();
            if let Some(next) = next {
                if target != insn.next_ip() {
                    st.flags.constrain(insn.condition_code(), next == target);
                }
            }
        }
        _ => return false,
    }
    true
}

/// Whether `insn` is a string instruction with a REP (or REPNE) prefix: `movsd` is also an SSE
/// move, which has a memory or register first operand instead of `es:[rdi]`.
pub fn is_repeated_string(insn: &Instruction) -> bool {
    (insn.has_rep_prefix() || insn.has_repne_prefix())
        && matches!(
            insn.op_kind(0),
            OpKind::MemoryESDI | OpKind::MemoryESEDI | OpKind::MemoryESRDI
        )
}

/// One `movs`, `stos` or `lods` (64-bit addresses): the element moves and the pointers step
/// by its size, up or down as DF says.
fn single_string(st: &mut State, insn: &Instruction, space: &AddressSpace) {
    let m = insn.mnemonic();
    let size = match m {
        Mnemonic::Movsb | Mnemonic::Stosb | Mnemonic::Lodsb => 1,
        Mnemonic::Movsw | Mnemonic::Stosw | Mnemonic::Lodsw => 2,
        Mnemonic::Movsd | Mnemonic::Stosd | Mnemonic::Lodsd => 4,
        _ => 8,
    };
    let step = |st: &State, r| {
        let down = st.flags.bit(flags::DF);
        st.regs.get(r).zip(down).map(|(v, down)| {
            if down {
                v.wrapping_sub(size)
            } else {
                v.wrapping_add(size)
            }
        })
    };
    let (is_movs, is_lods) = (
        matches!(m, Mnemonic::Movsb | Mnemonic::Movsw | Mnemonic::Movsd | Mnemonic::Movsq),
        matches!(m, Mnemonic::Lodsb | Mnemonic::Lodsw | Mnemonic::Lodsd | Mnemonic::Lodsq),
    );
    let value = match (is_movs || is_lods, st.regs.get(RSI)) {
        (true, Some(src)) => st.mem.read_u64(src, size as u32, space),
        (true, None) => None,
        (false, _) => st.regs.get(RAX).map(|v| v & mask(size as u32)),
    };
    if is_lods {
        let r = match size {
            1 => Register::AL,
            2 => Register::AX,
            4 => Register::EAX,
            _ => Register::RAX,
        };
        st.regs.write(r, value);
    } else {
        match st.regs.get(RDI) {
            Some(dst) => st.mem.store(dst, size as u32, value),
            None => {
                super::why::insist(super::why::Cause::UnknownAddress(m));
                st.mem.forget_all();
            }
        }
        let next = step(st, RDI);
        st.regs.set(RDI, next);
    }
    if is_movs || is_lods {
        let next = step(st, RSI);
        st.regs.set(RSI, next);
    }
}

/// `rep stos` and `rep movs` (the history holds one position for all iterations): exact when
/// the count, the pointers and DF are known, else the registers they move and all memory are
/// unknown.
pub fn rep_string(st: &mut State, insn: &Instruction, space: &AddressSpace) {
    let size = u64::from(width(insn, 0));
    let is_movs = matches!(
        insn.mnemonic(),
        Mnemonic::Movsb | Mnemonic::Movsw | Mnemonic::Movsd | Mnemonic::Movsq
    );
    let (n, dst) = (st.regs.get(RCX), st.regs.get(RDI));
    let src = if is_movs { st.regs.get(RSI) } else { Some(0) };
    let forward = st.flags.bit(flags::DF) == Some(false);
    match (n, dst, src) {
        (Some(n), Some(dst), Some(src)) if forward && n.saturating_mul(size) <= 64 << 20 => {
            let len = n * size;
            if is_movs {
                // Element by element, as the CPU does (overlapping copies repeat a pattern).
                for i in 0..len {
                    let b = st.mem.read(src + i, 1, space);
                    match b {
                        Some(b) => st.mem.write(dst + i, &b),
                        None => st.mem.forget(dst + i, 1),
                    }
                }
                st.regs.set(RSI, Some(src + len));
            } else {
                match st.regs.get(RAX) {
                    Some(v) => {
                        let pattern = &v.to_le_bytes()[..size as usize];
                        for i in 0..n {
                            st.mem.write(dst + i * size, pattern);
                        }
                    }
                    None => st.mem.forget(dst, len),
                }
            }
            st.regs.set(RDI, Some(dst + len));
            st.regs.set(RCX, Some(0));
        }
        _ => {
            super::why::insist(super::why::Cause::UnknownAddress(insn.mnemonic()));
            st.mem.forget_all();
            st.regs.set(RCX, None);
            st.regs.set(RDI, None);
            if is_movs {
                st.regs.set(RSI, None);
            }
        }
    }
}

//! Backward semantics: the state before an instruction from the state after it (REPT's
//! backward analysis). What the instruction wrote is unknown before it, unless the write can
//! be undone (`add rsp, 8`, `push`, `pop`, `call`, `ret`, `lea r, [r + d]`, `xor r, imm`); and
//! what it read is learnt where the result shows it (`mov rax, rbx` tells `rbx`; `pop rbx`
//! tells the stack slot; `ret` tells the return address it read).

use iced_x86::{Instruction, InstructionInfoFactory, Mnemonic, OpKind, Register};

use super::flags;
use super::forward::is_repeated_string;
use super::ops::{address, width};
use super::reg::{slot, RBP, RSP};
use super::writes::Written;
use super::State;
use crate::image::AddressSpace;

/// Turns `st` from the state after `insn` into the state before it. `next` is the address
/// that ran after it, if nothing came between.
pub fn step(
    st: &mut State,
    insn: &Instruction,
    next: Option<u64>,
    space: &AddressSpace,
    factory: &mut InstructionInfoFactory,
    written: Option<Written>,
) {
    let after = st.regs.clone();
    super::mxcsr::backward(st, insn);
    let stored = stored_registers(st, insn, space);
    // 1. Registers before: unchanged unless written; written ones undone where possible.
    // 2. Memory before: what it wrote is unknown (addresses from the registers before).
    match written {
        Some(w) if !w.memory => {
            super::writes::forget_written_registers(st, insn, w.registers().iter().copied());
            undo_registers(st, &after, insn);
        }
        _ => {
            let info = factory.info(insn);
            super::writes::forget_registers(st, insn, info);
            undo_registers(st, &after, insn);
            if is_repeated_string(insn) {
                st.mem.forget_all();
            } else {
                super::writes::forget_memory(st, insn, info);
            }
        }
    }
    // 3. Flags before: the ones it modified are unknown; a branch outcome constrains them.
    if super::writes::replaces_all_flags(insn) {
        st.flags.forget(flags::ALL);
    } else {
        st.flags.forget(flags::from_iced(insn.rflags_modified()));
    }
    if insn.is_jcc_short_or_near() {
        if let Some(next) = next {
            if insn.near_branch_target() != insn.next_ip() {
                st.flags
                    .constrain(insn.condition_code(), next == insn.near_branch_target());
            }
        }
    }
    // 4. What the result tells about what it read.
    learn(st, &after, insn, next);
    for (r, v) in stored {
        set64(st, r, Some(v));
    }
}

/// What a store tells about the register it stored, read from the memory after it (before
/// that memory is forgotten): `push r` and `mov [m], r` for a 64-bit `r`.
fn stored_registers(st: &State, insn: &Instruction, space: &AddressSpace) -> Vec<(Register, u64)> {
    let (src, addr) = match insn.mnemonic() {
        Mnemonic::Push if insn.stack_pointer_increment() == -8 => (gpr64(insn, 0), st.regs.get(RSP)),
        Mnemonic::Mov if insn.op_kind(0) == OpKind::Memory => (gpr64(insn, 1), address(&st.regs, insn, 0)),
        _ => (None, None),
    };
    match (src, addr) {
        (Some(r), Some(a)) if r != Register::RSP => st.mem.read_u64(a, 8, space).map(|v| (r, v)).into_iter().collect(),
        _ => Vec::new(),
    }
}

/// A 64-bit general-purpose register operand.
fn gpr64(insn: &Instruction, op: u32) -> Option<Register> {
    (insn.op_kind(op) == OpKind::Register && insn.op_register(op).is_gpr64()).then(|| insn.op_register(op))
}

fn set64(st: &mut State, r: Register, v: Option<u64>) {
    if let (Some(s), Some(v)) = (slot(r), v) {
        st.regs.set(s.reg, Some(v));
    }
}

/// Undoes register writes that can be undone.
fn undo_registers(st: &mut State, after: &super::reg::RegFile, insn: &Instruction) {
    use Mnemonic as M;
    let rsp = after.get(RSP);
    let imm = |op: u32| match insn.op_kind(op) {
        OpKind::Register | OpKind::Memory => None,
        _ => Some(insn.immediate(op)),
    };
    match insn.mnemonic() {
        M::Push if insn.stack_pointer_increment() == -8 => st.regs.set(RSP, rsp.map(|v| v.wrapping_add(8))),
        M::Call => st.regs.set(RSP, rsp.map(|v| v.wrapping_add(8))),
        M::Pop if gpr64(insn, 0).is_some_and(|r| r != Register::RSP) => {
            st.regs.set(RSP, rsp.map(|v| v.wrapping_sub(8)))
        }
        M::Ret => {
            let extra = if insn.op_count() > 0 { insn.immediate(0) } else { 0 };
            st.regs.set(RSP, rsp.map(|v| v.wrapping_sub(8 + extra)));
        }
        M::Leave => st.regs.set(RBP, rsp.map(|v| v.wrapping_sub(8))),
        M::Add | M::Sub | M::Xor => {
            let Some(r) = gpr64(insn, 0) else { return };
            let b = match (imm(1), gpr64(insn, 1)) {
                (Some(b), _) => Some(b),
                (None, Some(r2)) if r2 != r => after.read(r2),
                _ => None,
            };
            let (Some(a), Some(b)) = (after.read(r), b) else { return };
            let before = match insn.mnemonic() {
                M::Add => a.wrapping_sub(b),
                M::Sub => a.wrapping_add(b),
                _ => a ^ b,
            };
            set64(st, r, Some(before));
        }
        M::Inc | M::Dec | M::Not | M::Neg => {
            let Some(r) = gpr64(insn, 0) else { return };
            let Some(a) = after.read(r) else { return };
            let before = match insn.mnemonic() {
                M::Inc => a.wrapping_sub(1),
                M::Dec => a.wrapping_add(1),
                M::Not => !a,
                _ => 0u64.wrapping_sub(a),
            };
            set64(st, r, Some(before));
        }
        M::Lea => {
            // lea r, [r + disp]: r before is r after - disp.
            let Some(r) = gpr64(insn, 0) else { return };
            if insn.memory_base() == r && insn.memory_index() == Register::None {
                let disp = insn.memory_displacement64();
                set64(st, r, after.read(r).map(|v| v.wrapping_sub(disp)));
            }
        }
        _ => {}
    }
}

/// Learns, in the state before, what the instruction read, from its result.
fn learn(st: &mut State, after: &super::reg::RegFile, insn: &Instruction, next: Option<u64>) {
    use Mnemonic as M;
    match insn.mnemonic() {
        M::Ret => {
            // It read its return address at rsp before.
            if let (Some(rsp), Some(next)) = (st.regs.get(RSP), next) {
                st.mem.store(rsp, 8, Some(next));
            }
        }
        M::Pop => {
            if let (Some(r), Some(rsp)) = (gpr64(insn, 0), st.regs.get(RSP)) {
                if r != Register::RSP {
                    st.mem.store(rsp, 8, after.read(r));
                }
            }
        }
        M::Leave => {
            if let Some(rbp) = st.regs.get(RBP) {
                st.mem.store(rbp, 8, after.get(RBP));
            }
        }
        M::Mov | M::Movzx if insn.op_kind(0) == OpKind::Register && insn.op_register(0).is_gpr() => {
            let dst = insn.op_register(0);
            let Some(v) = after.read(dst) else { return };
            let w = width(insn, 1);
            match insn.op_kind(1) {
                // mov r64, r2: r2 before is r after (r2 is not written).
                OpKind::Register if insn.op_register(1).is_gpr64() && insn.mnemonic() == M::Mov => {
                    let src = insn.op_register(1);
                    if slot(src).map(|s| s.reg) != slot(dst).map(|s| s.reg) {
                        set64(st, src, Some(v));
                    }
                }
                // A load: the memory before held the value (the destination is not in the
                // address, or its before-value is unknown and the address with it).
                OpKind::Memory if (1..=8).contains(&w) => {
                    if let Some(a) = address(&st.regs, insn, 1) {
                        st.mem.store(a, w, Some(v));
                    }
                }
                _ => {}
            }
        }
        M::Lea => {
            // lea r, [b + disp], b != r: b before is r after - disp.
            let (Some(r), b) = (gpr64(insn, 0), insn.memory_base()) else {
                return;
            };
            if b.is_gpr64() && b != r && insn.memory_index() == Register::None {
                let disp = insn.memory_displacement64();
                if st.regs.read(b).is_none() {
                    set64(st, b, after.read(r).map(|v| v.wrapping_sub(disp)));
                }
            }
        }
        _ => {}
    }
}

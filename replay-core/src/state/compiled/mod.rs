//! The history's most common instructions translated once into operations with their
//! registers, widths, address forms and flag masks already resolved, for the forward walk
//! ([`super::walker`]): moves, loads and stores, `lea`, the arithmetic, logic and shifts that
//! set flags, `imul`, `cmov`, `setcc`, push and pop, calls, returns and branches, about nine
//! in ten of the steps of python3's walk. Each step of the background fill asked iced-x86 for
//! the same operand kinds, registers, widths and flag tables of the same instruction every
//! time it ran (the walk goes over each instruction of a loop millions of times).
//!
//! An operation does exactly what [`super::forward::step`] does for its instruction, in the
//! same order of reads and writes, through the same register, flag and memory calls, so the
//! values and their causes are the same ([`tests`] compares them on every form translated).
//! An instruction of any other form, or in pages the program may rewrite, is not translated:
//! it takes the general semantics.

mod apply;
#[cfg(test)]
mod tests;

use iced_x86::{ConditionCode, Instruction, Mnemonic, OpKind, Register};

use super::alu::{self, Alu, Shift, Unary};
use super::flags::{Generic, Truth};
use super::ops::width;
use super::reg::{self, mask, Slot};
use crate::image::AddressSpace;

/// An instruction translated: its mnemonic (the cause of what it loses), what it does, its
/// one memory operand's address and its one immediate (a branch's target, a call's return
/// address), if it has them: 56 bytes a slot (88 with the operands in place, which made no
/// difference to the walk's speed).
#[derive(Debug, Clone, Copy)]
pub(super) struct Compiled {
    addr: Addr,
    imm: u64,
    op: Op,
    mnemonic: Mnemonic,
}

/// A memory operand's address: a displacement (the absolute address for `rip`-relative
/// ones), plus a 64-bit base register, a scaled 64-bit index register and the FS or GS base,
/// if any, added in that order (iced's `virtual_address`). Other forms (32-bit registers,
/// vector indexes) are not translated.
#[derive(Debug, Clone, Copy, Default)]
struct Addr {
    disp: u64,
    base: Option<u8>,
    index: Option<u8>,
    scale: u8,
    segment: Segment,
}

/// The segment base an address adds: none (ES, CS, SS and DS have base 0 in 64-bit mode,
/// and `lea` adds none), FS's or GS's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Segment {
    #[default]
    Zero,
    Fs,
    Gs,
}

/// An operand: a general-purpose register (or part of one), the memory operand (of a width
/// of 1 to 8 bytes), or the immediate (already masked to its width).
#[derive(Debug, Clone, Copy)]
enum Operand {
    Reg(Part),
    Mem(u8),
    Imm,
}

/// A general-purpose register or part of one, as [`Slot`] tells it, in three bytes.
#[derive(Debug, Clone, Copy)]
struct Part {
    number: u8,
    shift: u8,
    bytes: u8,
}

impl Part {
    fn of(s: Slot) -> Option<Part> {
        match s.reg {
            reg::Reg::Gpr(number) => Some(Part {
                number,
                shift: s.shift as u8,
                bytes: s.bytes as u8,
            }),
            _ => None,
        }
    }
}

/// How a move extends its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Extend {
    /// As it is (`mov`, `movzx`: the source is zero-extended when read).
    Zero,
    /// Sign-extended from the source's width to the destination's (`movsx`, `movsxd`).
    Sign { from: u8 },
}

/// What a translated instruction does, each as [`super::forward`]'s `modelled` does it.
#[derive(Debug, Clone, Copy)]
enum Op {
    Move {
        dst: Operand,
        src: Operand,
        extend: Extend,
        width: u8,
    },
    Lea {
        dst: Part,
        width: u8,
    },
    Alu {
        alu: Alu,
        dst: Operand,
        src: Operand,
        width: u8,
        /// Both operands the same register (`xor eax, eax`).
        same: bool,
        /// What the flags become when an input is unknown.
        generic: Generic,
    },
    Unary {
        unary: Unary,
        dst: Operand,
        width: u8,
        generic: Generic,
    },
    Shift {
        shift: Shift,
        dst: Operand,
        count: Operand,
        width: u8,
        generic: Generic,
    },
    /// The two- and three-operand `imul`: `dst = a * b`, truncated.
    Imul {
        dst: Operand,
        a: Operand,
        b: Operand,
        width: u8,
        generic: Generic,
    },
    Cmov {
        cc: ConditionCode,
        truth: Truth,
        dst: Operand,
        src: Operand,
    },
    Set {
        cc: ConditionCode,
        truth: Truth,
        dst: Operand,
    },
    Push {
        src: Operand,
    },
    Pop {
        dst: Part,
    },
    /// Pushes the immediate: the return address.
    Call,
    /// Adds 8 and the immediate to `rsp`.
    Ret,
    /// `rip` alone, which the history gives (`nop`, `jmp`).
    Nothing,
    /// The immediate is the target; `differs` whether it is not the next instruction (else
    /// the branch tells nothing).
    Jcc {
        cc: ConditionCode,
        truth: Truth,
        differs: bool,
    },
}

impl Compiled {
    /// The instruction's mnemonic.
    pub(super) fn mnemonic(&self) -> Mnemonic {
        self.mnemonic
    }

    /// `insn` translated, if it is of a form translated and the program cannot rewrite it.
    pub(super) fn translate(insn: &Instruction, space: &AddressSpace) -> Option<Compiled> {
        use Mnemonic as M;
        if space.may_rewrite(insn.ip()) {
            return None;
        }
        let mut addr = None;
        let mut imm = None;
        let mut operand = |op: u32| operand(insn, op, &mut addr, &mut imm);
        let w = width(insn, 0) as u8;
        let op = match insn.mnemonic() {
            M::Mov => Op::Move {
                dst: operand(0)?,
                src: operand(1)?,
                extend: Extend::Zero,
                width: w,
            },
            M::Movzx => Op::Move {
                dst: operand(0)?,
                src: operand(1)?,
                extend: Extend::Zero,
                width: w,
            },
            M::Movsx | M::Movsxd => Op::Move {
                dst: operand(0)?,
                src: operand(1)?,
                extend: Extend::Sign {
                    from: width(insn, 1) as u8,
                },
                width: w,
            },
            // rax from eax, eax from ax, sign-extended.
            M::Cdqe | M::Cwde => Op::Move {
                dst: Operand::Reg(Part {
                    number: 0,
                    shift: 0,
                    bytes: 8,
                }),
                src: Operand::Reg(Part {
                    number: 0,
                    shift: 0,
                    bytes: if insn.mnemonic() == M::Cdqe { 4 } else { 2 },
                }),
                extend: Extend::Sign {
                    from: if insn.mnemonic() == M::Cdqe { 4 } else { 2 },
                },
                width: if insn.mnemonic() == M::Cdqe { 8 } else { 4 },
            },
            m @ (M::Shl | M::Sal | M::Shr | M::Sar) => Op::Shift {
                shift: Shift::of(m)?,
                dst: operand(0)?,
                count: operand(1)?,
                width: w,
                generic: Generic::of(insn),
            },
            M::Imul if insn.op_count() >= 2 => {
                let dst = operand(0)?;
                let (a, b) = match insn.op_count() {
                    3 => (operand(1)?, operand(2)?),
                    _ => (dst, operand(1)?),
                };
                Op::Imul {
                    dst,
                    a,
                    b,
                    width: w,
                    generic: Generic::of(insn),
                }
            }
            M::Lea => {
                let Operand::Reg(dst) = operand(0)? else {
                    return None;
                };
                addr = Some(address(insn, 1)?);
                Op::Lea { dst, width: w }
            }
            m @ (M::Add | M::Sub | M::Cmp | M::And | M::Or | M::Xor | M::Test) => Op::Alu {
                alu: Alu::of(m)?,
                dst: operand(0)?,
                src: operand(1)?,
                width: w,
                same: insn.op_kind(0) == OpKind::Register
                    && insn.op_kind(1) == OpKind::Register
                    && insn.op_register(0) == insn.op_register(1),
                generic: Generic::of(insn),
            },
            m @ (M::Inc | M::Dec | M::Neg | M::Not) => Op::Unary {
                unary: Unary::of(m)?,
                dst: operand(0)?,
                width: w,
                generic: Generic::of(insn),
            },
            m if alu::is_cmov(m) => Op::Cmov {
                cc: insn.condition_code(),
                truth: Truth::of(insn.condition_code()),
                dst: operand(0)?,
                src: operand(1)?,
            },
            m if alu::is_setcc(m) => Op::Set {
                cc: insn.condition_code(),
                truth: Truth::of(insn.condition_code()),
                dst: operand(0)?,
            },
            M::Push if insn.stack_pointer_increment() == -8 => {
                let src = operand(0)?;
                // Immediates are sign-extended to 64 bits by iced already, and pushed so.
                if let Operand::Imm = src {
                    imm = Some(insn.immediate(0));
                }
                Op::Push { src }
            }
            M::Pop if insn.op_kind(0) == OpKind::Register && insn.op_register(0).size() == 8 => {
                let Operand::Reg(dst) = operand(0)? else { return None };
                Op::Pop { dst }
            }
            M::Call => {
                imm = Some(insn.next_ip());
                Op::Call
            }
            M::Ret => {
                imm = Some(if insn.op_count() > 0 { insn.immediate(0) } else { 0 });
                Op::Ret
            }
            M::Nop | M::Endbr64 | M::Pause => Op::Nothing,
            _ if insn.is_jmp_short_or_near() || insn.is_jmp_near_indirect() => Op::Nothing,
            _ if insn.is_jcc_short_or_near() => {
                imm = Some(insn.near_branch_target());
                Op::Jcc {
                    cc: insn.condition_code(),
                    truth: Truth::of(insn.condition_code()),
                    differs: insn.near_branch_target() != insn.next_ip(),
                }
            }
            _ => return None,
        };
        Some(Compiled {
            mnemonic: insn.mnemonic(),
            op,
            addr: addr.unwrap_or_default(),
            imm: imm.unwrap_or_default(),
        })
    }
}

/// Operand `op` of `insn`, if of a translated kind: a general-purpose register, the explicit
/// memory operand of the form [`Addr`] holds (noted in `addr`; at most one), an immediate
/// (noted in `imm`; at most one).
fn operand(insn: &Instruction, op: u32, addr: &mut Option<Addr>, imm: &mut Option<u64>) -> Option<Operand> {
    match insn.op_kind(op) {
        OpKind::Register => {
            let r = insn.op_register(op);
            r.is_gpr().then_some(())?;
            Some(Operand::Reg(Part::of(reg::slot(r)?)?))
        }
        OpKind::Memory => {
            let w = width(insn, op);
            if addr.is_some() || !(1..=8).contains(&w) {
                return None;
            }
            *addr = Some(address(insn, op)?);
            Some(Operand::Mem(w as u8))
        }
        k if super::ops::is_immediate(k) => {
            if imm.is_some() {
                return None;
            }
            *imm = Some(insn.immediate(op) & mask(width(insn, op)));
            Some(Operand::Imm)
        }
        _ => None,
    }
}

/// The address form of memory operand `op`, if [`Addr`] holds it: base none, `rip` or a
/// 64-bit register, index none or a 64-bit register (an address of 64 bits), or neither, whose
/// displacement iced masks to the displacement's size (worked out here once).
fn address(insn: &Instruction, op: u32) -> Option<Addr> {
    let gpr64 = |r: Register| (Register::RAX..=Register::R15).contains(&r);
    let (base, index) = (insn.memory_base(), insn.memory_index());
    let number = |r: Register| (r as u32 - Register::RAX as u32) as u8;
    let plain = insn.op_kind(op) == OpKind::Memory
        && (matches!(base, Register::RIP | Register::None) || gpr64(base))
        && (index == Register::None || gpr64(index))
        && !super::ops::ignores_index(insn);
    if !plain {
        return None;
    }
    // Of the instructions translated, only `lea` ignores its segment.
    let segment = match insn.memory_segment() {
        _ if insn.mnemonic() == Mnemonic::Lea => Segment::Zero,
        Register::ES | Register::CS | Register::SS | Register::DS => Segment::Zero,
        Register::FS => Segment::Fs,
        Register::GS => Segment::Gs,
        _ => return None,
    };
    let disp = match (base, index) {
        (Register::None, Register::None) => {
            insn.virtual_address(op, 0, |r, _, _| r.is_segment_register().then_some(0))?
        }
        _ => insn.memory_displacement64(),
    };
    Some(Addr {
        disp,
        base: gpr64(base).then(|| number(base)),
        index: (index != Register::None).then(|| number(index)),
        scale: insn.memory_index_scale() as u8,
        segment,
    })
}

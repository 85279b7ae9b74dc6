//! Registers whose bits are partly known, and the few instructions that carry such bits on.
//!
//! glibc's `strlen`, `strchr` and `memchr` load 16 or 32 bytes at a time, past the end of the
//! string, compare them, take a byte mask with `pmovmskb` and find its lowest set bit with
//! `bsf`/`tzcnt`. The bytes past the end are often unknown (uninitialised stack or heap), yet
//! the answer depends only on the bytes up to the terminator. So `pmovmskb` writes the mask
//! bits it knows, and `mov`, `or`, `and`, shifts by a known count, `test`, `bsf` and `tzcnt`
//! carry known bits on: `bsf` is known when its lowest set bit and every bit below it are.
//! Everything else sees a partly known register as unknown.

use iced_x86::{Instruction, Mnemonic as M, OpKind, Register};

use super::flags::{self, CF, OF, SF, ZF};
use super::ops::width;
use super::reg::mask;
use super::State;

/// A general-purpose register operand's value and known bits.
fn operand(st: &State, insn: &Instruction, op: u32) -> Option<(u64, u64)> {
    match insn.op_kind(op) {
        OpKind::Register if insn.op_register(op).is_gpr() => st.regs.read_bits(insn.op_register(op)),
        OpKind::Immediate8
        | OpKind::Immediate8to16
        | OpKind::Immediate8to32
        | OpKind::Immediate8to64
        | OpKind::Immediate16
        | OpKind::Immediate32
        | OpKind::Immediate32to64 => Some((insn.immediate(op), u64::MAX)),
        _ => None,
    }
}

/// Whether a register operand is partly, not wholly, known.
fn is_partial(st: &State, insn: &Instruction, op: u32) -> bool {
    let w = mask(width(insn, op));
    insn.op_kind(op) == OpKind::Register && operand(st, insn, op).is_some_and(|(_, m)| m & w != w && m & w != 0)
}

/// Flags after a logical result of `w` bytes with known bits `m`: CF and OF clear, ZF clear
/// if a known bit is set, SF if the sign bit is known; the rest unknown.
fn logic_flags(st: &mut State, v: u64, m: u64, w: u32) {
    st.flags.forget(flags::STATUS);
    st.flags.put(CF | OF, 0);
    let wm = mask(w);
    if v & m & wm != 0 {
        st.flags.put(ZF, 0);
    }
    let sign = 1u64 << (w * 8 - 1);
    if m & sign != 0 {
        st.flags.put(SF, if v & sign != 0 { SF } else { 0 });
    }
}

/// Applies `insn` if a register it reads is partly known and it is one of the instructions
/// above; false otherwise (the ordinary semantics then see the register as unknown).
pub fn step(st: &mut State, insn: &Instruction) -> bool {
    if !st.regs.any_partial() {
        return false;
    }
    let m = insn.mnemonic();
    if matches!(m, M::Shlx | M::Shrx | M::Sarx) {
        return shift_x(st, insn);
    }
    let source = match m {
        M::Mov | M::Bsf | M::Tzcnt => 1,
        M::Or | M::And | M::Test | M::Shl | M::Sal | M::Shr | M::Sar => 0,
        _ => return false,
    };
    if insn.op_count() != 2 || insn.op_kind(0) != OpKind::Register || !insn.op_register(0).is_gpr() {
        return false;
    }
    let partial = is_partial(st, insn, source) || (source == 0 && is_partial(st, insn, 1));
    if !partial {
        return false;
    }
    let w = width(insn, 0);
    let (Some((a, ma)), Some((b, mb))) = (operand(st, insn, 0), operand(st, insn, 1)) else {
        return false;
    };
    combine(st, insn, m, (a, ma), (b, mb), w)
}

/// `shlx`, `shrx`, `sarx` (BMI2: destination, source, count) of a partly known source.
fn shift_x(st: &mut State, insn: &Instruction) -> bool {
    if insn.op_kind(0) != OpKind::Register || !is_partial(st, insn, 1) {
        return false;
    }
    let (Some(src), Some(count)) = (operand(st, insn, 1), operand(st, insn, 2)) else {
        return false;
    };
    let m = match insn.mnemonic() {
        M::Shlx => M::Shl,
        M::Shrx => M::Shr,
        _ => M::Sar,
    };
    combine(st, insn, m, src, count, width(insn, 0))
}

/// `m` of `(a, known bits)` and `(b, known bits)` in `w` bytes into operand 0.
fn combine(st: &mut State, insn: &Instruction, m: M, (a, ma): (u64, u64), (b, mb): (u64, u64), w: u32) -> bool {
    let wm = mask(w);
    let dst = insn.op_register(0);
    let bmi2 = matches!(insn.mnemonic(), M::Shlx | M::Shrx | M::Sarx);
    match m {
        M::Mov => st.regs.write_bits(dst, b, mb),
        M::Or | M::And | M::Test => {
            let (v, k) = if m == M::Or {
                (a | b, (ma & mb) | (a & ma) | (b & mb))
            } else {
                (a & b, (ma & mb) | (ma & !a) | (mb & !b))
            };
            logic_flags(st, v, k, w);
            if m != M::Test {
                st.regs.write_bits(dst, v & wm, k | !wm);
            }
        }
        M::Shl | M::Sal | M::Shr | M::Sar => {
            if mb != u64::MAX {
                return false;
            }
            let c = (b & if w == 8 { 63 } else { 31 }) as u32;
            if c == 0 {
                return true;
            }
            let bits = w * 8;
            let (a, ma) = (a & wm, ma & wm);
            let (v, k) = match m {
                M::Shl | M::Sal => ((a << c) & wm, ((ma << c) | ((1u64 << c) - 1)) & wm),
                M::Shr => (a >> c, (ma >> c) | (wm & !(wm >> c))),
                _ => {
                    // The top `c` bits copy the sign: known if it is.
                    let sign = 1u64 << (bits - 1);
                    let top = wm & !(wm >> c);
                    match (ma & sign != 0, a & sign != 0) {
                        (true, true) => ((a >> c) | top, (ma >> c) | top),
                        (true, false) => (a >> c, (ma >> c) | top),
                        (false, _) => (a >> c, (ma >> c) & !top),
                    }
                }
            };
            if !bmi2 {
                st.flags.forget(flags::STATUS);
                if v & k != 0 {
                    st.flags.put(ZF, 0);
                }
            }
            st.regs.write_bits(dst, v, k | !wm);
        }
        _ => {
            // bsf, tzcnt: the lowest set bit, if it and every bit below it are known.
            let (b, mb) = (b & wm, mb | !wm);
            let lowest = b & mb & (b & mb).wrapping_neg();
            let index = lowest.trailing_zeros();
            let below = lowest.wrapping_sub(1);
            st.flags.forget(flags::STATUS);
            if lowest != 0 && mb & below == below {
                if m == M::Bsf || index != 0 {
                    st.flags.put(ZF, 0);
                }
                st.regs.write(dst, Some(u64::from(index)));
            } else {
                st.regs.write(dst, None);
            }
        }
    }
    true
}

/// Writes a `pmovmskb` result: bit `i` is byte `i`'s top bit, known where the byte is.
pub fn byte_mask(st: &mut State, dst: Register, bytes: &[u8], known: u64, len: usize) {
    let (mut v, mut k) = (0u64, !mask(len as u32 / 8));
    for (i, byte) in bytes.iter().enumerate().take(len) {
        if known & (1 << i) != 0 {
            k |= 1 << i;
            v |= u64::from(byte >> 7) << i;
        }
    }
    st.regs.write_bits(dst, v, k);
}

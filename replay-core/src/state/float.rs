//! Scalar SSE floating point, where the result does not depend on MXCSR. The recording does
//! not hold MXCSR (rounding mode, denormals-are-zero, flush-to-zero), so only what every
//! setting gives the same answer for is computed: truncating conversions to integers
//! (`cvttss2si`, `cvttsd2si`), conversions from integers that are exact, products and
//! quotients of singles whose exact value is a normal single, and ordered comparisons
//! (`comiss`, `ucomiss`, `comisd`, `ucomisd`) of operands that are not denormal. Anything
//! else becomes unknown, as the generic rule would make it. Legacy (SSE) encodings only: a
//! scalar result replaces the destination's low element and keeps the rest.

use iced_x86::{EncodingKind, Instruction, Mnemonic as M, OpKind};

use super::flags::{self, CF, PF, ZF};
use super::mxcsr::{FLAGS, IE, PE};
use super::ops::{address, read as read_gpr};
use super::vector::index;
use super::State;
use crate::image::AddressSpace;

/// Operand `op` as `len` bytes (4 or 8): the low element of a vector register, memory, or a
/// general-purpose register.
pub(super) fn scalar(st: &State, insn: &Instruction, op: u32, len: usize, space: &AddressSpace) -> Option<u64> {
    match insn.op_kind(op) {
        OpKind::Register => match index(insn.op_register(op)) {
            Some(i) => st.vec.lane(i, 0, len),
            None => read_gpr(st, insn, op, space),
        },
        OpKind::Memory => st.mem.read_u64(address(&st.regs, insn, op)?, len as u32, space),
        _ => None,
    }
}

/// A single or double, by its bits, as a double (exactly).
pub(super) fn as_f64(bits: u64, double: bool) -> f64 {
    if double {
        f64::from_bits(bits)
    } else {
        f64::from(f32::from_bits(bits as u32))
    }
}

/// Whether a single or double (by its bits) is denormal: DAZ would read it as zero.
fn denormal(bits: u64, double: bool) -> bool {
    if double {
        f64::from_bits(bits).is_subnormal()
    } else {
        f32::from_bits(bits as u32).is_subnormal()
    }
}

/// Applies a scalar floating-point instruction; false if it is not one of these.
pub fn step(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    if insn.encoding() != EncodingKind::Legacy {
        return false;
    }
    let m = insn.mnemonic();
    match m {
        M::Cvttss2si | M::Cvttsd2si => {
            let double = m == M::Cvttsd2si;
            let dst = insn.op_register(0);
            let bits = dst.size() * 8;
            let x = scalar(st, insn, 1, if double { 8 } else { 4 }, space);
            let v = x.map(|x| {
                let f = as_f64(x, double);
                let t = f.trunc();
                let limit = 2f64.powi(bits as i32 - 1);
                if f.is_nan() || t >= limit || t < -limit {
                    // The integer indefinite value (invalid is masked, or the CPU would
                    // have faulted here instead of going on).
                    st.mxcsr.raise(IE);
                    1u64 << (bits - 1)
                } else {
                    if t != f {
                        // Precision, unless DAZ read a denormal as zero.
                        match st.mxcsr.rounds_as_host() {
                            true => st.mxcsr.raise(PE),
                            false => st.mxcsr.maybe(PE),
                        }
                    }
                    (t as i64) as u64 & if bits == 64 { u64::MAX } else { u64::from(u32::MAX) }
                }
            });
            st.regs.write(dst, v);
        }
        M::Cvtsi2ss | M::Cvtsi2sd => {
            let Some(i) = index(insn.op_register(0)) else {
                return false;
            };
            let src_bits = if insn.op_kind(1) == OpKind::Register {
                insn.op_register(1).size() * 8
            } else {
                insn.memory_size().size() * 8
            };
            let x = scalar(st, insn, 1, src_bits / 8, space).map(|x| {
                if src_bits == 32 {
                    i64::from(x as u32 as i32)
                } else {
                    x as i64
                }
            });
            let v = x.and_then(|x| {
                // Exact conversions only: then no rounding mode changes the result.
                // (2^63 itself converts back to i64::MAX by saturation: not exact.)
                let top = 2f64.powi(63);
                if m == M::Cvtsi2ss {
                    let f = x as f32;
                    (f as i64 == x && f64::from(f) < top).then(|| u64::from(f.to_bits()))
                } else {
                    let f = x as f64;
                    (f as i64 == x && f < top).then(|| f.to_bits())
                }
            });
            match v {
                Some(_) => {}
                None => st.mxcsr.maybe(PE),
            }
            st.vec.set_lane(i, 0, if m == M::Cvtsi2ss { 4 } else { 8 }, v);
        }
        M::Mulss | M::Divss => {
            let Some(i) = index(insn.op_register(0)) else {
                return false;
            };
            let (a, b) = (scalar(st, insn, 0, 4, space), scalar(st, insn, 1, 4, space));
            let v = a.zip(b).and_then(|(a, b)| {
                if denormal(a, false) || denormal(b, false) {
                    return None;
                }
                let (a, b) = (f64::from(f32::from_bits(a as u32)), f64::from(f32::from_bits(b as u32)));
                // A single's product is exact in a double; a quotient is exact if the
                // single it rounds to times the divisor gives the dividend back.
                let r = if m == M::Mulss { a * b } else { a / b };
                let r32 = r as f32;
                let exact = if m == M::Mulss {
                    f64::from(r32) == r
                } else {
                    f64::from(r32) * b == a
                };
                let zero = if m == M::Mulss {
                    a == 0.0 || b == 0.0
                } else {
                    a == 0.0 || b.is_infinite()
                };
                let ok = r.is_finite() && ((exact && r32.is_normal()) || (r32 == 0.0 && zero));
                ok.then(|| u64::from(r32.to_bits()))
            });
            // An exact, normal result raises nothing.
            if v.is_none() {
                st.mxcsr.maybe(FLAGS);
            }
            st.vec.set_lane(i, 0, 4, v);
        }
        M::Comiss | M::Ucomiss | M::Comisd | M::Ucomisd => {
            let double = matches!(m, M::Comisd | M::Ucomisd);
            let len = if double { 8 } else { 4 };
            let (a, b) = (scalar(st, insn, 0, len, space), scalar(st, insn, 1, len, space));
            st.flags.forget(flags::STATUS);
            let nan = |x: u64| {
                if double {
                    f64::from_bits(x).is_nan()
                } else {
                    f32::from_bits(x as u32).is_nan()
                }
            };
            // A NaN raises invalid (COMIS: any; UCOMIS: a signalling one), a denormal operand
            // DE unless DAZ is set; ordinary operands nothing.
            let quiet = if double { 1u64 << 51 } else { 1 << 22 };
            let signalling = |x: u64| nan(x) && x & quiet == 0;
            match a.zip(b) {
                Some((a, b)) if !denormal(a, double) && !denormal(b, double) => {
                    let any = |f: &dyn Fn(u64) -> bool| f(a) || f(b);
                    let unordered = matches!(m, M::Ucomiss | M::Ucomisd);
                    if any(&signalling) || (!unordered && any(&nan)) {
                        st.mxcsr.raise(IE);
                    }
                }
                _ => st.mxcsr.maybe(FLAGS),
            }
            if let Some((a, b)) = a.zip(b).filter(|&(a, b)| !denormal(a, double) && !denormal(b, double)) {
                let (a, b) = (as_f64(a, double), as_f64(b, double));
                let v = match a.partial_cmp(&b) {
                    None => ZF | PF | CF,
                    Some(std::cmp::Ordering::Less) => CF,
                    Some(std::cmp::Ordering::Equal) => ZF,
                    Some(std::cmp::Ordering::Greater) => 0,
                };
                st.flags.put(flags::STATUS, v);
            }
        }
        M::Movss | M::Movsd if insn.op_count() == 2 => {
            let len = if m == M::Movss { 4 } else { 8 };
            let v = scalar(st, insn, 1, len, space);
            match (insn.op_kind(0), index(insn.op_register(0))) {
                (OpKind::Register, Some(i)) => {
                    if insn.op_kind(1) == OpKind::Memory {
                        // A load zeroes the rest of the low 16 bytes.
                        st.vec.set_lane(i, 0, 8, Some(0));
                        st.vec.set_lane(i, 8, 8, Some(0));
                    }
                    st.vec.set_lane(i, 0, len, v);
                }
                (OpKind::Memory, _) => match address(&st.regs, insn, 0) {
                    Some(a) => st.mem.store(a, len as u32, v),
                    None => {
                        super::why::insist(super::why::Cause::UnknownAddress(m));
                        st.mem.forget_all();
                    }
                },
                _ => return false,
            }
        }
        _ => return false,
    }
    true
}

//! Scalar SSE arithmetic that rounds (`addsd`, `mulss`, `sqrtsd`, `cvtsd2si` …), computed when
//! MXCSR is known to round to nearest without DAZ or FTZ: then the CPU's result is IEEE 754's,
//! which is what the host's own arithmetic gives. The exception flags the instruction raises
//! are computed where that is easy to be sure of (finite, normal operands and results: only
//! precision can be raised, and an exact error term says whether it was); elsewhere they
//! become unknown unless set already. A NaN result is never computed (its payload depends on
//! operand order). Legacy (SSE) encodings: the low element changes, the rest stays.

use iced_x86::{EncodingKind, Instruction, Mnemonic as M, OpKind};

use super::float::{as_f64, scalar};
use super::mxcsr::{FLAGS, IE, PE};
use super::vector::index;
use super::State;
use crate::image::AddressSpace;

/// Division by zero.
const ZE: u32 = 0x04;

/// The two binary formats, for one body of code.
trait Float: Copy + PartialOrd + std::ops::Neg<Output = Self> {
    /// Below this magnitude an error term may not be representable (2^(emin + precision)).
    const MARGIN: f64;
    fn from_bits64(b: u64) -> Self;
    fn bits64(self) -> u64;
    fn f64(self) -> f64;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn sqrt(self) -> Self;
    fn fma(self, b: Self, c: Self) -> Self;
    fn subnormal(self) -> bool;
    /// The quiet bit of a NaN.
    const QUIET: u64;
    /// The QNaN floating-point indefinite (sign set, quiet, no payload).
    const INDEFINITE: u64;
}

macro_rules! float {
    ($t:ty, $bits:ty, $margin:expr, $quiet:expr, $indefinite:expr) => {
        impl Float for $t {
            const MARGIN: f64 = $margin;
            const QUIET: u64 = $quiet;
            const INDEFINITE: u64 = $indefinite;
            fn subnormal(self) -> bool {
                self.is_subnormal()
            }
            fn from_bits64(b: u64) -> Self {
                <$t>::from_bits(b as $bits)
            }
            fn bits64(self) -> u64 {
                u64::from(self.to_bits())
            }
            fn f64(self) -> f64 {
                f64::from(self)
            }
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn sub(self, o: Self) -> Self {
                self - o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn div(self, o: Self) -> Self {
                self / o
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn fma(self, b: Self, c: Self) -> Self {
                self.mul_add(b, c)
            }
        }
    };
}
float!(f64, u64, 5e-292, 1 << 51, 0xfff8_0000_0000_0000); // above 2^-968
float!(f32, u32, 4e-31, 1 << 22, 0xffc0_0000); // above 2^-101

/// A finite operand that is zero or of a magnitude whose error terms are exact.
fn tame<F: Float>(x: F) -> bool {
    let v = x.f64().abs();
    v.is_finite() && (v == 0.0 || v >= F::MARGIN)
}

/// A binary operation's result and whether it was exact, if the flags can be told.
fn binary<F: Float>(m: M, a: F, b: F) -> (Option<F>, Option<u32>) {
    let (af, bf) = (a.f64(), b.f64());
    let sqrt = matches!(m, M::Sqrtsd | M::Sqrtss);
    let (a_nan, b_nan) = (!sqrt && af.is_nan(), bf.is_nan());
    if a_nan || b_nan {
        // SDM vol. 1, table 4-7: the first source if it is a NaN, else the second, made
        // quiet; invalid if either was signalling. MIN and MAX return the second source as
        // it is and signal invalid for any NaN.
        if matches!(m, M::Minsd | M::Minss | M::Maxsd | M::Maxss) {
            return (Some(b), Some(IE));
        }
        let snan = |x: F| x.bits64() & F::QUIET == 0;
        let signalling = (a_nan && snan(a)) || (b_nan && snan(b));
        let r = F::from_bits64(if a_nan { a } else { b }.bits64() | F::QUIET);
        return (Some(r), Some(if signalling { IE } else { 0 }));
    }
    let r = match m {
        M::Addsd | M::Addss => a.add(b),
        M::Subsd | M::Subss => a.sub(b),
        M::Mulsd | M::Mulss => a.mul(b),
        M::Divsd | M::Divss => a.div(b),
        M::Sqrtsd | M::Sqrtss => b.sqrt(),
        M::Minsd | M::Minss => {
            return (
                Some(if a < b { a } else { b }),
                tame(a).then_some(0).filter(|_| tame(b)),
            )
        }
        _ => {
            return (
                Some(if a > b { a } else { b }),
                tame(a).then_some(0).filter(|_| tame(b)),
            )
        }
    };
    if r.f64().is_nan() {
        // Invalid (inf - inf, 0 * inf, 0 / 0, the root of a negative): the indefinite.
        return (Some(F::from_bits64(F::INDEFINITE)), Some(IE));
    }
    if matches!(m, M::Divsd | M::Divss) && bf == 0.0 && af != 0.0 && af.is_finite() {
        return (Some(r), Some(ZE));
    }
    // Infinities in, no NaN out: exact, nothing raised.
    if bf.is_infinite() || (!sqrt && af.is_infinite()) {
        return (Some(r), Some(0));
    }
    let add = matches!(m, M::Addsd | M::Addss | M::Subsd | M::Subss);
    if add && (b.subnormal() || a.subnormal()) {
        // A denormal operand (DAZ clear): DE, and a sum is exact in the subnormal range, so
        // only precision can join it (TwoSum below tells).
        let b = if matches!(m, M::Subsd | M::Subss) { -b } else { b };
        let bb = r.sub(a);
        let exact = a.sub(r.sub(bb)).add(b.sub(bb)).f64() == 0.0;
        return (
            Some(r),
            r.f64().is_finite().then_some(0x02 | if exact { 0 } else { PE }),
        );
    }
    let inputs = tame(b) && (sqrt || tame(a));
    if !(inputs && tame(r)) {
        return (Some(r), None);
    }
    // The exact error of the rounded result: TwoSum for sums, a fused multiply-add for the
    // rest (exact at these magnitudes).
    let exact = match m {
        M::Addsd | M::Addss | M::Subsd | M::Subss => {
            let b = if matches!(m, M::Subsd | M::Subss) { -b } else { b };
            let bb = r.sub(a);
            let err = a.sub(r.sub(bb)).add(b.sub(bb));
            err.f64() == 0.0
        }
        M::Mulsd | M::Mulss => a.fma(b, -r).f64() == 0.0,
        M::Divsd | M::Divss => (-r).fma(b, a).f64() == 0.0,
        _ => (-r).fma(r, b).f64() == 0.0,
    };
    // A zero result from non-zero operands underflowed (products, quotients).
    if r.f64() == 0.0 && !exact {
        return (Some(r), None);
    }
    (Some(r), Some(if exact { 0 } else { PE }))
}

/// Applies one of these; false if it is not one, or if MXCSR's rounding is not known.
pub fn step(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    if insn.encoding() != EncodingKind::Legacy || !st.mxcsr.rounds_as_host() {
        return false;
    }
    let m = insn.mnemonic();
    let double = matches!(
        m,
        M::Addsd
            | M::Subsd
            | M::Mulsd
            | M::Divsd
            | M::Sqrtsd
            | M::Minsd
            | M::Maxsd
            | M::Cvtsd2si
            | M::Cvtsd2ss
            | M::Roundsd
    );
    let len = if double { 8 } else { 4 };
    match m {
        M::Addsd
        | M::Subsd
        | M::Mulsd
        | M::Divsd
        | M::Sqrtsd
        | M::Minsd
        | M::Maxsd
        | M::Addss
        | M::Subss
        | M::Mulss
        | M::Divss
        | M::Sqrtss
        | M::Minss
        | M::Maxss => {
            let Some(i) = index(insn.op_register(0)) else {
                return false;
            };
            let sqrt = matches!(m, M::Sqrtsd | M::Sqrtss);
            let a = if sqrt { Some(0) } else { scalar(st, insn, 0, len, space) };
            let b = scalar(st, insn, 1, len, space);
            let (v, flags) = match (a, b) {
                (Some(a), Some(b)) if double => {
                    let (r, f) = binary(m, f64::from_bits64(a), f64::from_bits64(b));
                    (r.map(Float::bits64), f)
                }
                (Some(a), Some(b)) => {
                    let (r, f) = binary(m, f32::from_bits64(a), f32::from_bits64(b));
                    (r.map(Float::bits64), f)
                }
                _ => (None, None),
            };
            st.vec.set_lane(i, 0, len, v);
            st.mxcsr.raised(flags);
        }
        M::Cvtsd2si | M::Cvtss2si => {
            let dst = insn.op_register(0);
            let bits = dst.size() as u32 * 8;
            let x = scalar(st, insn, 1, len, space).map(|x| as_f64(x, double));
            let limit = 2f64.powi(bits as i32 - 1);
            let v = x.map(|f| {
                let r = f.round_ties_even();
                if f.is_nan() || r >= limit || r < -limit {
                    st.mxcsr.raise(IE);
                    1u64 << (bits - 1)
                } else {
                    if r != f {
                        st.mxcsr.raise(PE);
                    }
                    (r as i64) as u64 & if bits == 64 { u64::MAX } else { u64::from(u32::MAX) }
                }
            });
            if v.is_none() {
                st.mxcsr.maybe(FLAGS);
            }
            st.regs.write(dst, v);
        }
        M::Roundsd | M::Roundss => {
            // To an integral value by the immediate's mode (bit 2: MXCSR's, here nearest);
            // bit 3 suppresses precision (SDM vol. 2, ROUNDSD).
            let Some(i) = index(insn.op_register(0)) else {
                return false;
            };
            let imm = insn.immediate(2);
            let x = scalar(st, insn, 1, len, space).map(|x| as_f64(x, double));
            let (v, flags) = match x {
                Some(f) if !f.is_nan() => {
                    let r = match if imm & 4 != 0 { 0 } else { imm & 3 } {
                        0 => f.round_ties_even(),
                        1 => f.floor(),
                        2 => f.ceil(),
                        _ => f.trunc(),
                    };
                    let bits = if double {
                        r.to_bits()
                    } else {
                        u64::from((r as f32).to_bits())
                    };
                    let pe = r != f && imm & 8 == 0;
                    (Some(bits), Some(if pe { PE } else { 0 }))
                }
                _ => (None, None),
            };
            st.vec.set_lane(i, 0, len, v);
            st.mxcsr.raised(flags);
        }
        M::Cvtsi2sd | M::Cvtsi2ss => {
            let Some(i) = index(insn.op_register(0)) else {
                return false;
            };
            let wide = match insn.op_kind(1) {
                OpKind::Register => insn.op_register(1).size() == 8,
                _ => insn.memory_size().size() == 8,
            };
            let x = scalar(st, insn, 1, if wide { 8 } else { 4 }, space).map(|x| {
                if wide {
                    x as i64
                } else {
                    i64::from(x as u32 as i32)
                }
            });
            // Rounded to nearest, as Rust's `as` does; precision if it was not exact.
            let (v, exact) = match (x, m) {
                (Some(x), M::Cvtsi2sd) => {
                    let f = x as f64;
                    (Some(f.to_bits()), Some(f as i128 == i128::from(x)))
                }
                (Some(x), _) => {
                    let f = x as f32;
                    (Some(u64::from(f.to_bits())), Some(f as i128 == i128::from(x)))
                }
                _ => (None, None),
            };
            st.vec.set_lane(i, 0, if m == M::Cvtsi2sd { 8 } else { 4 }, v);
            match exact {
                Some(true) => {}
                Some(false) => st.mxcsr.raise(PE),
                None => st.mxcsr.maybe(PE),
            }
        }
        M::Cvtsd2ss | M::Cvtss2sd => {
            let Some(i) = index(insn.op_register(0)) else {
                return false;
            };
            let x = scalar(st, insn, 1, len, space);
            let (v, flags) = match x {
                Some(x) if double => {
                    let f = f64::from_bits(x);
                    let r = f as f32;
                    let ok = !f.is_nan()
                        && (f == 0.0 || (f64::from(r.abs()) >= f64::from(f32::MIN_POSITIVE) && r.is_finite()));
                    let exact = f64::from(r) == f;
                    (
                        (!f.is_nan()).then(|| u64::from(r.to_bits())),
                        ok.then_some(if exact { 0 } else { PE }),
                    )
                }
                Some(x) => {
                    let f = f32::from_bits(x as u32);
                    let ok = !f.is_nan() && !f.is_subnormal();
                    ((!f.is_nan()).then(|| f64::from(f).to_bits()), ok.then_some(0))
                }
                None => (None, None),
            };
            st.vec.set_lane(i, 0, if double { 4 } else { 8 }, v);
            st.mxcsr.raised(flags);
        }
        _ => return false,
    }
    true
}

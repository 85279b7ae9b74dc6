//! Forward semantics of the integer instructions compiled code and glibc use beyond moves and
//! plain arithmetic (chosen by `rtit check-values`' cause table on real programs): carries
//! (`adc`, `sbb`), one-operand multiply and divide, bit scans and counts, rotates, byte swaps,
//! bit tests, `xadd`, `cmpxchg` and the BMI1/BMI2 operations. Flags go through iced-x86's
//! tables first (what an instruction modifies or leaves undefined becomes unknown), then the
//! ones the SDM defines are set, so a flag is never guessed.

use iced_x86::{Instruction, Mnemonic as M, OpKind, Register};

use super::flags::{self, CF, OF, PF, SF, ZF};
use super::ops::{read, sign_extend, width, write};
use super::reg::mask;
use super::State;
use crate::image::AddressSpace;

/// Applies `insn` if it is one of these. Returns false (nothing changed) otherwise, or when an
/// outcome is a fault (a division by zero) that the generic rule should handle.
pub fn step(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    let w = width(insn, 0);
    match insn.mnemonic() {
        M::Adc | M::Sbb => carry_arith(st, insn, space, w),
        M::Mul | M::Imul if insn.op_count() == 1 => widening_multiply(st, insn, space),
        M::Div | M::Idiv => return divide(st, insn, space),
        M::Tzcnt | M::Lzcnt | M::Bsf | M::Bsr | M::Popcnt => bit_count(st, insn, space, w),
        M::Rol | M::Ror => rotate(st, insn, space, w),
        M::Shld | M::Shrd => double_shift(st, insn, space, w),
        M::Bswap => {
            let v = read(st, insn, 0, space).map(|v| match w {
                8 => v.swap_bytes(),
                _ => u64::from((v as u32).swap_bytes()),
            });
            write(st, insn, 0, v);
        }
        // A load or store with the bytes reversed; flags untouched.
        M::Movbe => {
            let v = read(st, insn, 1, space).map(|v| match w {
                8 => v.swap_bytes(),
                4 => u64::from((v as u32).swap_bytes()),
                _ => u64::from((v as u16).swap_bytes()),
            });
            write(st, insn, 0, v);
        }
        M::Bt | M::Bts | M::Btr | M::Btc => return bit_test(st, insn, space, w),
        M::Xadd => {
            let (a, b) = (read(st, insn, 0, space), read(st, insn, 1, space));
            st.flags.apply_generic(insn);
            let sum = a.zip(b).map(|(a, b)| {
                let r = a.wrapping_add(b) & mask(w);
                flags::arith(&mut st.flags, flags::Arith::Add, a, b, r, w);
                r
            });
            write(st, insn, 1, a);
            write(st, insn, 0, sum);
        }
        M::Cmpxchg => compare_exchange(st, insn, space, w),
        M::Cbw => {
            let v = st.regs.read(Register::AL).map(|v| sign_extend(v, 1) & mask(2));
            st.regs.write(Register::AX, v);
        }
        M::Cwd => {
            let v = st
                .regs
                .read(Register::AX)
                .map(|v| if v & 0x8000 != 0 { 0xffff } else { 0 });
            st.regs.write(Register::DX, v);
        }
        M::Shlx | M::Shrx | M::Sarx | M::Rorx => {
            let (a, c) = (read(st, insn, 1, space), read(st, insn, 2, space));
            let v = a.zip(c).map(|(a, c)| {
                let c = (c & if w == 8 { 63 } else { 31 }) as u32;
                let r = match insn.mnemonic() {
                    M::Shlx => a << c,
                    M::Shrx => a >> c,
                    M::Sarx => (sign_extend(a, w) as i64 >> c) as u64,
                    _ if w == 8 => a.rotate_right(c),
                    _ => u64::from((a as u32).rotate_right(c)),
                };
                r & mask(w)
            });
            write(st, insn, 0, v);
        }
        M::Andn | M::Blsr | M::Blsi | M::Blsmsk | M::Bzhi => bmi(st, insn, space, w),
        _ => return false,
    }
    true
}

/// Sets ZF, SF and PF from a result of `w` bytes.
fn result_flags(st: &mut State, r: u64, w: u32) {
    let mut v = 0;
    if r & mask(w) == 0 {
        v |= ZF;
    }
    if r >> (w * 8 - 1) & 1 != 0 {
        v |= SF;
    }
    if (r as u8).count_ones() % 2 == 0 {
        v |= PF;
    }
    st.flags.put(ZF | SF | PF, v);
}

/// `adc` and `sbb`: `a ± b ± CF`. `sbb r, r` is `-CF` whatever `r` holds.
fn carry_arith(st: &mut State, insn: &Instruction, space: &AddressSpace, w: u32) {
    let sub = insn.mnemonic() == M::Sbb;
    let same = insn.op_kind(0) == OpKind::Register
        && insn.op_kind(1) == OpKind::Register
        && insn.op_register(0) == insn.op_register(1);
    let cf = st.flags.bit(CF).map(u64::from);
    let (a, b) = match (same && sub, read(st, insn, 0, space), read(st, insn, 1, space)) {
        (true, _, _) => (Some(0), Some(0)),
        (false, a, b) => (a, b),
    };
    st.flags.apply_generic(insn);
    let r = match (a, b, cf) {
        (Some(a), Some(b), Some(c)) => {
            let m = mask(w);
            let (a, b) = (a & m, b & m);
            let sign = 1u64 << (w * 8 - 1);
            let (r, carry, overflow) = if sub {
                let r = a.wrapping_sub(b).wrapping_sub(c) & m;
                (
                    r,
                    u128::from(a) < u128::from(b) + u128::from(c),
                    (a ^ b) & (a ^ r) & sign != 0,
                )
            } else {
                let full = u128::from(a) + u128::from(b) + u128::from(c);
                let r = full as u64 & m;
                (r, full > u128::from(m), (a ^ r) & (b ^ r) & sign != 0)
            };
            result_flags(st, r, w);
            let af = if (a ^ b ^ r) & 0x10 != 0 { flags::AF } else { 0 };
            st.flags.put(flags::AF, af);
            st.flags
                .put(CF | OF, if carry { CF } else { 0 } | if overflow { OF } else { 0 });
            Some(r)
        }
        _ => None,
    };
    write(st, insn, 0, r);
}

/// The accumulator halves of a one-operand multiply or divide of `w` bytes: (low, high).
fn halves(w: u32) -> (Register, Register) {
    match w {
        1 => (Register::AL, Register::AH),
        2 => (Register::AX, Register::DX),
        4 => (Register::EAX, Register::EDX),
        _ => (Register::RAX, Register::RDX),
    }
}

/// `mul src` and `imul src`: the double-width product into (E/R)DX:(E/R)AX (AX for bytes).
/// CF and OF say whether the high half is more than the low half's extension.
fn widening_multiply(st: &mut State, insn: &Instruction, space: &AddressSpace) {
    let w = width(insn, 0);
    let (lo, hi) = halves(w);
    let (a, b) = (st.regs.read(lo), read(st, insn, 0, space));
    st.flags.apply_generic(insn);
    let signed = insn.mnemonic() == M::Imul;
    let product = a.zip(b).map(|(a, b)| {
        let bits = w * 8;
        let full = if signed {
            (i128::from(sign_extend(a, w) as i64) * i128::from(sign_extend(b, w) as i64)) as u128
        } else {
            u128::from(a & mask(w)) * u128::from(b & mask(w))
        };
        let low = full as u64 & mask(w);
        let high = (full >> bits) as u64 & mask(w);
        let wide = if signed {
            (sign_extend(low, w) as i64 as i128) != full as i128
        } else {
            high != 0
        };
        st.flags.put(CF | OF, if wide { CF | OF } else { 0 });
        (low, high)
    });
    if w == 1 {
        st.regs.write(Register::AX, product.map(|(l, h)| l | (h << 8)));
    } else {
        st.regs.write(lo, product.map(|p| p.0));
        st.regs.write(hi, product.map(|p| p.1));
    }
}

/// `div src` and `idiv src`. A zero divisor or a quotient that does not fit faults (#DE):
/// left to the generic rule, since the history then shows the fault.
fn divide(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    let w = width(insn, 0);
    let (lo, hi) = halves(w);
    let bits = w * 8;
    let dividend = if w == 1 {
        st.regs.read(Register::AX).map(u128::from)
    } else {
        st.regs
            .read(lo)
            .zip(st.regs.read(hi))
            .map(|(l, h)| u128::from(l) | (u128::from(h) << bits))
    };
    let divisor = read(st, insn, 0, space);
    let signed = insn.mnemonic() == M::Idiv;
    let result = match (dividend, divisor) {
        (Some(n), Some(d)) if d & mask(w) != 0 => {
            let d = d & mask(w);
            if signed {
                let shift = 128 - 2 * bits;
                let n = ((n << shift) as i128) >> shift;
                let d = i128::from(sign_extend(d, w) as i64);
                let (q, r) = (n / d, n % d);
                let lim = 1i128 << (bits - 1);
                if q >= lim || q < -lim {
                    return false;
                }
                Some((q as u64 & mask(w), r as u64 & mask(w)))
            } else {
                let (q, r) = (n / u128::from(d), n % u128::from(d));
                if q > u128::from(mask(w)) {
                    return false;
                }
                Some((q as u64, r as u64))
            }
        }
        (Some(_), Some(_)) => return false,
        _ => None,
    };
    st.flags.apply_generic(insn);
    st.flags.forget(flags::STATUS);
    if w == 1 {
        st.regs.write(Register::AX, result.map(|(q, r)| q | (r << 8)));
    } else {
        st.regs.write(lo, result.map(|p| p.0));
        st.regs.write(hi, result.map(|p| p.1));
    }
    true
}

/// `tzcnt`, `bsf`, `bsr` and `popcnt`. A zero source leaves `bsf`/`bsr`'s destination
/// undefined (Intel) or unchanged (AMD): unknown. `tzcnt` is `rep bsf`, which a CPU without
/// BMI1 (QEMU's default model among them) runs as `bsf`, and compilers emit it for that
/// reason: of zero it is unknown, otherwise both give the same count.
fn bit_count(st: &mut State, insn: &Instruction, space: &AddressSpace, w: u32) {
    let src = read(st, insn, 1, space).map(|v| v & mask(w));
    st.flags.apply_generic(insn);
    // `lzcnt` and `tzcnt` are `rep bsr` and `rep bsf`: a CPU without LZCNT (BMI1) runs them
    // as the plain scans. The recording says which; if it does not, nothing is computed.
    let m = match (insn.mnemonic(), st.cpu.lzcnt, st.cpu.bmi1) {
        (M::Lzcnt, Some(false), _) => M::Bsr,
        (M::Tzcnt, _, Some(false)) => M::Bsf,
        (M::Lzcnt, None, _) => return write(st, insn, 0, None),
        (m, ..) => m,
    };
    if let (M::Lzcnt, Some(s)) | (M::Tzcnt, Some(s)) = (m, src) {
        if m == M::Lzcnt || st.cpu.bmi1 == Some(true) {
            // The count of zeros from the top (or bottom); CF says the source was zero, ZF
            // that the count is (SDM vol. 2, LZCNT, TZCNT).
            let bits = 8 * w;
            let r = if s == 0 {
                bits
            } else if m == M::Lzcnt {
                s.leading_zeros() - (64 - bits)
            } else {
                s.trailing_zeros()
            };
            st.flags
                .put(CF | ZF, if s == 0 { CF } else { 0 } | if r == 0 { ZF } else { 0 });
            return write(st, insn, 0, Some(u64::from(r)));
        }
    }
    let v = src.and_then(|s| {
        if m == M::Popcnt {
            st.flags.put(flags::STATUS, if s == 0 { ZF } else { 0 });
            return Some(u64::from(s.count_ones()));
        }
        if s == 0 {
            if m != M::Tzcnt {
                st.flags.put(ZF, ZF);
            }
            return None;
        }
        let r = match m {
            M::Bsr => u64::from(63 - s.leading_zeros()),
            _ => u64::from(s.trailing_zeros()),
        };
        // A non-zero source clears ZF for `bsf`/`bsr`; `tzcnt` sets ZF for a zero count, and
        // a CPU without BMI1 runs it as `bsf`: the two agree only on a non-zero count.
        if m != M::Tzcnt || r != 0 {
            st.flags.put(ZF, 0);
        }
        Some(r)
    });
    write(st, insn, 0, v);
}

/// `rol` and `ror`: CF is the bit rotated last; OF is defined for counts of one only.
fn rotate(st: &mut State, insn: &Instruction, space: &AddressSpace, w: u32) {
    let count = read(st, insn, 1, space).map(|c| c & if w == 8 { 63 } else { 31 });
    let a = read(st, insn, 0, space);
    if count == Some(0) {
        return;
    }
    let bits = w * 8;
    let r = a.zip(count).map(|(a, c)| {
        let c = (c % u64::from(bits)) as u32;
        let a = a & mask(w);
        if c == 0 {
            a
        } else if insn.mnemonic() == M::Rol {
            ((a << c) | (a >> (bits - c))) & mask(w)
        } else {
            ((a >> c) | (a << (bits - c))) & mask(w)
        }
    });
    st.flags.forget(CF | OF);
    if let Some(r) = r {
        let cf = match insn.mnemonic() {
            M::Rol => r & 1,
            _ => r >> (bits - 1) & 1,
        };
        st.flags.put(CF, if cf != 0 { CF } else { 0 });
    }
    write(st, insn, 0, r);
}

/// `shld` and `shrd` (what glibc's multi-precision arithmetic behind `printf("%f")` runs):
/// the destination shifted, the vacated bits filled from the source. A count of 0 changes
/// nothing; CF is the last bit shifted out, SF, ZF and PF follow the result, OF is defined
/// for a count of one only, AF never; a 16-bit count above 16 leaves the result undefined.
fn double_shift(st: &mut State, insn: &Instruction, space: &AddressSpace, w: u32) {
    let bits = w * 8;
    let count = read(st, insn, 2, space).map(|c| (c & if w == 8 { 63 } else { 31 }) as u32);
    if count == Some(0) {
        return;
    }
    let (a, b) = (read(st, insn, 0, space), read(st, insn, 1, space));
    st.flags.apply_generic(insn);
    let left = insn.mnemonic() == M::Shld;
    let r = match (a, b, count) {
        (Some(a), Some(b), Some(c)) if c <= bits => {
            let (a, b) = (a & mask(w), b & mask(w));
            let (r, cf) = if c == bits {
                (b, if left { a & 1 } else { a >> (bits - 1) & 1 })
            } else if left {
                (((a << c) | (b >> (bits - c))) & mask(w), a >> (bits - c) & 1)
            } else {
                (((a >> c) | (b << (bits - c))) & mask(w), a >> (c - 1) & 1)
            };
            let sign = r >> (bits - 1) & 1;
            st.flags.put(CF, if cf != 0 { CF } else { 0 });
            st.flags.put(SF, if sign != 0 { SF } else { 0 });
            st.flags.put(ZF, if r == 0 { ZF } else { 0 });
            st.flags.put(PF, if (r as u8).count_ones() % 2 == 0 { PF } else { 0 });
            if c == 1 {
                let changed = (a >> (bits - 1) & 1) != sign;
                st.flags.put(OF, if changed { OF } else { 0 });
            }
            Some(r)
        }
        _ => None,
    };
    write(st, insn, 0, r);
}

/// `bt`, `bts`, `btr` and `btc` on a register, or on memory with an immediate bit offset (a
/// register offset can address any bit of a bit string: left to the generic rule).
fn bit_test(st: &mut State, insn: &Instruction, space: &AddressSpace, w: u32) -> bool {
    if insn.op_kind(0) != OpKind::Register && insn.op_kind(1) == OpKind::Register {
        return false;
    }
    let a = read(st, insn, 0, space);
    let bit = read(st, insn, 1, space).map(|b| b % u64::from(w * 8));
    st.flags.apply_generic(insn);
    let r = a.zip(bit).map(|(a, b)| {
        let set = a >> b & 1 != 0;
        st.flags.put(CF, if set { CF } else { 0 });
        match insn.mnemonic() {
            M::Bts => a | 1 << b,
            M::Btr => a & !(1 << b),
            M::Btc => a ^ 1 << b,
            _ => a,
        }
    });
    if insn.mnemonic() != M::Bt {
        write(st, insn, 0, r);
    }
    true
}

/// `cmpxchg dst, src`: compares the accumulator with `dst`; equal: `dst = src`, else the
/// accumulator takes `dst`. Flags as `cmp acc, dst`.
fn compare_exchange(st: &mut State, insn: &Instruction, space: &AddressSpace, w: u32) {
    let acc = halves(w).0;
    let (a, d, s) = (st.regs.read(acc), read(st, insn, 0, space), read(st, insn, 1, space));
    st.flags.apply_generic(insn);
    match a.zip(d) {
        Some((a, d)) => {
            let r = a.wrapping_sub(d) & mask(w);
            flags::arith(&mut st.flags, flags::Arith::Sub, a, d, r, w);
            // A 32-bit register operand that is not the one written may or may not have its
            // upper half cleared (processors differ): unknown unless it is already clear.
            let keep = |st: &mut State, r: Register| {
                let full = r.full_register();
                if w == 4 && st.regs.read(full).is_some_and(|v| v >> 32 != 0) {
                    st.regs.write(full, None);
                }
            };
            if a == d {
                write(st, insn, 0, s);
                keep(st, acc);
            } else {
                // Memory is written back with its own value.
                if insn.op_kind(0) == OpKind::Register {
                    keep(st, insn.op_register(0));
                } else {
                    write(st, insn, 0, Some(d));
                }
                st.regs.write(acc, Some(d));
            }
        }
        None => {
            write(st, insn, 0, None);
            st.regs.write(acc, None);
        }
    }
}

/// BMI1 and BMI2 logic: `andn`, `blsr`, `blsi`, `blsmsk`, `bzhi`.
fn bmi(st: &mut State, insn: &Instruction, space: &AddressSpace, w: u32) {
    let (a, b) = (read(st, insn, 1, space), read(st, insn, 2, space));
    st.flags.apply_generic(insn);
    let m = mask(w);
    let r = match insn.mnemonic() {
        M::Andn => a.zip(b).map(|(a, b)| {
            st.flags.put(CF | OF, 0);
            !a & b & m
        }),
        M::Blsr | M::Blsi | M::Blsmsk => a.map(|a| {
            let a = a & m;
            st.flags.put(CF | OF, if a == 0 { CF } else { 0 });
            match insn.mnemonic() {
                M::Blsr => a & a.wrapping_sub(1) & m,
                M::Blsi => a & a.wrapping_neg() & m,
                _ => (a ^ a.wrapping_sub(1)) & m,
            }
        }),
        _ => a.zip(b).map(|(a, n)| {
            let n = (n & 0xff) as u32;
            let bits = w * 8;
            st.flags.put(CF | OF, if n > bits - 1 { CF } else { 0 });
            if n >= bits {
                a & m
            } else {
                a & ((1u64 << n) - 1)
            }
        }),
    };
    if let Some(r) = r {
        result_flags(st, r, w);
    }
    write(st, insn, 0, r);
}

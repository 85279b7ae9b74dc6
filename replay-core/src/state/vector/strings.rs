//! SSE4.2's packed string compares, `pcmp[ie]str[im]` and their VEX forms (SDM vol. 2,
//! 4.1 "Imm8 control byte for PCMPESTRI/PCMPESTRM/PCMPISTRI/PCMPISTRM"): glibc's `strcspn`,
//! `strspn`, `strpbrk` and `strcasecmp` run them on every CPU since Nehalem, and QEMU's
//! model has them too. Two strings of 16 bytes or 8 words are compared under the immediate's
//! aggregation (equal any, ranges, equal each, equal ordered) and polarity, giving an index
//! (`ecx`) or a mask (`xmm0`) and the flags.
//!
//! An implicit-length string ends at its first zero element, so the bytes after it, which
//! `strcspn` and friends read past the string's end and which are often unknown, do not
//! matter: the result is known when every element up to the end of each string is.

use iced_x86::{Instruction, Mnemonic as M, Register};

use super::super::flags::{self, CF, OF, SF, ZF};
use super::super::State;
use super::{read, Value};
use crate::image::AddressSpace;

/// A string operand: its elements (as unsigned or sign-extended values) and its length.
struct Operand {
    elements: Vec<i64>,
    len: usize,
}

/// Operand `op` as `n` elements of `size` bytes (`signed`), and its length: the index of its
/// first zero element (implicit), or `|explicit|` saturated to `n`. `None` if an element that
/// matters is not known.
fn operand(v: &Value, n: usize, size: usize, signed: bool, explicit: Option<Option<i64>>) -> Option<Operand> {
    let element = |j: usize| -> Option<i64> {
        let at = j * size;
        v.all(at, size).then(|| {
            let x = v.element(at, size);
            match (signed, size) {
                (true, 1) => i64::from(x as u8 as i8),
                (true, _) => i64::from(x as u16 as i16),
                _ => x as i64,
            }
        })
    };
    let len = match explicit {
        Some(l) => (l?.unsigned_abs() as usize).min(n),
        None => {
            let mut len = n;
            for j in 0..n {
                if element(j)? == 0 {
                    len = j;
                    break;
                }
            }
            len
        }
    };
    // Elements past the end are never compared (the override rules decide them).
    let elements = (0..n)
        .map(|j| if j < len { element(j) } else { Some(0) })
        .collect::<Option<Vec<_>>>()?;
    Some(Operand { elements, len })
}

/// The string compare; false for any other instruction.
pub fn step(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    let m = insn.mnemonic();
    let (explicit, index_out) = match m {
        M::Pcmpistri | M::Vpcmpistri => (false, true),
        M::Pcmpistrm | M::Vpcmpistrm => (false, false),
        M::Pcmpestri | M::Vpcmpestri | M::Pcmpestri64 | M::Vpcmpestri64 => (true, true),
        M::Pcmpestrm | M::Vpcmpestrm | M::Pcmpestrm64 | M::Vpcmpestrm64 => (true, false),
        _ => return false,
    };
    let imm = insn.immediate(2) as u8;
    let (size, signed) = (if imm & 1 != 0 { 2 } else { 1 }, imm & 2 != 0);
    let n = 16 / size;
    let wide = matches!(m, M::Pcmpestri64 | M::Vpcmpestri64 | M::Pcmpestrm64 | M::Vpcmpestrm64);
    let length = |r: Register| -> Option<Option<i64>> {
        explicit.then(|| {
            let v = st.regs.read(if wide { r } else { r.full_register32() })?;
            Some(if wide { v as i64 } else { i64::from(v as u32 as i32) })
        })
    };
    let (la, lb) = (length(Register::RAX), length(Register::RDX));
    let a = operand(&read(st, insn, 0, 16, space), n, size, signed, la);
    let b = operand(&read(st, insn, 1, 16, space), n, size, signed, lb);
    let result = a.zip(b).map(|(a, b)| compare(&a, &b, imm, n));
    // Flags: CF, ZF, SF and OF from the result and lengths; AF and PF cleared.
    st.flags.forget(flags::STATUS);
    if let Some((res, la, lb)) = result {
        let bit = |f: u64, set: bool| if set { f } else { 0 };
        st.flags.put(
            flags::STATUS,
            bit(CF, res != 0) | bit(ZF, lb < n) | bit(SF, la < n) | bit(OF, res & 1 != 0),
        );
    }
    let res = result.map(|r| r.0);
    if index_out {
        let i = res.map(|r| match (r, imm & 0x40 != 0) {
            (0, _) => n as u64,
            (r, false) => u64::from(r.trailing_zeros()),
            (r, true) => u64::from(31 - r.leading_zeros()),
        });
        st.regs.write(Register::ECX, i);
    } else {
        let mut out = Value::default();
        if let Some(r) = res {
            out.known = super::mask(16);
            if imm & 0x40 == 0 {
                out.bytes[..2].copy_from_slice(&(r as u16).to_le_bytes());
            } else {
                for j in (0..n).filter(|j| r >> j & 1 != 0) {
                    out.bytes[j * size..(j + 1) * size].fill(0xff);
                }
            }
        }
        // The mask goes to xmm0 whatever the operands are (the legacy form keeps the bytes
        // above it, the VEX one zeroes them).
        super::write_reg(st, insn, 0, out, 16);
    }
    true
}

/// IntRes2 (as bits), and the two lengths.
fn compare(a: &Operand, b: &Operand, imm: u8, n: usize) -> (u32, usize, usize) {
    let valid_a = |i: usize| i < a.len;
    let valid_b = |j: usize| j < b.len;
    let mut res1 = 0u32;
    match imm >> 2 & 3 {
        // Equal any: a byte of b that is any of a's.
        0 => {
            for j in (0..n).filter(|&j| valid_b(j)) {
                if (0..a.len).any(|i| a.elements[i] == b.elements[j]) {
                    res1 |= 1 << j;
                }
            }
        }
        // Ranges: a byte of b within any of a's (low, high) pairs.
        1 => {
            for j in (0..n).filter(|&j| valid_b(j)) {
                let x = b.elements[j];
                let inside = (0..n / 2).any(|k| {
                    let (lo, hi) = (2 * k, 2 * k + 1);
                    valid_a(lo) && valid_a(hi) && x >= a.elements[lo] && x <= a.elements[hi]
                });
                if inside {
                    res1 |= 1 << j;
                }
            }
        }
        // Equal each: element by element; both past their ends counts as equal.
        2 => {
            for j in 0..n {
                let eq = match (valid_a(j), valid_b(j)) {
                    (true, true) => a.elements[j] == b.elements[j],
                    (false, false) => true,
                    _ => false,
                };
                if eq {
                    res1 |= 1 << j;
                }
            }
        }
        // Equal ordered: a as a substring of b starting at each element.
        _ => {
            for j in 0..n {
                let matches = (0..n - j).all(|k| match (valid_a(k), valid_b(j + k)) {
                    (false, _) => true,
                    (true, false) => false,
                    (true, true) => a.elements[k] == b.elements[j + k],
                });
                if matches {
                    res1 |= 1 << j;
                }
            }
        }
    }
    let all = (1u32 << n) - 1;
    let res2 = match imm >> 4 & 3 {
        1 => !res1 & all,
        3 => (res1 ^ ((1u32 << b.len) - 1)) & all,
        _ => res1,
    };
    (res2, a.len, b.len)
}

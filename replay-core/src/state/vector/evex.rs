//! What only AVX-512 (EVEX) has beyond the VEX forms `sse` computes: compares and tests into
//! an opmask, and ternary logic (SDM vol. 2, VPCMP, VPCMPEQ, VPTESTM, VPTESTNM, VPTERNLOG).
//! glibc's `*_evex` string routines compare 32 or 64 bytes into k0–7 where the AVX2 ones use
//! `vpcmpeqb` and `vpmovmskb`.

use iced_x86::{Instruction, Mnemonic as M, OpKind};

use super::super::State;
use super::opmask::{self, Writemask};
use super::{first_source, length, mask, read, same_sources, write, Value};
use crate::image::AddressSpace;

/// An EVEX-only instruction; false for the rest (the VEX semantics then apply, with the
/// opmask applied when they write).
pub fn step(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    let into_mask = insn.op_kind(0) == OpKind::Register && insn.op_register(0).is_k();
    if into_mask {
        return compare(st, insn, space);
    }
    match insn.mnemonic() {
        M::Vpternlogd | M::Vpternlogq => ternary(st, insn, space),
        _ => false,
    }
}

/// An element comparison: the two elements and their size in bytes.
type Compare = fn(u64, u64, usize) -> bool;

/// How two elements compare, by mnemonic (and the predicate immediate of VPCMP).
fn predicate(insn: &Instruction) -> Option<(usize, Compare)> {
    let m = insn.mnemonic();
    let e = match m {
        M::Vpcmpeqb | M::Vpcmpgtb | M::Vpcmpb | M::Vpcmpub | M::Vptestmb | M::Vptestnmb => 1,
        M::Vpcmpeqw | M::Vpcmpgtw | M::Vpcmpw | M::Vpcmpuw | M::Vptestmw | M::Vptestnmw => 2,
        M::Vpcmpeqd | M::Vpcmpgtd | M::Vpcmpd | M::Vpcmpud | M::Vptestmd | M::Vptestnmd => 4,
        M::Vpcmpeqq | M::Vpcmpgtq | M::Vpcmpq | M::Vpcmpuq | M::Vptestmq | M::Vptestnmq => 8,
        _ => return None,
    };
    let f: Compare = match m {
        M::Vpcmpeqb | M::Vpcmpeqw | M::Vpcmpeqd | M::Vpcmpeqq => |a, b, _| a == b,
        M::Vpcmpgtb | M::Vpcmpgtw | M::Vpcmpgtd | M::Vpcmpgtq => |a, b, e| signed(a, e) > signed(b, e),
        M::Vptestmb | M::Vptestmw | M::Vptestmd | M::Vptestmq => |a, b, _| a & b != 0,
        M::Vptestnmb | M::Vptestnmw | M::Vptestnmd | M::Vptestnmq => |a, b, _| a & b == 0,
        M::Vpcmpub | M::Vpcmpuw | M::Vpcmpud | M::Vpcmpuq => match insn.immediate(3) & 7 {
            0 => |a, b, _| a == b,
            1 => |a, b, _| a < b,
            2 => |a, b, _| a <= b,
            3 => |_, _, _| false,
            4 => |a, b, _| a != b,
            5 => |a, b, _| a >= b,
            6 => |a, b, _| a > b,
            _ => |_, _, _| true,
        },
        _ => match insn.immediate(3) & 7 {
            0 => |a, b, _| a == b,
            1 => |a, b, e| signed(a, e) < signed(b, e),
            2 => |a, b, e| signed(a, e) <= signed(b, e),
            3 => |_, _, _| false,
            4 => |a, b, _| a != b,
            5 => |a, b, e| signed(a, e) >= signed(b, e),
            6 => |a, b, e| signed(a, e) > signed(b, e),
            _ => |_, _, _| true,
        },
    };
    Some((e, f))
}

fn signed(v: u64, e: usize) -> i64 {
    let shift = 64 - 8 * e as u32;
    ((v << shift) as i64) >> shift
}

/// A compare or test of two vectors into an opmask: bit j is element j's outcome, cleared
/// where the writemask's bit j is (a compare's opmask always zeroes), and every bit above the
/// element count is zero. A bit is known where both elements are, or where the writemask's bit
/// is a known zero.
fn compare(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    let Some((e, f)) = predicate(insn) else {
        return false;
    };
    let Some(k) = opmask::index(insn.op_register(0)) else {
        return false;
    };
    let len = length(insn);
    let first = first_source(insn);
    let a = read(st, insn, first, len, space);
    let b = if same_sources(insn) {
        a
    } else {
        read(st, insn, first + 1, len, space)
    };
    let wm = opmask::writemask(st, insn, len);
    let (mut bits, mut known) = (0u64, !mask(len / e));
    for (j, at) in (0..len).step_by(e).enumerate() {
        let (selected, sel_known) = wm.map_or((true, true), |m: Writemask| m.byte(at));
        if sel_known && !selected {
            known |= 1 << j;
            continue;
        }
        if !(a.all(at, e) && b.all(at, e)) {
            continue;
        }
        if f(a.element(at, e), b.element(at, e), e) {
            if !sel_known {
                continue;
            }
            bits |= 1 << j;
        }
        known |= 1 << j;
    }
    st.vec.k.set(k, bits, known);
    true
}

/// `vpternlogd`/`q dst, b, c, imm`: each result bit is bit `4a + 2b + c` of the immediate,
/// `a` being the destination's bit. A byte is known where all three inputs' are.
fn ternary(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    let len = length(insn);
    let imm = insn.immediate(3) as u8;
    let a = read(st, insn, 0, len, space);
    let b = read(st, insn, 1, len, space);
    let c = read(st, insn, 2, len, space);
    let mut out = Value::default();
    for i in 0..len {
        let (Some(x), Some(y), Some(z)) = (a.byte(i), b.byte(i), c.byte(i)) else {
            continue;
        };
        let mut r = 0u8;
        for bit in 0..8 {
            let idx = (x >> bit & 1) << 2 | (y >> bit & 1) << 1 | (z >> bit & 1);
            r |= (imm >> idx & 1) << bit;
        }
        out.bytes[i] = r;
        out.known |= 1 << i;
    }
    write(st, insn, out, len);
    true
}

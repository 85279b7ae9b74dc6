//! The opmask registers k0–7 of AVX-512, bit by bit, and the instructions that move and
//! combine them (SDM vol. 1, 15.1.3; vol. 2, KMOV, KORTEST, KTEST, KAND …).
//!
//! glibc's EVEX string routines (what it picks on a processor with AVX-512) compare 32 or 64
//! bytes into an opmask, move it to a general-purpose register with `kmovd` and find the first
//! set bit with `tzcnt` or `bsf`: the same idiom as `pmovmskb`, so bits are known one by one
//! and a partly known mask reaches [`crate::state::reg::RegFile::write_bits`].

use iced_x86::{Instruction, Mnemonic as M, OpKind, Register};

use super::super::flags::{self, CF, ZF};
use super::super::ops::{address, is_memory};
use super::super::why::{self, Why};
use super::super::State;
use crate::image::AddressSpace;

/// k0–7: each bit known or not.
#[derive(Debug, Clone, Copy, Default)]
pub struct Opmasks {
    value: [u64; 8],
    known: [u64; 8],
    why: [Why; 8],
}

impl Opmasks {
    /// Register `i`'s bits and which are known.
    pub fn get(&self, i: usize) -> (u64, u64) {
        if self.known[i] != u64::MAX {
            why::saw(self.why[i]);
        }
        (self.value[i] & self.known[i], self.known[i])
    }

    /// Register `i`, if every bit is known.
    pub fn full(&self, i: usize) -> Option<u64> {
        (self.known[i] == u64::MAX).then_some(self.value[i])
    }

    /// Sets register `i`'s bits (those of `known`; the rest unknown).
    pub fn set(&mut self, i: usize, value: u64, known: u64) {
        if known != u64::MAX {
            self.why[i] = why::current();
        }
        self.value[i] = value & known;
        self.known[i] = known;
    }

    /// Makes every opmask register unknown.
    pub fn forget_all(&mut self) {
        for i in 0..8 {
            self.set(i, 0, 0);
        }
    }

    /// Whether this knows every bit `other` knows, with the same value.
    pub fn covers(&self, other: &Opmasks) -> bool {
        (0..8).all(|i| {
            let theirs = other.known[i];
            theirs & !self.known[i] == 0 && (self.value[i] ^ other.value[i]) & theirs == 0
        })
    }

    /// Learns the bits `other` knows and this does not.
    pub fn absorb(&mut self, other: &Opmasks) {
        for i in 0..8 {
            let new = other.known[i] & !self.known[i];
            self.value[i] |= other.value[i] & new;
            self.known[i] |= new;
        }
    }
}

/// The index of an opmask register, if `r` is one.
pub fn index(r: Register) -> Option<usize> {
    r.is_k().then(|| r as usize - Register::K0 as usize)
}

/// Whether an instruction names an opmask register as an operand (the k-instructions, all
/// VEX-encoded).
pub fn is_opmask(insn: &Instruction) -> bool {
    (0..insn.op_count()).any(|op| insn.op_kind(op) == OpKind::Register && insn.op_register(op).is_k())
}

/// The opmask an EVEX instruction writes its destination under, per byte of the vector.
#[derive(Debug, Clone, Copy)]
pub struct Writemask {
    /// Bit i: byte i is written (its element's mask bit is set).
    selected: u64,
    /// Bit i: whether that is known.
    known: u64,
    /// Unselected elements become zero (`{z}`) rather than keep their value.
    pub zeroing: bool,
}

impl Writemask {
    /// Whether byte `b` is written, and whether that is known.
    pub fn byte(&self, b: usize) -> (bool, bool) {
        (self.selected >> b & 1 != 0, self.known >> b & 1 != 0)
    }
}

/// The element size that an EVEX instruction's opmask counts in: its memory operand's element
/// (also given for the register form), or a broadcast's from a general-purpose register.
pub fn element_size(insn: &Instruction) -> Option<usize> {
    match insn.memory_size().element_size() {
        0 => match insn.mnemonic() {
            M::Vpbroadcastb => Some(1),
            M::Vpbroadcastw => Some(2),
            M::Vpbroadcastd => Some(4),
            M::Vpbroadcastq => Some(8),
            _ => None,
        },
        e => Some(e),
    }
}

/// The writemask of an EVEX instruction over `len` bytes, or `None` if it writes every
/// element (no opmask, or k0). An element size nobody knows makes every byte's selection
/// unknown.
pub fn writemask(st: &State, insn: &Instruction, len: usize) -> Option<Writemask> {
    let k = index(insn.op_mask())?;
    let (bits, known) = st.vec.k.get(k);
    let mut m = Writemask {
        selected: 0,
        known: 0,
        zeroing: insn.zeroing_masking(),
    };
    let Some(e) = element_size(insn).filter(|&e| e <= len) else {
        return Some(m);
    };
    for (n, at) in (0..len).step_by(e).enumerate() {
        let span = super::mask(e) << at;
        if bits >> n & 1 != 0 {
            m.selected |= span;
        }
        if known >> n & 1 != 0 {
            m.known |= span;
        }
    }
    Some(m)
}

/// Bits in a k-instruction's operation: 8, 16, 32 or 64 by its suffix.
fn width(m: M) -> Option<u32> {
    Some(match m {
        M::Kmovb | M::Kandb | M::Kandnb | M::Korb | M::Kxorb | M::Kxnorb | M::Knotb | M::Kaddb => 8,
        M::Kortestb | M::Ktestb | M::Kshiftlb | M::Kshiftrb => 8,
        M::Kmovw | M::Kandw | M::Kandnw | M::Korw | M::Kxorw | M::Kxnorw | M::Knotw | M::Kaddw => 16,
        M::Kortestw | M::Ktestw | M::Kshiftlw | M::Kshiftrw | M::Kunpckbw => 16,
        M::Kmovd | M::Kandd | M::Kandnd | M::Kord | M::Kxord | M::Kxnord | M::Knotd | M::Kaddd => 32,
        M::Kortestd | M::Ktestd | M::Kshiftld | M::Kshiftrd | M::Kunpckwd => 32,
        M::Kmovq | M::Kandq | M::Kandnq | M::Korq | M::Kxorq | M::Kxnorq | M::Knotq | M::Kaddq => 64,
        M::Kortestq | M::Ktestq | M::Kshiftlq | M::Kshiftrq | M::Kunpckdq => 64,
        _ => return None,
    })
}

fn low(w: u32) -> u64 {
    if w >= 64 {
        u64::MAX
    } else {
        (1u64 << w) - 1
    }
}

/// Operand `op` as (bits, known bits): an opmask, a general-purpose register or memory.
fn operand(st: &State, insn: &Instruction, op: u32, w: u32, space: &AddressSpace) -> (u64, u64) {
    let (v, k) = match insn.op_kind(op) {
        OpKind::Register => {
            let r = insn.op_register(op);
            match index(r) {
                Some(i) => st.vec.k.get(i),
                None => st.regs.read_bits(r).unwrap_or((0, 0)),
            }
        }
        kind if is_memory(kind) => address(&st.regs, insn, op)
            .and_then(|a| st.mem.read_u64(a, w / 8, space))
            .map_or((0, 0), |v| (v, u64::MAX)),
        _ => (0, 0),
    };
    (v & low(w), k & low(w))
}

/// Writes an opmask: the low `w` bits, zero above them (every k-instruction clears the bits
/// above its width, SDM vol. 2, KMOV).
fn set_k(st: &mut State, insn: &Instruction, (v, k): (u64, u64), w: u32) {
    if let Some(i) = index(insn.op_register(0)) {
        st.vec.k.set(i, v & low(w), (k & low(w)) | !low(w));
    }
}

/// A k-instruction; false if it is not one modelled here.
pub fn step(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    let m = insn.mnemonic();
    let Some(w) = width(m) else { return false };
    match m {
        M::Kmovb | M::Kmovw | M::Kmovd | M::Kmovq => {
            let src = operand(st, insn, 1, w, space);
            match insn.op_kind(0) {
                OpKind::Register if insn.op_register(0).is_k() => set_k(st, insn, src, w),
                OpKind::Register => {
                    // Into a general-purpose register: zero-extended to its width.
                    let r = insn.op_register(0);
                    st.regs.write_bits(r, src.0, src.1 | !low(w));
                }
                _ => match address(&st.regs, insn, 0) {
                    Some(a) if src.1 == low(w) => st.mem.store(a, w / 8, Some(src.0)),
                    Some(a) => st.mem.forget(a, u64::from(w / 8)),
                    None => {
                        why::insist(why::Cause::UnknownAddress(m));
                        st.mem.forget_all();
                    }
                },
            }
        }
        M::Kortestb | M::Kortestw | M::Kortestd | M::Kortestq | M::Ktestb | M::Ktestw | M::Ktestd | M::Ktestq => {
            let (a, ka) = operand(st, insn, 0, w, space);
            let (b, kb) = operand(st, insn, 1, w, space);
            let all = low(w);
            // kortest: ZF if a | b is zero, CF if it is all ones. ktest: ZF if a & b is zero,
            // CF if !a & b is. The other status flags are cleared.
            let (zf, cf) = if matches!(m, M::Kortestb | M::Kortestw | M::Kortestd | M::Kortestq) {
                let (or, known) = or(a, ka, b, kb);
                (none_set(or, known, all), all_set(or, known, all))
            } else {
                let (both, k_both) = and(a, ka, b, kb);
                let (andn, k_andn) = and(!a & all, ka, b, kb);
                (none_set(both, k_both, all), none_set(andn, k_andn, all))
            };
            st.flags.put(flags::STATUS & !(ZF | CF), 0);
            st.flags.forget(ZF | CF);
            if let Some(z) = zf {
                st.flags.put(ZF, if z { ZF } else { 0 });
            }
            if let Some(c) = cf {
                st.flags.put(CF, if c { CF } else { 0 });
            }
        }
        M::Knotb | M::Knotw | M::Knotd | M::Knotq => {
            let (a, k) = operand(st, insn, 1, w, space);
            set_k(st, insn, (!a & k, k), w);
        }
        M::Kshiftlb
        | M::Kshiftlw
        | M::Kshiftld
        | M::Kshiftlq
        | M::Kshiftrb
        | M::Kshiftrw
        | M::Kshiftrd
        | M::Kshiftrq => {
            let (a, k) = operand(st, insn, 1, w, space);
            let n = insn.immediate(2) as u32;
            let left = matches!(m, M::Kshiftlb | M::Kshiftlw | M::Kshiftld | M::Kshiftlq);
            // A count of the width or more gives zero; the vacated bits are zero.
            let r = if n >= w {
                (0, low(w))
            } else if left {
                ((a << n) & low(w), ((k << n) | low(n)) & low(w))
            } else {
                (a >> n, (k >> n) | (low(w) & !(low(w) >> n)))
            };
            set_k(st, insn, r, w);
        }
        M::Kunpckbw | M::Kunpckwd | M::Kunpckdq => {
            // The low halves: operand 1's above operand 2's.
            let h = w / 2;
            let (a, ka) = operand(st, insn, 1, h, space);
            let (b, kb) = operand(st, insn, 2, h, space);
            set_k(st, insn, (a << h | b, ka << h | kb), w);
        }
        _ => {
            let (a, ka) = operand(st, insn, 1, w, space);
            let (b, kb) = operand(st, insn, 2, w, space);
            let r = match m {
                M::Kandb | M::Kandw | M::Kandd | M::Kandq => and(a, ka, b, kb),
                M::Kandnb | M::Kandnw | M::Kandnd | M::Kandnq => and(!a & ka, ka, b, kb),
                M::Korb | M::Korw | M::Kord | M::Korq => or(a, ka, b, kb),
                M::Kxorb | M::Kxorw | M::Kxord | M::Kxorq => (a ^ b, ka & kb),
                M::Kxnorb | M::Kxnorw | M::Kxnord | M::Kxnorq => (!(a ^ b), ka & kb),
                _ if ka & kb == low(w) => (a.wrapping_add(b), low(w)),
                _ => (0, 0),
            };
            set_k(st, insn, r, w);
        }
    }
    true
}

/// `a | b`, with a bit known where both are, or where either is a known one.
fn or(a: u64, ka: u64, b: u64, kb: u64) -> (u64, u64) {
    let known = (ka & kb) | (a & ka) | (b & kb);
    ((a | b) & known, known)
}

/// `a & b`, with a bit known where both are, or where either is a known zero.
fn and(a: u64, ka: u64, b: u64, kb: u64) -> (u64, u64) {
    let known = (ka & kb) | (ka & !a) | (kb & !b);
    (a & b & known, known)
}

/// Whether no bit of `all` is set: false once a known one is, true once all are known zero.
fn none_set(v: u64, known: u64, all: u64) -> Option<bool> {
    if v & known & all != 0 {
        Some(false)
    } else if known & all == all {
        Some(true)
    } else {
        None
    }
}

/// Whether every bit of `all` is set.
fn all_set(v: u64, known: u64, all: u64) -> Option<bool> {
    if !v & known & all != 0 {
        Some(false)
    } else if known & all == all {
        Some(true)
    } else {
        None
    }
}

//! The vector registers (zmm0–31, whose low halves are ymm and low quarters xmm) and the
//! opmask registers k0–7 as known bytes and bits, and how instructions read and write them.
//!
//! Each byte is known or not. An element-wise result is known where every byte of its inputs'
//! element is. Width rules (SDM vol. 1, 14.1.2 and 15.5): a legacy SSE instruction writes the
//! low 16 bytes and leaves the rest; a VEX or EVEX one zeroes everything above what it writes,
//! up to the 64 bytes of zmm. An EVEX instruction may name an opmask: elements whose mask bit
//! is clear keep their value (merging) or become zero (`{z}`), and a store writes only the
//! selected elements (SDM vol. 1, 15.6.1).
//!
//! Files: `sse` (moves, logic, compares, adds in every encoding), `shuffle` (packs, aligns,
//! shuffles, inserts), `evex` (compares into opmasks, ternary logic), `opmask` (the k
//! registers and their instructions), `strings` (SSE4.2's string compares), `named` (their
//! names in a recording).

mod evex;
pub mod named;
pub mod opmask;
mod shuffle;
mod sse;
mod strings;

use iced_x86::{EncodingKind, Instruction, Mnemonic as M, OpKind, Register};

use super::ops::{address, is_memory};
use super::why::{self, Why};
use super::State;
use crate::image::AddressSpace;

/// Bytes per register tracked (zmm).
pub const WIDTH: usize = 64;
/// Vector registers tracked.
pub const COUNT: usize = 32;

/// One register's bytes and which are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value {
    pub(super) bytes: [u8; WIDTH],
    pub(super) known: u64,
}

impl Default for Value {
    fn default() -> Self {
        Self {
            bytes: [0; WIDTH],
            known: 0,
        }
    }
}

impl Value {
    /// All bytes known and zero.
    pub(super) fn zero() -> Self {
        Self {
            bytes: [0; WIDTH],
            known: u64::MAX,
        }
    }

    pub(super) fn all(&self, from: usize, len: usize) -> bool {
        let m = mask(len) << from;
        self.known & m == m
    }

    /// Byte `at`, if known.
    pub(super) fn byte(&self, at: usize) -> Option<u8> {
        (self.known & 1 << at != 0).then(|| self.bytes[at])
    }

    /// The `len` bytes (at most 8) at `at` as a little-endian number (known or not).
    pub(super) fn element(&self, at: usize, len: usize) -> u64 {
        let mut x = [0u8; 8];
        x[..len].copy_from_slice(&self.bytes[at..at + len]);
        u64::from_le_bytes(x)
    }
}

/// A mask of the low `len` bytes of a register.
pub(super) fn mask(len: usize) -> u64 {
    if len >= 64 {
        u64::MAX
    } else {
        (1u64 << len) - 1
    }
}

/// The vector registers, and the opmask registers beside them.
#[derive(Debug, Clone)]
pub struct VecFile {
    regs: [Value; COUNT],
    why: [Why; COUNT],
    /// k0–7.
    pub k: opmask::Opmasks,
}

impl Default for VecFile {
    fn default() -> Self {
        Self {
            regs: [Value::default(); COUNT],
            why: [Why::default(); COUNT],
            k: opmask::Opmasks::default(),
        }
    }
}

impl VecFile {
    /// The `len` bytes (at most 8) at byte `at` of register `i`, if all known.
    pub fn lane(&self, i: usize, at: usize, len: usize) -> Option<u64> {
        let v = self.get(i);
        v.all(at, len).then(|| v.element(at, len))
    }

    /// Sets (or makes unknown) the `len` bytes (at most 8) at byte `at` of register `i`; the
    /// rest stays.
    pub fn set_lane(&mut self, i: usize, at: usize, len: usize, value: Option<u64>) {
        let mut v = self.regs[i];
        let m = mask(len) << at;
        match value {
            Some(x) => {
                v.bytes[at..at + len].copy_from_slice(&x.to_le_bytes()[..len]);
                v.known |= m;
            }
            None => v.known &= !m,
        }
        self.set(i, v);
    }

    /// Register `i`.
    pub fn get(&self, i: usize) -> Value {
        if self.regs[i].known != u64::MAX {
            why::saw(self.why[i]);
        }
        self.regs[i]
    }

    pub(super) fn set(&mut self, i: usize, v: Value) {
        if v.known != u64::MAX {
            self.why[i] = why::current();
        }
        self.regs[i] = v;
    }

    /// Why a byte of the low `len` of register `i` is unknown (the cause of its last write
    /// that left any byte unknown); `None` if all are known.
    pub fn why(&self, i: usize, len: usize) -> Option<Why> {
        (!self.regs[i].all(0, len)).then_some(self.why[i])
    }

    /// The low `len` bytes of register `i`, if all known.
    pub fn bytes(&self, i: usize, len: usize) -> Option<&[u8]> {
        self.regs[i].all(0, len).then(|| &self.regs[i].bytes[..len])
    }

    /// Makes register `i` unknown.
    pub fn forget(&mut self, i: usize) {
        self.set(i, Value::default());
    }

    /// Makes every vector and opmask register unknown.
    pub fn forget_all(&mut self) {
        (0..COUNT).for_each(|i| self.forget(i));
        self.k.forget_all();
    }

    /// Whether this knows every byte (and opmask bit) `other` knows, with the same value.
    pub fn covers(&self, other: &VecFile) -> bool {
        let same = |mine: &Value, theirs: &Value| {
            let t = theirs.known;
            t & !mine.known == 0 && (0..WIDTH).all(|b| t >> b & 1 == 0 || mine.bytes[b] == theirs.bytes[b])
        };
        self.regs.iter().zip(&other.regs).all(|(m, t)| same(m, t)) && self.k.covers(&other.k)
    }

    /// Learns the bytes (and opmask bits) `other` knows and this does not.
    pub fn absorb(&mut self, other: &VecFile) {
        for (mine, theirs) in self.regs.iter_mut().zip(&other.regs) {
            let new = theirs.known & !mine.known;
            for b in 0..WIDTH {
                if new & (1 << b) != 0 {
                    mine.bytes[b] = theirs.bytes[b];
                }
            }
            mine.known |= new;
        }
        self.k.absorb(&other.k);
    }
}

/// The tracked index of an xmm/ymm/zmm register (0–31), if it is one.
pub fn index(r: Register) -> Option<usize> {
    if r.is_xmm() {
        Some(r as usize - Register::XMM0 as usize)
    } else if r.is_ymm() {
        Some(r as usize - Register::YMM0 as usize)
    } else if r.is_zmm() {
        Some(r as usize - Register::ZMM0 as usize)
    } else {
        None
    }
}

/// Applies a vector or opmask instruction; false if it is not one modelled here.
pub fn step(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    match insn.encoding() {
        EncodingKind::Legacy | EncodingKind::VEX if opmask::is_opmask(insn) => opmask::step(st, insn, space),
        EncodingKind::Legacy | EncodingKind::VEX => {
            sse::step(st, insn, space) || shuffle::step(st, insn, space) || strings::step(st, insn, space)
        }
        EncodingKind::EVEX => {
            evex::step(st, insn, space)
                || ((writes_vector(insn) || matches!(insn.mnemonic(), M::Vmovd | M::Vmovq))
                    && sse::step(st, insn, space))
                || (!into_mask(insn) && shuffle::step(st, insn, space))
        }
        _ => false,
    }
}

/// Whether operand 0 is an opmask.
fn into_mask(insn: &Instruction) -> bool {
    insn.op_kind(0) == OpKind::Register && insn.op_register(0).is_k()
}

/// Whether operand 0 is a vector register or memory (not an opmask): what the shared
/// semantics of `sse` may write.
fn writes_vector(insn: &Instruction) -> bool {
    match insn.op_kind(0) {
        OpKind::Register => index(insn.op_register(0)).is_some(),
        k => is_memory(k),
    }
}

/// Operand `op` as a vector of `len` bytes: a register's low bytes, memory, or an EVEX
/// broadcast of one memory element to every element.
pub(super) fn read(st: &State, insn: &Instruction, op: u32, len: usize, space: &AddressSpace) -> Value {
    let mut v = Value::default();
    match insn.op_kind(op) {
        OpKind::Register => {
            let r = insn.op_register(op);
            if let Some(i) = index(r) {
                let full = st.vec.get(i);
                v.bytes[..len].copy_from_slice(&full.bytes[..len]);
                v.known = full.known & mask(len);
            } else if let Some((x, known)) = st.regs.read_bits(r) {
                let n = r.size().min(8);
                v.bytes[..n].copy_from_slice(&x.to_le_bytes()[..n]);
                v.known = (0..n)
                    .filter(|b| (known >> (8 * b)) & 0xff == 0xff)
                    .fold(0, |k, b| k | 1 << b);
            }
        }
        k if is_memory(k) => {
            let Some(a) = address(&st.regs, insn, op) else {
                return v;
            };
            let e = insn.memory_size().element_size();
            let broadcast = insn.is_broadcast() && e > 0;
            // All of them known where memory holds them (nearly every load): at once, as the
            // loop below would find them, where the loop looks each byte up in the table.
            if !broadcast && st.mem.read_known(a, &mut v.bytes[..len]) {
                v.known = mask(len);
                return v;
            }
            for b in 0..len {
                let at = if broadcast { b % e } else { b };
                if let Some(x) = st.mem.read_byte(a.wrapping_add(at as u64), space) {
                    v.bytes[b] = x;
                    v.known |= 1 << b;
                }
            }
        }
        _ => {}
    }
    v
}

/// Writes `len` bytes of `v` to vector register `i`: legacy encodings keep the bytes above,
/// VEX and EVEX ones zero them; an EVEX opmask selects the elements written.
pub(super) fn write_reg(st: &mut State, insn: &Instruction, i: usize, v: Value, len: usize) {
    let old = st.vec.regs[i];
    let mut out = if insn.encoding() == EncodingKind::Legacy {
        old
    } else {
        Value::zero()
    };
    out.bytes[..len].copy_from_slice(&v.bytes[..len]);
    out.known = (out.known & !mask(len)) | (v.known & mask(len));
    if let Some(m) = opmask::writemask(st, insn, len) {
        for b in 0..len {
            let (selected, known) = m.byte(b);
            let other = if m.zeroing { Some(0) } else { old.byte(b) };
            let value = match (selected, known) {
                (true, true) => continue,
                (false, true) => other,
                // Either may land there: known only where both agree.
                _ => other.filter(|&o| out.byte(b) == Some(o)),
            };
            out.bytes[b] = value.unwrap_or(0);
            out.known = (out.known & !(1 << b)) | u64::from(value.is_some()) << b;
        }
    }
    st.vec.set(i, out);
}

/// Writes `len` bytes of `v` to operand 0 (a vector register, a general-purpose register or
/// memory); an EVEX store writes only the elements its opmask selects.
pub(super) fn write(st: &mut State, insn: &Instruction, v: Value, len: usize) {
    match insn.op_kind(0) {
        OpKind::Register => {
            let r = insn.op_register(0);
            match index(r) {
                Some(i) => write_reg(st, insn, i, v, len),
                None => {
                    let n = r.size().min(8).min(len);
                    let value = v.all(0, n).then(|| v.element(0, n));
                    st.regs.write(r, value);
                }
            }
        }
        k if is_memory(k) => match address(&st.regs, insn, 0) {
            Some(a) => {
                let m = opmask::writemask(st, insn, len);
                // Every byte known and written (no opmask): what the loop below does, in one
                // write instead of one a byte.
                if m.is_none() && v.known & mask(len) == mask(len) {
                    st.mem.write(a, &v.bytes[..len]);
                    return;
                }
                for b in 0..len {
                    let addr = a.wrapping_add(b as u64);
                    match m.map(|m| m.byte(b)) {
                        Some((false, true)) => {}
                        Some((_, false)) => st.mem.forget(addr, 1),
                        _ if v.known & (1 << b) != 0 => st.mem.write(addr, &[v.bytes[b]]),
                        _ => st.mem.forget(addr, 1),
                    }
                }
            }
            None => {
                why::insist(why::Cause::UnknownAddress(insn.mnemonic()));
                st.mem.forget_all();
            }
        },
        _ => {}
    }
}

/// The vector length of an instruction: its widest vector register operand, else its memory
/// size.
pub(super) fn length(insn: &Instruction) -> usize {
    let regs = (0..insn.op_count())
        .filter(|&op| insn.op_kind(op) == OpKind::Register)
        .map(|op| insn.op_register(op))
        .filter(|r| r.is_xmm() || r.is_ymm() || r.is_zmm())
        .map(|r| r.size())
        .max();
    regs.unwrap_or_else(|| insn.memory_size().size())
}

/// Element-wise `f` over elements of `e` bytes; an element is known where both inputs' are.
pub(super) fn elementwise(a: &Value, b: &Value, len: usize, e: usize, f: impl Fn(u64, u64) -> u64) -> Value {
    let mut out = Value::default();
    for at in (0..len).step_by(e) {
        if !(a.all(at, e) && b.all(at, e)) {
            continue;
        }
        let r = f(a.element(at, e), b.element(at, e)).to_le_bytes();
        out.bytes[at..at + e].copy_from_slice(&r[..e]);
        out.known |= mask(e) << at;
    }
    out
}

/// The first source operand of a two- (legacy: the destination is the first) or three-operand
/// (VEX, EVEX) instruction.
pub(super) fn first_source(insn: &Instruction) -> u32 {
    if insn.encoding() == EncodingKind::Legacy {
        0
    } else {
        1
    }
}

/// The two sources of a two- or three-operand instruction.
pub(super) fn sources(st: &State, insn: &Instruction, len: usize, space: &AddressSpace) -> (Value, Value) {
    let first = first_source(insn);
    let a = read(st, insn, first, len, space);
    if same_sources(insn) {
        return (a, a);
    }
    (a, read(st, insn, first + 1, len, space))
}

/// Whether a two- or three-operand instruction names the same register twice as sources
/// (`pxor x, x` is zero whatever `x` holds).
pub(super) fn same_sources(insn: &Instruction) -> bool {
    let first = first_source(insn);
    insn.op_kind(first) == OpKind::Register
        && insn.op_kind(first + 1) == OpKind::Register
        && insn.op_register(first) == insn.op_register(first + 1)
}

/// The low `e` bytes set (an element of `e` bytes).
pub(super) fn bits(e: usize) -> u64 {
    if e >= 8 {
        u64::MAX
    } else {
        (1u64 << (e * 8)) - 1
    }
}

/// Whether an instruction replaces vector registers that iced-x86 does not list as written:
/// the XSAVE-family restores.
pub fn restores_all(insn: &Instruction) -> bool {
    matches!(
        insn.mnemonic(),
        M::Xrstor | M::Xrstor64 | M::Xrstors | M::Xrstors64 | M::Fxrstor | M::Fxrstor64 | M::Vzeroupper | M::Vzeroall
    )
}

#[cfg(test)]
mod tests;

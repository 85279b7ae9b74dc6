//! The vector registers (xmm/ymm 0–15) as known bytes, and the SSE2/AVX2 integer and move
//! instructions glibc's string and memory routines run (issue 17, lever 2): `strlen`,
//! `strchr`, `memcpy` and friends load 16 or 32 bytes, compare them, take a byte mask with
//! `pmovmskb` and branch or index with it, so without these the registers derived from the mask
//! (and the stack pointer of any `alloca` sized by them) are lost.
//!
//! Each byte is known or not. An element-wise result is known where every byte of its inputs'
//! element is. Width rules (SDM vol. 1, 14.1.2): a legacy SSE instruction writes the low 16
//! bytes and leaves the rest; a VEX one zeroes everything above what it writes. EVEX (AVX-512)
//! and opmask instructions are not modelled: the generic rule forgets what they write.

use iced_x86::{EncodingKind, Instruction, Mnemonic as M, OpKind, Register};

use super::flags::{self, CF, ZF};
use super::ops::{address, is_memory};
use super::why::{self, Why};
use super::State;
use crate::image::AddressSpace;

/// Bytes per register tracked (ymm).
const WIDTH: usize = 32;

/// One register's bytes and which are known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Value {
    pub(super) bytes: [u8; WIDTH],
    pub(super) known: u32,
}

impl Value {
    pub(super) fn all(&self, from: usize, len: usize) -> bool {
        let m = mask(len) << from;
        self.known & m == m
    }
}

pub(super) fn mask(len: usize) -> u32 {
    if len >= 32 {
        u32::MAX
    } else {
        (1u32 << len) - 1
    }
}

/// The sixteen vector registers.
#[derive(Debug, Clone, Default)]
pub struct VecFile {
    regs: [Value; 16],
    why: [Why; 16],
}

impl VecFile {
    /// The `len` bytes (at most 8) at byte `at` of register `i`, if all known.
    pub fn lane(&self, i: usize, at: usize, len: usize) -> Option<u64> {
        let v = self.get(i);
        v.all(at, len).then(|| {
            let mut b = [0u8; 8];
            b[..len].copy_from_slice(&v.bytes[at..at + len]);
            u64::from_le_bytes(b)
        })
    }

    /// Sets (or makes unknown) the `len` bytes at byte `at` of register `i`; the rest stays.
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
        if self.regs[i].known != u32::MAX {
            why::saw(self.why[i]);
        }
        self.regs[i]
    }

    fn set(&mut self, i: usize, v: Value) {
        if v.known != u32::MAX {
            self.why[i] = why::current();
        }
        self.regs[i] = v;
    }

    /// The low `len` bytes of register `i`, if all known.
    pub fn bytes(&self, i: usize, len: usize) -> Option<&[u8]> {
        self.regs[i].all(0, len).then(|| &self.regs[i].bytes[..len])
    }

    /// Makes register `i` unknown.
    pub fn forget(&mut self, i: usize) {
        self.set(i, Value::default());
    }

    /// Makes every register unknown.
    pub fn forget_all(&mut self) {
        (0..16).for_each(|i| self.forget(i));
    }

    /// Learns the bytes `other` knows and this does not.
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
    }
}

/// The tracked index of an xmm/ymm register (0–15), if it is one.
pub fn index(r: Register) -> Option<usize> {
    let i = if r.is_xmm() {
        r as usize - Register::XMM0 as usize
    } else if r.is_ymm() {
        r as usize - Register::YMM0 as usize
    } else if r.is_zmm() {
        r as usize - Register::ZMM0 as usize
    } else {
        return None;
    };
    (i < 16).then_some(i)
}

/// Operand `op` as a vector of `len` bytes: a register's low bytes or memory.
pub(super) fn read(st: &State, insn: &Instruction, op: u32, len: usize, space: &AddressSpace) -> Value {
    let mut v = Value::default();
    match insn.op_kind(op) {
        OpKind::Register => {
            let r = insn.op_register(op);
            if let Some(i) = index(r) {
                let full = st.vec.get(i);
                v.bytes[..len].copy_from_slice(&full.bytes[..len]);
                v.known = full.known & mask(len);
            } else if let Some(x) = st.regs.read(r) {
                let n = r.size().min(8);
                v.bytes[..n].copy_from_slice(&x.to_le_bytes()[..n]);
                v.known = mask(n);
            }
        }
        k if is_memory(k) => {
            if let Some(a) = address(&st.regs, insn, op) {
                for b in 0..len {
                    if let Some(x) = st.mem.read_byte(a.wrapping_add(b as u64), space) {
                        v.bytes[b] = x;
                        v.known |= 1 << b;
                    }
                }
            }
        }
        _ => {}
    }
    v
}

/// Writes `len` bytes of `v` to register operand `op`: legacy encodings keep the bytes above,
/// VEX ones zero them.
fn write_reg(st: &mut State, insn: &Instruction, i: usize, v: Value, len: usize) {
    let mut out = if insn.encoding() == EncodingKind::Legacy {
        st.vec.regs[i]
    } else {
        Value {
            bytes: [0; WIDTH],
            known: u32::MAX,
        }
    };
    out.bytes[..len].copy_from_slice(&v.bytes[..len]);
    out.known = (out.known & !mask(len)) | (v.known & mask(len));
    st.vec.set(i, out);
}

/// Writes `len` bytes of `v` to operand 0 (a vector register or memory).
pub(super) fn write(st: &mut State, insn: &Instruction, v: Value, len: usize) {
    match insn.op_kind(0) {
        OpKind::Register => {
            let r = insn.op_register(0);
            match index(r) {
                Some(i) => write_reg(st, insn, i, v, len),
                None => {
                    let n = r.size().min(8).min(len);
                    let value = v.all(0, n).then(|| {
                        let mut b = [0u8; 8];
                        b[..n].copy_from_slice(&v.bytes[..n]);
                        u64::from_le_bytes(b)
                    });
                    st.regs.write(r, value);
                }
            }
        }
        k if is_memory(k) => match address(&st.regs, insn, 0) {
            Some(a) => {
                for b in 0..len {
                    let addr = a.wrapping_add(b as u64);
                    if v.known & (1 << b) != 0 {
                        st.mem.write(addr, &[v.bytes[b]]);
                    } else {
                        st.mem.forget(addr, 1);
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

/// The vector length of an instruction: its widest register operand, else its memory size.
pub(super) fn length(insn: &Instruction) -> usize {
    let regs = (0..insn.op_count())
        .filter(|&op| insn.op_kind(op) == OpKind::Register)
        .map(|op| insn.op_register(op))
        .filter(|r| r.is_xmm() || r.is_ymm())
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
        let get = |v: &Value| {
            let mut x = [0u8; 8];
            x[..e].copy_from_slice(&v.bytes[at..at + e]);
            u64::from_le_bytes(x)
        };
        let r = f(get(a), get(b)).to_le_bytes();
        out.bytes[at..at + e].copy_from_slice(&r[..e]);
        out.known |= mask(e) << at;
    }
    out
}

/// The two sources of a two- (legacy: the destination is the first) or three-operand (VEX)
/// instruction.
fn sources(st: &State, insn: &Instruction, len: usize, space: &AddressSpace) -> (Value, Value) {
    let first = if insn.op_count() == 3 { 1 } else { 0 };
    let a = read(st, insn, first, len, space);
    if same_sources(insn) {
        return (a, a);
    }
    (a, read(st, insn, first + 1, len, space))
}

/// Whether a two- or three-operand instruction names the same register twice as sources
/// (`pxor x, x` is zero whatever `x` holds).
fn same_sources(insn: &Instruction) -> bool {
    let first = if insn.op_count() == 3 { 1 } else { 0 };
    insn.op_kind(first) == OpKind::Register
        && insn.op_kind(first + 1) == OpKind::Register
        && insn.op_register(first) == insn.op_register(first + 1)
}

fn bits(e: usize) -> u64 {
    if e >= 8 {
        u64::MAX
    } else {
        (1u64 << (e * 8)) - 1
    }
}

/// Applies a vector instruction; false if it is not one modelled here.
pub fn step(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    if insn.encoding() == EncodingKind::EVEX || insn.encoding() == EncodingKind::XOP {
        return false;
    }
    let len = length(insn);
    if !(len == 16 || len == 32 || matches!(insn.mnemonic(), M::Movd | M::Movq | M::Vmovd | M::Vmovq)) {
        return matches!(insn.mnemonic(), M::Vzeroupper | M::Vzeroall) && zero_upper(st, insn);
    }
    let m = insn.mnemonic();
    match m {
        M::Movdqa | M::Movdqu | M::Movaps | M::Movups | M::Movapd | M::Movupd | M::Lddqu => {
            let v = read(st, insn, 1, len, space);
            write(st, insn, v, len);
        }
        M::Vmovdqa | M::Vmovdqu | M::Vmovaps | M::Vmovups | M::Vmovapd | M::Vmovupd | M::Vlddqu => {
            let v = read(st, insn, 1, len, space);
            write(st, insn, v, len);
        }
        M::Movd | M::Movq | M::Vmovd | M::Vmovq => {
            let n = match (insn.op_kind(0), insn.op_kind(1)) {
                (OpKind::Register, _) if index(insn.op_register(0)).is_none() => insn.op_register(0).size(),
                (_, OpKind::Register) if index(insn.op_register(1)).is_none() => insn.op_register(1).size(),
                _ if matches!(m, M::Movd | M::Vmovd) => 4,
                _ => 8,
            };
            let v = read(st, insn, 1, n, space);
            match insn.op_kind(0) {
                // Into a vector register: zero-extended to 16 bytes.
                OpKind::Register if index(insn.op_register(0)).is_some() => {
                    let mut w = Value {
                        bytes: [0; WIDTH],
                        known: mask(16),
                    };
                    w.bytes[..n].copy_from_slice(&v.bytes[..n]);
                    w.known = (w.known & !mask(n)) | (v.known & mask(n));
                    write_reg(st, insn, index(insn.op_register(0)).unwrap_or(0), w, 16);
                }
                _ => write(st, insn, v, n),
            }
        }
        M::Movlpd | M::Movlps | M::Movhpd | M::Movhps if insn.op_count() == 2 => {
            let high = matches!(m, M::Movhpd | M::Movhps);
            let at = if high { 8 } else { 0 };
            match (insn.op_kind(0), index(insn.op_register(0))) {
                (OpKind::Register, Some(i)) => {
                    let src = read(st, insn, 1, 8, space);
                    let mut v = st.vec.get(i);
                    v.bytes[at..at + 8].copy_from_slice(&src.bytes[..8]);
                    v.known = (v.known & !(mask(8) << at)) | ((src.known & mask(8)) << at);
                    st.vec.set(i, v);
                }
                _ => {
                    let full = read(st, insn, 1, 16, space);
                    let mut v = Value::default();
                    v.bytes[..8].copy_from_slice(&full.bytes[at..at + 8]);
                    v.known = (full.known >> at) & mask(8);
                    write(st, insn, v, 8);
                }
            }
        }
        // movhlps x1, x2: x1's low half from x2's high half; movlhps: x1's high from x2's low.
        M::Movhlps | M::Movlhps => {
            let (Some(d), Some(src)) = (index(insn.op_register(0)), index(insn.op_register(1))) else {
                return false;
            };
            let (to, from) = if m == M::Movhlps { (0, 8) } else { (8, 0) };
            let s = st.vec.get(src);
            let mut v = st.vec.get(d);
            v.bytes[to..to + 8].copy_from_slice(&s.bytes[from..from + 8]);
            v.known = (v.known & !(mask(8) << to)) | (((s.known >> from) & mask(8)) << to);
            st.vec.set(d, v);
        }
        M::Pxor | M::Xorps | M::Xorpd | M::Vpxor | M::Vxorps | M::Vxorpd if same_sources(insn) => {
            let zero = Value {
                bytes: [0; WIDTH],
                known: u32::MAX,
            };
            write(st, insn, zero, len);
        }
        M::Pxor
        | M::Xorps
        | M::Xorpd
        | M::Vpxor
        | M::Vxorps
        | M::Vxorpd
        | M::Por
        | M::Orps
        | M::Orpd
        | M::Vpor
        | M::Vorps
        | M::Vorpd
        | M::Pand
        | M::Andps
        | M::Andpd
        | M::Vpand
        | M::Vandps
        | M::Vandpd
        | M::Pandn
        | M::Andnps
        | M::Andnpd
        | M::Vpandn
        | M::Vandnps
        | M::Vandnpd => {
            let (a, b) = sources(st, insn, len, space);
            let f: fn(u64, u64) -> u64 = match m {
                M::Pxor | M::Xorps | M::Xorpd | M::Vpxor | M::Vxorps | M::Vxorpd => |a, b| a ^ b,
                M::Por | M::Orps | M::Orpd | M::Vpor | M::Vorps | M::Vorpd => |a, b| a | b,
                M::Pand | M::Andps | M::Andpd | M::Vpand | M::Vandps | M::Vandpd => |a, b| a & b,
                _ => |a, b| !a & b,
            };
            write(st, insn, elementwise(&a, &b, len, 1, f), len);
        }
        M::Pcmpeqb | M::Pcmpeqw | M::Pcmpeqd | M::Pcmpeqq | M::Vpcmpeqb | M::Vpcmpeqw | M::Vpcmpeqd | M::Vpcmpeqq => {
            let e = match m {
                M::Pcmpeqb | M::Vpcmpeqb => 1,
                M::Pcmpeqw | M::Vpcmpeqw => 2,
                M::Pcmpeqd | M::Vpcmpeqd => 4,
                _ => 8,
            };
            let (a, b) = sources(st, insn, len, space);
            let v = elementwise(&a, &b, len, e, |a, b| if a == b { u64::MAX } else { 0 });
            write(st, insn, v, len);
        }
        M::Pcmpgtb | M::Vpcmpgtb => {
            let (a, b) = sources(st, insn, len, space);
            let v = elementwise(&a, &b, len, 1, |a, b| if (a as i8) > (b as i8) { u64::MAX } else { 0 });
            write(st, insn, v, len);
        }
        M::Pminub | M::Vpminub | M::Pmaxub | M::Vpmaxub => {
            let (a, b) = sources(st, insn, len, space);
            let min = matches!(m, M::Pminub | M::Vpminub);
            let v = elementwise(&a, &b, len, 1, |a, b| if min { a.min(b) } else { a.max(b) });
            write(st, insn, v, len);
        }
        M::Paddb
        | M::Paddw
        | M::Paddd
        | M::Paddq
        | M::Vpaddb
        | M::Vpaddw
        | M::Vpaddd
        | M::Vpaddq
        | M::Psubb
        | M::Psubw
        | M::Psubd
        | M::Psubq
        | M::Vpsubb
        | M::Vpsubw
        | M::Vpsubd
        | M::Vpsubq => {
            let (e, sub) = element(m);
            let (a, b) = sources(st, insn, len, space);
            let f = |a: u64, b: u64| if sub { a.wrapping_sub(b) } else { a.wrapping_add(b) } & bits(e);
            write(st, insn, elementwise(&a, &b, len, e, f), len);
        }
        M::Pmovmskb | M::Vpmovmskb => {
            // Bit by bit: the known bits of a mask often settle a `bsf` after it.
            let v = read(st, insn, 1, len, space);
            super::partial::byte_mask(st, insn.op_register(0), &v.bytes, v.known, len);
        }
        M::Ptest | M::Vptest => {
            let (a, b) = (read(st, insn, 0, len, space), read(st, insn, 1, len, space));
            st.flags.apply_generic(insn);
            if a.all(0, len) && b.all(0, len) {
                let and = (0..len).all(|i| a.bytes[i] & b.bytes[i] == 0);
                let andn = (0..len).all(|i| !a.bytes[i] & b.bytes[i] == 0);
                st.flags
                    .put(flags::STATUS, if and { ZF } else { 0 } | if andn { CF } else { 0 });
            } else {
                st.flags.forget(flags::STATUS);
            }
        }
        M::Punpcklbw
        | M::Punpcklwd
        | M::Punpckldq
        | M::Punpcklqdq
        | M::Punpckhbw
        | M::Punpckhwd
        | M::Punpckhdq
        | M::Punpckhqdq
        | M::Vpunpcklbw
        | M::Vpunpcklwd
        | M::Vpunpckldq
        | M::Vpunpcklqdq
        | M::Vpunpckhbw
        | M::Vpunpckhwd
        | M::Vpunpckhdq
        | M::Vpunpckhqdq => {
            let (a, b) = sources(st, insn, len, space);
            let e = match m {
                M::Punpcklbw | M::Punpckhbw | M::Vpunpcklbw | M::Vpunpckhbw => 1,
                M::Punpcklwd | M::Punpckhwd | M::Vpunpcklwd | M::Vpunpckhwd => 2,
                M::Punpckldq | M::Punpckhdq | M::Vpunpckldq | M::Vpunpckhdq => 4,
                _ => 8,
            };
            let high = matches!(
                m,
                M::Punpckhbw
                    | M::Punpckhwd
                    | M::Punpckhdq
                    | M::Punpckhqdq
                    | M::Vpunpckhbw
                    | M::Vpunpckhwd
                    | M::Vpunpckhdq
                    | M::Vpunpckhqdq
            );
            // Per 128-bit lane: a's and b's elements of the lane's low (or high) half, in turn.
            let mut out = Value::default();
            for lane in (0..len).step_by(16) {
                let from = lane + if high { 8 } else { 0 };
                for k in 0..8 / e {
                    for (src, slot) in [(&a, 2 * k), (&b, 2 * k + 1)] {
                        let (s, d) = (from + k * e, lane + slot * e);
                        out.bytes[d..d + e].copy_from_slice(&src.bytes[s..s + e]);
                        out.known |= ((src.known >> s) & mask(e)) << d;
                    }
                }
            }
            write(st, insn, out, len);
        }
        M::Pshufd | M::Vpshufd => {
            let v = read(st, insn, 1, len, space);
            let imm = insn.immediate(2) as usize;
            let mut out = Value::default();
            for lane in (0..len).step_by(16) {
                for k in 0..4 {
                    let s = lane + 4 * ((imm >> (2 * k)) & 3);
                    let d = lane + 4 * k;
                    out.bytes[d..d + 4].copy_from_slice(&v.bytes[s..s + 4]);
                    out.known |= ((v.known >> s) & mask(4)) << d;
                }
            }
            write(st, insn, out, len);
        }
        M::Pslldq | M::Psrldq | M::Vpslldq | M::Vpsrldq => {
            let v = read(st, insn, insn.op_count() - 2, len, space);
            let n = (insn.immediate(insn.op_count() - 1) as usize).min(16);
            let left = matches!(m, M::Pslldq | M::Vpslldq);
            let mut out = Value::default();
            for lane in (0..len).step_by(16) {
                for d in 0..16usize {
                    let s = if left {
                        d.checked_sub(n)
                    } else {
                        Some(d + n).filter(|&s| s < 16)
                    };
                    match s {
                        Some(s) => {
                            out.bytes[lane + d] = v.bytes[lane + s];
                            out.known |= ((v.known >> (lane + s)) & 1) << (lane + d);
                        }
                        None => out.known |= 1 << (lane + d),
                    }
                }
            }
            write(st, insn, out, len);
        }
        M::Vpbroadcastb | M::Vpbroadcastw | M::Vpbroadcastd | M::Vpbroadcastq => {
            let e = match m {
                M::Vpbroadcastb => 1,
                M::Vpbroadcastw => 2,
                M::Vpbroadcastd => 4,
                _ => 8,
            };
            let v = read(st, insn, 1, e, space);
            let mut out = Value::default();
            if v.all(0, e) {
                for at in (0..len).step_by(e) {
                    out.bytes[at..at + e].copy_from_slice(&v.bytes[..e]);
                }
                out.known = mask(len);
            }
            write(st, insn, out, len);
        }
        _ => return false,
    }
    true
}

/// The element size of an add or subtract, and whether it subtracts.
fn element(m: M) -> (usize, bool) {
    let sub = matches!(
        m,
        M::Psubb | M::Psubw | M::Psubd | M::Psubq | M::Vpsubb | M::Vpsubw | M::Vpsubd | M::Vpsubq
    );
    let size = match m {
        M::Paddb | M::Psubb | M::Vpaddb | M::Vpsubb => 1,
        M::Paddw | M::Psubw | M::Vpaddw | M::Vpsubw => 2,
        M::Paddd | M::Psubd | M::Vpaddd | M::Vpsubd => 4,
        _ => 8,
    };
    (size, sub)
}

/// `vzeroupper` (bytes 16 and up of every register become zero) and `vzeroall`.
fn zero_upper(st: &mut State, insn: &Instruction) -> bool {
    let keep = if insn.mnemonic() == M::Vzeroupper { 16 } else { 0 };
    for i in 0..16 {
        let mut v = st.vec.regs[i];
        v.bytes[keep..].fill(0);
        v.known |= !mask(keep);
        st.vec.set(i, v);
    }
    true
}

/// Whether an instruction replaces vector registers that iced-x86 does not list as written:
/// the XSAVE-family restores.
pub fn restores_all(insn: &Instruction) -> bool {
    matches!(
        insn.mnemonic(),
        M::Xrstor | M::Xrstor64 | M::Xrstors | M::Xrstors64 | M::Fxrstor | M::Fxrstor64 | M::Vzeroupper | M::Vzeroall
    )
}

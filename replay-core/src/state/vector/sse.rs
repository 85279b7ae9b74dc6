//! The SSE2 and AVX2 integer and move instructions glibc's string and memory routines run
//! (issue 17, lever 2), in their legacy, VEX and EVEX encodings: `strlen`, `strchr`, `memcpy`
//! and friends load 16, 32 or 64 bytes, compare them, take a byte mask and branch or index
//! with it, so without these the registers derived from the mask (and the stack pointer of
//! any `alloca` sized by them) are lost. An EVEX form computes what the VEX one does;
//! [`super::write`] applies its opmask.

use iced_x86::{Instruction, Mnemonic as M, OpKind};

use super::super::flags::{self, CF, ZF};
use super::super::State;
use super::{bits, elementwise, index, length, mask, read, same_sources, sources, write, write_reg, Value};
use crate::image::AddressSpace;

/// Applies one of these (legacy, VEX or EVEX); false if it is not one modelled here.
pub fn step(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    let len = length(insn);
    if !(matches!(len, 16 | 32 | 64) || matches!(insn.mnemonic(), M::Movd | M::Movq | M::Vmovd | M::Vmovq)) {
        return matches!(insn.mnemonic(), M::Vzeroupper | M::Vzeroall) && zero_upper(st, insn);
    }
    let m = insn.mnemonic();
    match m {
        M::Movdqa | M::Movdqu | M::Movaps | M::Movups | M::Movapd | M::Movupd | M::Lddqu => {
            let v = read(st, insn, 1, len, space);
            write(st, insn, v, len);
        }
        M::Vmovdqa
        | M::Vmovdqu
        | M::Vmovaps
        | M::Vmovups
        | M::Vmovapd
        | M::Vmovupd
        | M::Vlddqu
        | M::Vmovdqa32
        | M::Vmovdqa64
        | M::Vmovdqu8
        | M::Vmovdqu16
        | M::Vmovdqu32
        | M::Vmovdqu64 => {
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
                        known: mask(16),
                        ..Value::default()
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
        M::Pxor | M::Xorps | M::Xorpd | M::Vpxor | M::Vxorps | M::Vxorpd | M::Vpxord | M::Vpxorq
            if same_sources(insn) =>
        {
            write(st, insn, Value::zero(), len);
        }
        M::Pxor
        | M::Xorps
        | M::Xorpd
        | M::Vpxor
        | M::Vxorps
        | M::Vxorpd
        | M::Vpxord
        | M::Vpxorq
        | M::Por
        | M::Orps
        | M::Orpd
        | M::Vpor
        | M::Vorps
        | M::Vorpd
        | M::Vpord
        | M::Vporq
        | M::Pand
        | M::Andps
        | M::Andpd
        | M::Vpand
        | M::Vandps
        | M::Vandpd
        | M::Vpandd
        | M::Vpandq
        | M::Pandn
        | M::Andnps
        | M::Andnpd
        | M::Vpandn
        | M::Vandnps
        | M::Vandnpd
        | M::Vpandnd
        | M::Vpandnq => {
            let (a, b) = sources(st, insn, len, space);
            let f: fn(u64, u64) -> u64 = match m {
                M::Pxor | M::Xorps | M::Xorpd | M::Vpxor | M::Vxorps | M::Vxorpd | M::Vpxord | M::Vpxorq => {
                    |a, b| a ^ b
                }
                M::Por | M::Orps | M::Orpd | M::Vpor | M::Vorps | M::Vorpd | M::Vpord | M::Vporq => |a, b| a | b,
                M::Pand | M::Andps | M::Andpd | M::Vpand | M::Vandps | M::Vandpd | M::Vpandd | M::Vpandq => {
                    |a, b| a & b
                }
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
            super::super::partial::byte_mask(st, insn.op_register(0), &v.bytes, v.known, len);
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

/// `vzeroupper` (bytes 16 and up of registers 0–15 become zero) and `vzeroall` (all of
/// registers 0–15); registers 16–31 are left as they are (SDM vol. 2, VZEROUPPER).
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

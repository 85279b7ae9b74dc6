//! Vector instructions that move bytes between elements or narrow them, beyond the moves,
//! logic and compares of `vector`: packs with saturation, byte shuffles (`pshufb`, which
//! glibc's `strcspn` aligns its input with) and aligns, dword and qword shuffles, element
//! inserts and extracts, dword minimum and maximum. Found by `rtit check-values` on python3 (its
//! string and hash routines) under the qemu backend. A result byte is known where every
//! input byte it depends on is (SDM vol. 2, each instruction's operation).

use iced_x86::{EncodingKind, Instruction, Mnemonic as M};

use super::super::State;
use super::{elementwise, length, read, write, Value};
use crate::image::AddressSpace;

/// The two sources: the destination and the second operand (legacy), or operands 1 and 2
/// (VEX). An immediate, if any, comes after them.
fn pair(st: &State, insn: &Instruction, len: usize, space: &AddressSpace) -> (Value, Value) {
    let first = if insn.encoding() == EncodingKind::Legacy { 0 } else { 1 };
    (read(st, insn, first, len, space), read(st, insn, first + 1, len, space))
}

/// The trailing immediate.
fn imm(insn: &Instruction) -> usize {
    insn.immediate(insn.op_count() - 1) as usize
}

/// Copies byte `s` of `src` to byte `d` of `out`, known if it is (and unknown if not, even
/// where `out` knew the byte it replaces).
fn take(out: &mut Value, d: usize, src: &Value, s: usize) {
    out.bytes[d] = src.bytes[s];
    out.known = (out.known & !(1 << d)) | (((src.known >> s) & 1) << d);
}

/// Copies the `e` bytes at `s` of `src` to `d` of `out`.
fn take_n(out: &mut Value, d: usize, src: &Value, s: usize, e: usize) {
    for k in 0..e {
        take(out, d + k, src, s + k);
    }
}

/// Applies one of these (SSE, VEX or EVEX, whose opmask [`write`] applies); false if it is
/// not one.
pub fn step(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    if !matches!(
        insn.encoding(),
        EncodingKind::Legacy | EncodingKind::VEX | EncodingKind::EVEX
    ) {
        return false;
    }
    let len = length(insn);
    if !matches!(len, 16 | 32 | 64) {
        return false;
    }
    let m = insn.mnemonic();
    match m {
        M::Packuswb | M::Vpackuswb | M::Packsswb | M::Vpacksswb => {
            let unsigned = matches!(m, M::Packuswb | M::Vpackuswb);
            let (a, b) = pair(st, insn, len, space);
            // Per 128-bit lane: a's eight words, then b's, each saturated to a byte.
            let mut out = Value::default();
            for lane in (0..len).step_by(16) {
                for (half, src) in [(0, &a), (8, &b)] {
                    for k in 0..8 {
                        let s = lane + 2 * k;
                        if !src.all(s, 2) {
                            continue;
                        }
                        let w = i16::from_le_bytes([src.bytes[s], src.bytes[s + 1]]);
                        let d = lane + half + k;
                        out.bytes[d] = if unsigned {
                            w.clamp(0, 255) as u8
                        } else {
                            w.clamp(-128, 127) as i8 as u8
                        };
                        out.known |= 1 << d;
                    }
                }
            }
            write(st, insn, out, len);
        }
        M::Pshufb | M::Vpshufb => {
            // Per lane: each byte picked from the lane by the control's low four bits, or
            // zero where the control's top bit is set.
            let (a, control) = pair(st, insn, len, space);
            let mut out = Value::default();
            for lane in (0..len).step_by(16) {
                for d in lane..lane + 16 {
                    let Some(c) = control.byte(d) else { continue };
                    if c & 0x80 != 0 {
                        out.known |= 1 << d;
                    } else {
                        take(&mut out, d, &a, lane + usize::from(c & 15));
                    }
                }
            }
            write(st, insn, out, len);
        }
        M::Palignr | M::Vpalignr => {
            // Per lane: a (high) and b (low) side by side, shifted right by imm bytes.
            let (a, b) = pair(st, insn, len, space);
            let n = imm(insn);
            let mut out = Value::default();
            for lane in (0..len).step_by(16) {
                for d in 0..16 {
                    match d + n {
                        s @ 0..=15 => take(&mut out, lane + d, &b, lane + s),
                        s @ 16..=31 => take(&mut out, lane + d, &a, lane + s - 16),
                        _ => out.known |= 1 << (lane + d),
                    }
                }
            }
            write(st, insn, out, len);
        }
        M::Shufps | M::Vshufps => {
            // Per lane: two dwords of a, then two of b, chosen by the immediate's bit pairs.
            let (a, b) = pair(st, insn, len, space);
            let i = imm(insn);
            let mut out = Value::default();
            for lane in (0..len).step_by(16) {
                for (k, src) in [(0, &a), (1, &a), (2, &b), (3, &b)] {
                    let s = lane + 4 * ((i >> (2 * k)) & 3);
                    take_n(&mut out, lane + 4 * k, src, s, 4);
                }
            }
            write(st, insn, out, len);
        }
        M::Shufpd | M::Vshufpd => {
            // Per lane: a qword of a, then one of b, by one immediate bit each.
            let (a, b) = pair(st, insn, len, space);
            let i = imm(insn);
            let mut out = Value::default();
            for (n, lane) in (0..len).step_by(16).enumerate() {
                for (k, src) in [(0, &a), (1, &b)] {
                    let s = lane + 8 * ((i >> (2 * n + k)) & 1);
                    take_n(&mut out, lane + 8 * k, src, s, 8);
                }
            }
            write(st, insn, out, len);
        }
        M::Pminud | M::Vpminud | M::Pmaxud | M::Vpmaxud | M::Pminsd | M::Vpminsd | M::Pmaxsd | M::Vpmaxsd => {
            let (a, b) = pair(st, insn, len, space);
            let signed = matches!(m, M::Pminsd | M::Vpminsd | M::Pmaxsd | M::Vpmaxsd);
            let min = matches!(m, M::Pminud | M::Vpminud | M::Pminsd | M::Vpminsd);
            let out = elementwise(&a, &b, len, 4, |x, y| {
                let less = if signed { (x as i32) < (y as i32) } else { x < y };
                if less == min {
                    x
                } else {
                    y
                }
            });
            write(st, insn, out, len);
        }
        M::Pinsrb | M::Pinsrw | M::Pinsrd | M::Pinsrq | M::Vpinsrb | M::Vpinsrw | M::Vpinsrd | M::Vpinsrq => {
            // One element from a register or memory into a copy of the first source.
            let e = element(m);
            let first = if insn.encoding() == EncodingKind::Legacy { 0 } else { 1 };
            let mut out = read(st, insn, first, 16, space);
            let src = read(st, insn, first + 1, e, space);
            let at = e * (imm(insn) & (16 / e - 1));
            take_n(&mut out, at, &src, 0, e);
            write(st, insn, out, 16);
        }
        M::Pextrb | M::Pextrw | M::Pextrd | M::Pextrq | M::Vpextrb | M::Vpextrw | M::Vpextrd | M::Vpextrq => {
            // One element to memory, or zero-extended into a general-purpose register.
            let e = element(m);
            let v = read(st, insn, 1, 16, space);
            let mut out = Value::default();
            take_n(&mut out, 0, &v, e * (imm(insn) & (16 / e - 1)), e);
            out.known |= super::mask(8) & !super::mask(e);
            let n = if insn.op_kind(0) == iced_x86::OpKind::Register {
                8
            } else {
                e
            };
            write(st, insn, out, n);
        }
        _ => return false,
    }
    true
}

/// The element size of an insert or extract.
fn element(m: M) -> usize {
    match m {
        M::Pinsrb | M::Vpinsrb | M::Pextrb | M::Vpextrb => 1,
        M::Pinsrw | M::Vpinsrw | M::Pextrw | M::Vpextrw => 2,
        M::Pinsrd | M::Vpinsrd | M::Pextrd | M::Vpextrd => 4,
        _ => 8,
    }
}

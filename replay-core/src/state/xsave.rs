//! What the XSAVE family and FXSAVE/FXRSTOR store of the tracked state (xmm, the upper
//! halves of ymm, MXCSR) and what the restores load back (SDM vol. 1, 10.5.1, 13.4–13.8,
//! 13.10). glibc's lazy-binding trampoline (`_dl_runtime_resolve_xsave`, `_xsavec`) saves
//! and restores every vector register around the first call of each library function;
//! without this every vector register was unknown after such a call.
//!
//! The layout both formats share for what is tracked: MXCSR at 24 and xmm0–15 at 160 in the
//! legacy region, XSTATE_BV at 512, and the AVX component (ymm's upper halves) at 576: the
//! first component after the header in the standard format, and in the compacted one
//! whenever it is present (components 0 and 1 live in the legacy region).
//!
//! XSAVE writes each requested component whatever its state, and sets XSTATE_BV[i] to
//! XINUSE[i], which the processor alone knows: under QEMU it is always 1 (`Cpu::xsave_all_in_use`);
//! on a real CPU the step backend logs the header XSAVEC wrote (XSAVEC writes only the
//! components in use). XRSTOR loads a component whose XSTATE_BV bit is 1 and initialises
//! (zeroes) one whose bit is 0; with the bit unknown a byte is known only where both agree.

use iced_x86::{Instruction, Mnemonic as M, Register};

use super::mxcsr::Mxcsr;
use super::ops::address;
use super::vector::Value;
use super::State;
use crate::image::AddressSpace;

/// MXCSR in the legacy region, then MXCSR_MASK.
const MXCSR: u64 = 24;
/// xmm0–15 in the legacy region.
const XMM: u64 = 160;
/// XSTATE_BV, the first field of the XSAVE header.
const XSTATE_BV: u64 = 512;
/// XCOMP_BV.
const XCOMP_BV: u64 = 520;
/// The AVX component: ymm0–15's upper halves.
const YMM_HI: u64 = 576;
/// The end of the AVX component in the standard format.
const AVX_END: u64 = 832;

/// x87 state (component 0).
const X87: u64 = 1;
/// SSE state (component 1): xmm0–15 (and MXCSR with it).
const SSE: u64 = 1 << 1;
/// AVX state (component 2): the upper halves of ymm0–15.
const AVX: u64 = 1 << 2;

/// XSAVE, FXSAVE and their restores; false for anything else, or an XSAVE whose area or
/// components are not known (the generic rule forgets as far as it may write).
pub fn step(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    match insn.mnemonic() {
        M::Fxsave | M::Fxsave64 => match address(&st.regs, insn, 0) {
            Some(a) => {
                save_legacy(st, a, X87 | SSE);
                // Reserved bytes FXSAVE may write; 464–511 are left to software.
                st.mem.forget(a + XMM + 256, 48);
                true
            }
            None => false,
        },
        M::Xsave | M::Xsave64 => xsave(st, insn, space),
        M::Fxrstor | M::Fxrstor64 => {
            restore(st, address(&st.regs, insn, 0), Some(SSE), Some(SSE), space);
            true
        }
        M::Xrstor | M::Xrstor64 => {
            let a = address(&st.regs, insn, 0);
            let in_use = a.map(|a| xstate_bv(st, a, space));
            restore(st, a, rfbm(st), in_use, space);
            true
        }
        _ => false,
    }
}

/// What an XSAVEC wrote, once the generic rule forgot its area: `header` is the XSTATE_BV
/// the recorder read after it. The components in use are written, the rest are not (their
/// bytes stay forgotten, which is sound), and XCOMP_BV is RFBM with bit 63 set.
pub fn xsavec_logged(st: &mut State, insn: &Instruction, header: u64) {
    if !matches!(insn.mnemonic(), M::Xsavec | M::Xsavec64) {
        return;
    }
    let (Some(a), Some(rfbm)) = (address(&st.regs, insn, 0), rfbm(st)) else {
        return;
    };
    st.mem.write(a + XSTATE_BV, &header.to_le_bytes());
    st.mem.write(a + XCOMP_BV, &(rfbm | 1 << 63).to_le_bytes());
    if header & rfbm & SSE != 0 {
        write_vectors(st, a + XMM, 0);
    }
    if header & rfbm & AVX != 0 {
        write_vectors(st, a + YMM_HI, 16);
    }
}

/// RFBM (XCR0 ∧ EDX:EAX) for the tracked components, if known: SSE is always enabled in
/// XCR0 by Linux; AVX is per the recording's XCR0 bound, which says what the kernel enabled.
fn rfbm(st: &State) -> Option<u64> {
    let requested = (st.regs.read(Register::EDX)? << 32) | st.regs.read(Register::EAX)?;
    let xcr0 = match st.cpu.xcr0 {
        Some(x) => x | X87 | SSE,
        None if requested & AVX == 0 => X87 | SSE,
        None => return None,
    };
    Some(requested & xcr0)
}

/// XSAVE (standard format): the x87 fields, MXCSR and xmm, the AVX component, and
/// XSTATE_BV; later components are forgotten; the rest of the header and bytes 416–511 are
/// not written (which is why glibc zeroes XCOMP_BV before its first XSAVE).
fn xsave(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    let (Some(a), Some(rfbm)) = (address(&st.regs, insn, 0), rfbm(st)) else {
        return false;
    };
    save_legacy(st, a, rfbm);
    if rfbm & AVX != 0 {
        write_vectors(st, a + YMM_HI, 16);
    }
    let bound = super::ops::extent(&st.regs, insn, 0, st.cpu.xcr0).unwrap_or(16 << 10);
    if bound > AVX_END {
        st.mem.forget(a + AVX_END, bound - AVX_END);
    }
    // XSTATE_BV: XINUSE for the requested components, the other bits as they were.
    let (old, known) = st.mem.read_bits(a + XSTATE_BV, space);
    let low = rfbm as u8;
    let in_use = if st.cpu.xsave_all_in_use { low } else { 0 };
    st.mem
        .write_bits(a + XSTATE_BV, (old & !low) | in_use, (known & !low) | in_use);
    if rfbm >> 8 != 0 {
        st.mem.forget(a + XSTATE_BV + 1, 7);
    }
    true
}

/// The legacy region's parts for the components in `rfbm`: the x87 fields (forgotten: x87
/// state is not tracked), MXCSR (with SSE or AVX) and xmm0–15.
fn save_legacy(st: &mut State, a: u64, rfbm: u64) {
    if rfbm & X87 != 0 {
        st.mem.forget(a, MXCSR);
        st.mem.forget(a + 32, XMM - 32);
    }
    // A CPU stores MXCSR (and MXCSR_MASK) with SSE or AVX; QEMU with SSE only.
    if rfbm & SSE != 0 {
        let m = st.mxcsr;
        m.store(st, a + MXCSR);
        st.mem.forget(a + MXCSR + 4, 4);
    } else if rfbm & AVX != 0 {
        st.mem.forget(a + MXCSR, 8);
    }
    if rfbm & SSE != 0 {
        write_vectors(st, a + XMM, 0);
    }
}

/// Bytes `from..from + 16` of each vector register into memory at `at`, 16 bytes apiece.
fn write_vectors(st: &mut State, at: u64, from: usize) {
    for i in 0..16 {
        let v = st.vec.get(i);
        for j in 0..16 {
            let addr = at + (16 * i + j) as u64;
            match known_byte(&v, from + j) {
                Some(b) => st.mem.write(addr, &[b]),
                None => st.mem.forget(addr, 1),
            }
        }
    }
}

fn known_byte(v: &Value, at: usize) -> Option<u8> {
    (v.known & 1 << at != 0).then(|| v.bytes[at])
}

/// XSTATE_BV's first byte as [`restore`] takes it: the known bits in the low byte, which
/// bits are unknown in the next.
fn xstate_bv(st: &State, a: u64, space: &AddressSpace) -> u64 {
    let (bits, known) = st.mem.read_bits(a + XSTATE_BV, space);
    u64::from(bits & known) | u64::from(!known) << 8
}

/// A restore from `area` of the components in `rfbm`; `in_use` holds XSTATE_BV's bits in its
/// low byte and which of them are unknown in the next (FXRSTOR: SSE, always loaded).
/// Anything unknown makes what it decides unknown.
fn restore(st: &mut State, area: Option<u64>, rfbm: Option<u64>, in_use: Option<u64>, space: &AddressSpace) {
    let (Some(a), Some(rfbm)) = (area, rfbm) else {
        st.vec.forget_all();
        st.mxcsr = Mxcsr::default();
        return;
    };
    // A CPU loads MXCSR with SSE or AVX, QEMU with SSE only.
    if rfbm & SSE != 0 {
        st.mxcsr = Mxcsr::load(st, a + MXCSR, space);
    } else if rfbm & AVX != 0 {
        st.mxcsr = Mxcsr::default();
    }
    for (component, at, from) in [(SSE, a + XMM, 0), (AVX, a + YMM_HI, 16)] {
        if rfbm & component == 0 {
            continue;
        }
        let loaded = match in_use {
            Some(bv) if bv & component << 8 != 0 => None,
            Some(bv) => Some(bv & component != 0),
            None => None,
        };
        for i in 0..16 {
            for j in 0..16 {
                let byte = st.mem.read_byte(at + (16 * i + j) as u64, space);
                let value = match loaded {
                    Some(true) => byte,
                    Some(false) => Some(0),
                    // Loaded or initialised: known where both give the same.
                    None => byte.filter(|&b| b == 0),
                };
                st.vec.set_lane(i, from + j, 1, value.map(u64::from));
            }
        }
    }
}

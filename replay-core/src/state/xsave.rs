//! What the XSAVE family and FXSAVE/FXRSTOR store of the tracked state (xmm, ymm's and zmm's
//! upper parts, zmm16–31, the opmasks, MXCSR) and what the restores load back (SDM vol. 1,
//! 10.5.1, 13.4–13.8, 13.10). glibc's lazy-binding trampoline (`_dl_runtime_resolve_xsave`,
//! `_xsavec`) saves and restores every vector register around the first call of each library
//! function; without this every vector register was unknown after such a call.
//!
//! Where each tracked component lives: MXCSR at 24 and xmm0–15 at 160 in the legacy region,
//! XSTATE_BV at 512, XCOMP_BV at 520; in the standard format each later component at the
//! offset CPUID leaf 0DH gives on the recording's CPU (AVX at 576 everywhere; opmask,
//! ZMM_Hi256 and Hi16_ZMM at 1088, 1152, 1664 on Intel's, at 832, 896, 1408 on AMD's Zen 4:
//! [`crate::recording::xsave_layout::XsaveLayout`]; where the recording does not say, those components'
//! bytes are unknown); in the compacted one the components XCOMP_BV names follow the header
//! in order from 576, each at the end of the one before (every size up to Hi16_ZMM is a
//! multiple of 64, so 64-byte alignment moves none of them).
//!
//! XSAVE writes each requested component whatever its state, and sets XSTATE_BV[i] to
//! XINUSE[i], which the processor alone knows: under QEMU it is always 1 (`Cpu::xsave_all_in_use`);
//! on a real CPU the step backend logs the header XSAVEC wrote (XSAVEC writes only the
//! components in use). XRSTOR loads a component whose XSTATE_BV bit is 1 and initialises
//! (zeroes) one whose bit is 0; with the bit unknown a byte is known only where both agree.

use iced_x86::{Instruction, Mnemonic as M, Register};

use super::mxcsr::Mxcsr;
use super::ops::address;
use super::{Cpu, State};
use crate::image::AddressSpace;

/// MXCSR in the legacy region, then MXCSR_MASK.
const MXCSR: u64 = 24;
/// xmm0–15 in the legacy region.
const XMM: u64 = 160;
/// XSTATE_BV, the first field of the XSAVE header.
const XSTATE_BV: u64 = 512;
/// XCOMP_BV.
const XCOMP_BV: u64 = 520;
/// The end of the header, where the compacted format's first component starts.
const HEADER_END: u64 = 576;
/// The end of the AVX component in the standard format.
const AVX_END: u64 = 832;

/// MXCSR_MASK as QEMU's XSAVE and FXSAVE write it.
const QEMU_MXCSR_MASK: u32 = 0xffff;
/// BNDREGS (component 3) in XSTATE_BV's first byte.
const BNDREGS: u8 = 1 << 3;

/// x87 state (component 0).
const X87: u64 = 1;
/// SSE state (component 1): xmm0–15 (and MXCSR with it).
const SSE: u64 = 1 << 1;
/// AVX state (component 2): the upper halves of ymm0–15.
const AVX: u64 = 1 << 2;

/// The components above the legacy region that hold tracked registers: the component and
/// which registers' bytes it holds in order (where it lies: [`super::ops::xsave_offset`]).
#[derive(Debug, Clone, Copy)]
enum Part {
    /// Bytes `from..from + len` of vector registers `regs`.
    Vectors {
        regs: (usize, usize),
        from: usize,
        len: usize,
    },
    /// The eight opmask registers, 8 bytes each.
    Opmasks,
}

const PARTS: [(u32, Part); 4] = [
    (
        2,
        Part::Vectors {
            regs: (0, 16),
            from: 16,
            len: 16,
        },
    ),
    (5, Part::Opmasks),
    (
        6,
        Part::Vectors {
            regs: (0, 16),
            from: 32,
            len: 32,
        },
    ),
    (
        7,
        Part::Vectors {
            regs: (16, 32),
            from: 0,
            len: 64,
        },
    ),
];

/// Where component `c` starts: in the standard format where the recording's CPU puts it, in
/// the compacted one (`xcomp_bv` with bit 63 set) after the sizes of the components before it
/// that `xcomp_bv` names.
fn offset(c: u32, cpu: &Cpu, xcomp_bv: u64) -> Option<u64> {
    if xcomp_bv >> 63 == 0 {
        return super::ops::xsave_offset(c, cpu);
    }
    let mut at = HEADER_END;
    for j in 2..c {
        if xcomp_bv & 1 << j != 0 {
            at += super::ops::xsave_size(j, cpu)?;
        }
    }
    Some(at)
}

/// Each byte of a component's part of the register state, with its offset in the component.
fn bytes(part: Part) -> Vec<(u64, Slot)> {
    match part {
        Part::Vectors { regs, from, len } => (regs.0..regs.1)
            .flat_map(|i| (0..len).map(move |j| ((((i - regs.0) * len) + j) as u64, Slot::Vector(i, from + j))))
            .collect(),
        Part::Opmasks => (0..8)
            .flat_map(|i| (0..8).map(move |j| ((i * 8 + j) as u64, Slot::Opmask(i, j))))
            .collect(),
    }
}

/// One byte of register state.
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// Byte `j` of vector register `i`.
    Vector(usize, usize),
    /// Byte `j` of opmask register `i`.
    Opmask(usize, usize),
}

impl Slot {
    fn get(self, st: &State) -> Option<u8> {
        match self {
            Slot::Vector(i, j) => st.vec.get(i).byte(j),
            Slot::Opmask(i, j) => {
                let (v, k) = st.vec.k.get(i);
                (k >> (8 * j) & 0xff == 0xff).then(|| (v >> (8 * j)) as u8)
            }
        }
    }

    fn set(self, st: &mut State, value: Option<u8>) {
        match self {
            Slot::Vector(i, j) => st.vec.set_lane(i, j, 1, value.map(u64::from)),
            Slot::Opmask(i, j) => {
                let (v, k) = st.vec.k.get(i);
                let m = 0xffu64 << (8 * j);
                let (v, k) = match value {
                    Some(b) => ((v & !m) | u64::from(b) << (8 * j), k | m),
                    None => (v & !m, k & !m),
                };
                st.vec.k.set(i, v, k);
            }
        }
    }
}

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
            // No header: the legacy region alone, as the standard form reads it.
            restore(st, address(&st.regs, insn, 0), Some(SSE), Some(SSE), Some(0), space);
            true
        }
        M::Xrstor | M::Xrstor64 => {
            let a = address(&st.regs, insn, 0);
            let in_use = a.map(|a| xstate_bv(st, a, space));
            let xcomp_bv = a.and_then(|a| st.mem.read_u64(a + XCOMP_BV, 8, space));
            restore(st, a, rfbm(st), in_use, xcomp_bv, space);
            true
        }
        _ => false,
    }
}

/// An XSAVEC's area before it runs: its address and the bytes it may write (each known or
/// not), so that what it leaves alone keeps them ([`xsavec_logged`]).
pub fn xsavec_area(st: &State, insn: &Instruction, space: &AddressSpace) -> Option<(u64, Vec<Option<u8>>)> {
    if !matches!(insn.mnemonic(), M::Xsavec | M::Xsavec64) {
        return None;
    }
    let a = address(&st.regs, insn, 0)?;
    let len = super::ops::extent(&st.regs, insn, 0, &st.cpu)?;
    Some((a, (0..len).map(|i| st.mem.read_byte(a + i, space)).collect()))
}

/// What an XSAVEC wrote, once the generic rule forgot its area: `header` is the XSTATE_BV
/// the recorder read after it, `before` the area before it ([`xsavec_area`]). XSAVEC writes
/// MXCSR with SSE requested, each requested component in use (XINUSE[i] = 1) at its compacted
/// offset, XSTATE_BV and XCOMP_BV (RFBM with bit 63 set), and nothing else (SDM vol. 1,
/// 13.10): every other byte of the area keeps what it held.
pub fn xsavec_logged(st: &mut State, insn: &Instruction, header: u64, before: Option<(u64, Vec<Option<u8>>)>) {
    if !matches!(insn.mnemonic(), M::Xsavec | M::Xsavec64) {
        return;
    }
    let (Some(a), Some(rfbm)) = (address(&st.regs, insn, 0), rfbm(st)) else {
        return;
    };
    let xcomp_bv = rfbm | 1 << 63;
    let written = header & rfbm;
    // What it left alone first: the bytes before it.
    if let Some((at, bytes)) = before.filter(|(at, _)| *at == a) {
        let mut touched: Vec<(u64, u64)> = vec![(XSTATE_BV, 16)];
        if rfbm & SSE != 0 {
            touched.push((MXCSR, 8));
        }
        if written & X87 != 0 {
            touched.extend([(0, MXCSR), (32, XMM - 32)]);
        }
        if written & SSE != 0 {
            touched.push((XMM, 256));
        }
        for c in 2..63u32 {
            if written & 1 << c != 0 {
                match (offset(c, &st.cpu, xcomp_bv), super::ops::xsave_size(c, &st.cpu)) {
                    (Some(o), Some(n)) => touched.push((o, n)),
                    // A component nobody sized: where it ends is not known.
                    _ => touched.push((HEADER_END, bytes.len() as u64)),
                }
            }
        }
        for (i, b) in bytes.iter().enumerate() {
            let i = i as u64;
            if touched.iter().any(|&(o, n)| i >= o && i < o + n) {
                continue;
            }
            match b {
                Some(b) => st.mem.write(at + i, &[*b]),
                None => st.mem.forget(at + i, 1),
            }
        }
    }
    st.mem.write(a + XSTATE_BV, &header.to_le_bytes());
    st.mem.write(a + XCOMP_BV, &xcomp_bv.to_le_bytes());
    // MXCSR (and MXCSR_MASK) with SSE requested, in use or not (SDM vol. 1, 13.10).
    if rfbm & SSE != 0 {
        let m = st.mxcsr;
        m.store(st, a + MXCSR);
    }
    if written & SSE != 0 {
        write_xmm(st, a + XMM);
    }
    for (c, part) in PARTS {
        if written & 1 << c != 0 {
            if let Some(at) = offset(c, &st.cpu, xcomp_bv) {
                write_part(st, a + at, part);
            }
        }
    }
}

/// RFBM (XCR0 ∧ EDX:EAX) for the tracked components, if known: SSE is always enabled in
/// XCR0 by Linux; the rest is per the recording's XCR0 bound, which says what the kernel
/// enabled.
fn rfbm(st: &State) -> Option<u64> {
    let requested = (st.regs.read(Register::EDX)? << 32) | st.regs.read(Register::EAX)?;
    let xcr0 = match st.cpu.xcr0 {
        Some(x) => x | X87 | SSE,
        None if requested & !(X87 | SSE) == 0 => X87 | SSE,
        None => return None,
    };
    Some(requested & xcr0)
}

/// XSAVE (standard format): the x87 fields, MXCSR and xmm, the tracked components above,
/// and XSTATE_BV; other components are forgotten; the rest of the header and bytes 416–511
/// are not written (which is why glibc zeroes XCOMP_BV before its first XSAVE).
fn xsave(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    let (Some(a), Some(rfbm)) = (address(&st.regs, insn, 0), rfbm(st)) else {
        return false;
    };
    save_legacy(st, a, rfbm);
    // Each requested component above the legacy region where it lies, and nothing else of
    // the area (SDM vol. 1, 13.7); where one's place or size is not known, everything up to
    // the area's end is forgotten.
    let places: Option<Vec<(u32, u64, u64)>> = (2..63u32)
        .filter(|c| rfbm & 1 << c != 0)
        .map(|c| {
            Some((
                c,
                super::ops::xsave_offset(c, &st.cpu)?,
                super::ops::xsave_size(c, &st.cpu)?,
            ))
        })
        .collect();
    match places {
        Some(places) => {
            for (c, at, size) in places {
                match PARTS.iter().find(|(p, _)| *p == c) {
                    Some(&(_, part)) => write_part(st, a + at, part),
                    None => st.mem.forget(a + at, size),
                }
            }
        }
        None => {
            let bound = super::ops::extent(&st.regs, insn, 0, &st.cpu).unwrap_or(16 << 10);
            if bound > AVX_END {
                st.mem.forget(a + AVX_END, bound - AVX_END);
            }
            for (c, part) in PARTS {
                if let (true, Some(at)) = (rfbm & 1 << c != 0, super::ops::xsave_offset(c, &st.cpu)) {
                    write_part(st, a + at, part);
                }
            }
        }
    }
    // XSTATE_BV: XINUSE for the requested components, the other bits as they were. QEMU
    // marks each in use but BNDREGS, which it marks only while MPX is (which is not
    // followed here): that bit is unknown.
    let (old, known) = st.mem.read_bits(a + XSTATE_BV, space);
    let low = rfbm as u8;
    let in_use = if st.cpu.xsave_all_in_use { low & !BNDREGS } else { 0 };
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
    // A CPU stores MXCSR (and MXCSR_MASK) with SSE or AVX; QEMU with SSE only, and its
    // MXCSR_MASK is always FFFFH (a CPU's is its own).
    if rfbm & SSE != 0 {
        let m = st.mxcsr;
        m.store(st, a + MXCSR);
        match st.cpu.xsave_all_in_use {
            true => st.mem.write(a + MXCSR + 4, &QEMU_MXCSR_MASK.to_le_bytes()),
            false => st.mem.forget(a + MXCSR + 4, 4),
        }
    } else if rfbm & AVX != 0 {
        st.mem.forget(a + MXCSR, 8);
    }
    if rfbm & SSE != 0 {
        write_xmm(st, a + XMM);
    }
}

/// xmm0–15 into the legacy region at `at`.
fn write_xmm(st: &mut State, at: u64) {
    let part = Part::Vectors {
        regs: (0, 16),
        from: 0,
        len: 16,
    };
    write_part(st, at, part);
}

/// A component's registers into memory at `at`, byte by byte (unknown bytes forgotten).
fn write_part(st: &mut State, at: u64, part: Part) {
    for (off, slot) in bytes(part) {
        match slot.get(st) {
            Some(b) => st.mem.write(at + off, &[b]),
            None => st.mem.forget(at + off, 1),
        }
    }
}

/// XSTATE_BV's first byte as [`restore`] takes it: the known bits in the low byte, which
/// bits are unknown in the next.
fn xstate_bv(st: &State, a: u64, space: &AddressSpace) -> u64 {
    let (bits, known) = st.mem.read_bits(a + XSTATE_BV, space);
    u64::from(bits & known) | u64::from(!known) << 8
}

/// `magic1` of a signal frame's FPU area (`FP_XSTATE_MAGIC1`, at byte 464): the area holds
/// XSAVE state, whose components the 8 bytes at 472 name.
const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;

/// The vector state a signal return loads from the frame's FPU area at `fpstate` (Linux's
/// `restore_fpregs_from_user`): no area resets it to its initial state; an area with the
/// XSAVE magic is loaded as XRSTOR (standard form) loads the components it names, another as
/// FXRSTOR does. Anything unknown leaves what it decides unknown.
pub fn restore_frame(st: &mut State, fpstate: Option<u64>, space: &AddressSpace) {
    match fpstate {
        Some(0) => {
            for i in 0..super::vector::COUNT {
                st.vec.forget(i);
                for at in (0..super::vector::WIDTH).step_by(8) {
                    st.vec.set_lane(i, at, 8, Some(0));
                }
            }
            st.vec.k.forget_all();
            for i in 0..8 {
                st.vec.k.set(i, 0, u64::MAX);
            }
            st.mxcsr = Mxcsr::known(0x1f80);
        }
        Some(a) => {
            let magic = st.mem.read_u64(a + 464, 4, space);
            // What the area holds decides everything loaded: forget first.
            st.vec.forget_all();
            st.mxcsr = Mxcsr::default();
            match magic {
                Some(m) if m == u64::from(FP_XSTATE_MAGIC1) => {
                    let xfeatures = st.mem.read_u64(a + 472, 8, space);
                    let rfbm = xfeatures.map(|x| x & st.cpu.xcr0.unwrap_or(u64::MAX) | X87 | SSE);
                    let in_use = xstate_bv(st, a, space);
                    restore(st, Some(a), rfbm, Some(in_use), Some(0), space);
                }
                Some(_) => restore(st, Some(a), Some(SSE), Some(SSE), Some(0), space),
                None => {}
            }
        }
        None => {
            st.vec.forget_all();
            st.mxcsr = Mxcsr::default();
        }
    }
}

/// MXCSR at a restore (SDM vol. 1, 13.8): the standard form loads it with SSE or AVX
/// requested (QEMU with SSE only, so AVX alone leaves it unknown); the compacted form with SSE
/// requested loads it if XSTATE_BV says SSE is in use, else sets 1F80H, and without SSE leaves
/// it. Whatever is unknown of that makes it unknown.
fn restore_mxcsr(
    st: &mut State,
    a: u64,
    rfbm: u64,
    compacted: Option<bool>,
    in_use: Option<u64>,
    space: &AddressSpace,
) {
    let sse_in_use = in_use.and_then(|bv| (bv & SSE << 8 == 0).then_some(bv & SSE != 0));
    st.mxcsr = match (rfbm & SSE != 0, rfbm & AVX != 0, compacted, sse_in_use) {
        (true, _, Some(false), _) | (true, _, Some(true), Some(true)) => Mxcsr::load(st, a + MXCSR, space),
        (true, _, Some(true), Some(false)) => Mxcsr::known(0x1f80),
        (false, _, Some(true), _) | (false, false, _, _) => st.mxcsr,
        _ => Mxcsr::default(),
    };
}

/// A restore from `area` of the components in `rfbm`; `in_use` holds XSTATE_BV's bits in its
/// low byte and which of them are unknown in the next (FXRSTOR: SSE, always loaded); `xcomp_bv`
/// says which form (FXRSTOR: the standard one).
/// Anything unknown makes what it decides unknown: the area, RFBM, a component's XSTATE_BV
/// bit, or (for a component after AVX) whether the area is compacted and which components
/// come before it.
fn restore(
    st: &mut State,
    area: Option<u64>,
    rfbm: Option<u64>,
    in_use: Option<u64>,
    xcomp_bv: Option<u64>,
    space: &AddressSpace,
) {
    let (Some(a), Some(rfbm)) = (area, rfbm) else {
        st.vec.forget_all();
        st.mxcsr = Mxcsr::default();
        return;
    };
    restore_mxcsr(st, a, rfbm, xcomp_bv.map(|x| x >> 63 != 0), in_use, space);
    let xmm = (
        1,
        Part::Vectors {
            regs: (0, 16),
            from: 0,
            len: 16,
        },
    );
    for (c, part) in std::iter::once(xmm).chain(PARTS) {
        if rfbm & 1 << c == 0 {
            continue;
        }
        let loaded = match in_use {
            Some(bv) if bv & 1 << (c + 8) != 0 => None,
            Some(bv) => Some(bv & 1 << c != 0),
            None => None,
        };
        // SSE lives in the legacy region and AVX first after the header in both formats.
        let at = match (c, xcomp_bv) {
            (1, _) => Some(XMM),
            (2, _) => Some(HEADER_END),
            (_, Some(x)) => offset(c, &st.cpu, x),
            (_, None) => None,
        };
        for (off, slot) in bytes(part) {
            let byte = at.and_then(|at| st.mem.read_byte(a + at + off, space));
            let value = match loaded {
                Some(true) => byte,
                Some(false) => Some(0),
                // Loaded or initialised: known where both give the same.
                None => byte.filter(|&b| b == 0),
            };
            slot.set(st, value);
        }
    }
}

//! MXCSR, bit by bit known or not: its control bits (rounding mode, DAZ, FTZ) decide what
//! SSE arithmetic returns, its six exception flags are sticky status the arithmetic sets.
//! Linux and QEMU start a program with 0x1f80 (everything masked, round to nearest); the
//! control bits change only through `ldmxcsr`, the XRSTOR family and `fxrstor` (and the
//! kernel at signals), so a recording from the entry point knows them for good, and scalar
//! arithmetic can be computed as the host computes it (SDM vol. 1, 10.2.3).

use iced_x86::{Instruction, Mnemonic as M, OpKind, Register};

use super::ops::address;
use super::State;
use crate::image::AddressSpace;

/// The exception flags (IE, DE, ZE, OE, UE, PE).
pub const FLAGS: u32 = 0x3f;
/// Precision: a result was rounded.
pub const PE: u32 = 0x20;
/// Invalid operation.
pub const IE: u32 = 0x01;
/// DAZ, the rounding control and FTZ: what must be 0 for results to be the host's.
const ROUNDING: u32 = 0x40 | 0x6000 | 0x8000;

/// MXCSR's bits and which are known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mxcsr {
    value: u32,
    known: u32,
}

impl Mxcsr {
    /// Whether this knows every bit `other` knows, with the same value.
    pub fn covers(&self, other: &Mxcsr) -> bool {
        other.known & !self.known == 0 && (self.value ^ other.value) & other.known == 0
    }

    /// All bits known.
    pub fn known(value: u32) -> Self {
        Self { value, known: u32::MAX }
    }

    /// The bits (those not known are meaningless).
    pub fn value(&self) -> u32 {
        self.value
    }

    /// Which bits are known.
    pub fn known_bits(&self) -> u32 {
        self.known
    }

    /// Whether arithmetic rounds to nearest with neither DAZ nor FTZ, as Rust's does.
    pub fn rounds_as_host(&self) -> bool {
        self.known & ROUNDING == ROUNDING && self.value & ROUNDING == 0
    }

    /// Flags an instruction raised for certain.
    pub fn raise(&mut self, flags: u32) {
        self.value |= flags;
        self.known |= flags;
    }

    /// Flags an instruction may have raised: unknown unless known set already.
    pub fn maybe(&mut self, flags: u32) {
        self.known &= !(flags & !(self.value & self.known));
    }

    /// Backwards over an instruction that may have raised `flags`: those known set are
    /// unknown before it.
    pub fn unraise(&mut self, flags: u32) {
        self.known &= !(flags & self.value & self.known);
    }

    /// The flags an instruction raised if they are known (`Some`), else every flag it may
    /// have raised is unknown unless set already.
    pub fn raised(&mut self, flags: Option<u32>) {
        match flags {
            Some(f) => self.raise(f),
            None => self.maybe(FLAGS),
        }
    }

    /// Learns what `other` knows and this does not.
    pub fn absorb(&mut self, other: Mxcsr) {
        let learn = other.known & !self.known;
        self.value = (self.value & !learn) | (other.value & learn);
        self.known |= learn;
    }

    /// The value, if every bit is known.
    pub fn get(&self) -> Option<u32> {
        (self.known == u32::MAX).then_some(self.value)
    }

    /// Stores it at `addr`, bit by bit known.
    pub(super) fn store(&self, st: &mut State, addr: u64) {
        for (i, b) in self.value.to_le_bytes().into_iter().enumerate() {
            let at = addr + i as u64;
            let known = (self.known >> (8 * i)) as u8;
            if known == 0xff {
                st.mem.write(at, &[b]);
            } else {
                st.mem.write_bits(at, b, known);
            }
        }
    }

    /// Loads it from `addr`: the bits known there.
    pub(super) fn load(st: &State, addr: u64, space: &AddressSpace) -> Mxcsr {
        let mut m = Mxcsr::default();
        for i in 0..4 {
            let (b, known) = st.mem.read_bits(addr + i, space);
            m.value |= u32::from(b & known) << (8 * i);
            m.known |= u32::from(known) << (8 * i);
        }
        m
    }
}

/// `ldmxcsr` and `stmxcsr`; false for anything else.
pub fn step(st: &mut State, insn: &Instruction, space: &AddressSpace) -> bool {
    match insn.mnemonic() {
        M::Ldmxcsr | M::Vldmxcsr => {
            st.mxcsr = match address(&st.regs, insn, 0) {
                Some(a) => Mxcsr::load(st, a, space),
                None => Mxcsr::default(),
            };
        }
        M::Stmxcsr | M::Vstmxcsr => match address(&st.regs, insn, 0) {
            Some(a) => {
                let m = st.mxcsr;
                m.store(st, a);
            }
            None => {
                super::why::insist(super::why::Cause::UnknownAddress(insn.mnemonic()));
                st.mem.forget_all();
            }
        },
        _ => return false,
    }
    true
}

/// What an instruction nobody modelled does to MXCSR, once the generic rule forgot what it
/// writes. `regs` are the registers before it. The save instructions that write MXCSR
/// wherever they write the SSE state (XSAVE, FXSAVE; not the optimised XSAVEOPT, XSAVEC,
/// XSAVES) store it at offset 24 of their area; the restores load it from there (SDM vol. 1,
/// 13.7, 13.8, 10.5.1). Any other instruction with a vector operand may raise flags.
pub fn after_generic(st: &mut State, before: &super::reg::RegFile, insn: &Instruction, space: &AddressSpace) {
    let m = insn.mnemonic();
    let saves = matches!(m, M::Xsave | M::Xsave64 | M::Fxsave | M::Fxsave64);
    let restores = matches!(
        m,
        M::Xrstor | M::Xrstor64 | M::Xrstors | M::Xrstors64 | M::Fxrstor | M::Fxrstor64
    );
    if saves || restores {
        let fx = matches!(m, M::Fxsave | M::Fxsave64 | M::Fxrstor | M::Fxrstor64);
        let area = address(before, insn, 0);
        // RFBM[1] is EAX bit 1 (Linux always enables SSE in XCR0); with bit 1 clear and bit 2
        // (AVX) set, it depends on XCR0, which only a bound is known of.
        let touches = match (fx, before.read(Register::EAX)) {
            (true, _) => Some(true),
            (false, Some(a)) if a & 2 != 0 => Some(true),
            (false, Some(a)) if a & 4 == 0 => Some(false),
            (false, Some(_)) if st.cpu.xcr0.is_some_and(|x| x & 4 == 0) => Some(false),
            _ => None,
        };
        match (touches, area) {
            (Some(false), _) => {}
            (Some(true), Some(a)) if saves => {
                let m = st.mxcsr;
                m.store(st, a + 24);
            }
            (Some(true), Some(a)) => st.mxcsr = Mxcsr::load(st, a + 24, space),
            _ if saves => {}
            _ => st.mxcsr = Mxcsr::default(),
        }
        return;
    }
    let vector = (0..insn.op_count()).any(|op| {
        insn.op_kind(op) == OpKind::Register && {
            let r = insn.op_register(op);
            r.is_xmm() || r.is_ymm() || r.is_zmm()
        }
    });
    if (vector || insn.memory_size().is_packed()) && !integer(insn) {
        st.mxcsr.maybe(FLAGS);
    }
}

/// Whether a vector instruction works on integers only (its elements are integers and it
/// converts nothing): those raise no SIMD floating-point exception (SDM vol. 1, 11.5.2).
fn integer(insn: &Instruction) -> bool {
    use iced_x86::MemorySize as S;
    let converts = format!("{:?}", insn.mnemonic()).to_ascii_lowercase().contains("cvt");
    !converts
        && matches!(
            insn.memory_size().element_type(),
            S::UInt8 | S::Int8 | S::UInt16 | S::Int16 | S::UInt32 | S::Int32 | S::UInt64 | S::Int64 | S::UInt128
        )
}

/// Backwards over an instruction: a flag set after it may have been raised by it, so it is
/// unknown before; a flag clear after it was clear before (the flags are sticky: only a
/// load of MXCSR clears them). A load of MXCSR leaves nothing known before it.
pub fn backward(st: &mut State, insn: &Instruction) {
    match insn.mnemonic() {
        M::Ldmxcsr | M::Vldmxcsr | M::Xrstor | M::Xrstor64 | M::Xrstors | M::Xrstors64 | M::Fxrstor | M::Fxrstor64 => {
            st.mxcsr = Mxcsr::default()
        }
        _ => st.mxcsr.unraise(FLAGS),
    }
}

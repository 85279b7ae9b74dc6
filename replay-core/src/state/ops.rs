//! Operand access shared by the forward and backward semantics: addresses, widths, values.

use iced_x86::{Instruction, OpAccess, OpKind, Register};

use super::reg::{mask, Reg, RegFile};
use super::{Cpu, State};
use crate::image::AddressSpace;

/// A register or a segment base for iced's address computation: ES, CS, SS and DS have base 0
/// in 64-bit mode; FS and GS have their bases.
pub fn address_register(regs: &RegFile, r: Register, with_segments: bool) -> Option<u64> {
    match r {
        Register::ES | Register::CS | Register::SS | Register::DS => Some(0),
        Register::FS if with_segments => regs.get(Reg::FsBase),
        Register::GS if with_segments => regs.get(Reg::GsBase),
        Register::FS | Register::GS => Some(0),
        r => regs.read(r),
    }
}

/// The address of memory operand `op`, if the registers it uses are known.
#[inline]
pub fn address(regs: &RegFile, insn: &Instruction, op: u32) -> Option<u64> {
    match plain_address(regs, insn, op) {
        Plain::Address(a) => a,
        Plain::Other => insn.virtual_address(op, 0, |r, _, _| address_register(regs, r, true)),
    }
}

/// The effective address `lea` computes (no segment base).
#[inline]
pub fn effective_address(regs: &RegFile, insn: &Instruction, op: u32) -> Option<u64> {
    match plain_address(regs, insn, op) {
        Plain::Address(a) => a,
        Plain::Other => insn.virtual_address(op, 0, |r, _, _| address_register(regs, r, false)),
    }
}

/// An address worked out here, or a form left to iced.
enum Plain {
    Address(Option<u64>),
    Other,
}

/// The address of an explicit memory operand whose base is `rip` or a 64-bit register and
/// whose index, if any, is a 64-bit register: nearly every operand, computed as iced's
/// `virtual_address` does (base, then index, each read in that order so that the first
/// unknown one is the cause noted; DS and SS have base 0) without its general path, which
/// was 4 % of the background fill. Every other form (FS or GS, 32-bit addresses, VSIB,
/// string operands, instructions that ignore their index) is [`Plain::Other`].
#[inline]
fn plain_address(regs: &RegFile, insn: &Instruction, op: u32) -> Plain {
    let gpr64 = |r: Register| (Register::RAX..=Register::R15).contains(&r);
    let (base, index) = (insn.memory_base(), insn.memory_index());
    if insn.op_kind(op) != OpKind::Memory
        || !(base == Register::RIP || gpr64(base))
        || !(index == Register::None || gpr64(index))
    {
        return Plain::Other;
    }
    // Those whose index iced leaves out, and a segment base, which a few instructions
    // ignore (`lea`, MPX's): iced's path.
    if (index != Register::None && ignores_index(insn)) || matches!(insn.memory_segment(), Register::FS | Register::GS)
    {
        return Plain::Other;
    }
    let reg = |r: Register| regs.get(Reg::Gpr((r as u32 - Register::RAX as u32) as u8));
    let address = (|| {
        let mut a = insn.memory_displacement64();
        if base != Register::RIP {
            a = a.wrapping_add(reg(base)?);
        }
        if index != Register::None {
            a = a.wrapping_add(reg(index)?.wrapping_mul(u64::from(insn.memory_index_scale())));
        }
        Some(a)
    })();
    Plain::Address(address)
}

/// Whether `insn` is one whose memory operand's index iced leaves out of its address (MPX's
/// BNDLDX and BNDSTX, AMX's tile strides).
pub fn ignores_index(insn: &Instruction) -> bool {
    use iced_x86::Code as C;
    matches!(
        insn.code(),
        C::Bndldx_bnd_mib
            | C::Bndstx_mib_bnd
            | C::VEX_Tileloaddt1_tmm_sibmem
            | C::VEX_Tilestored_sibmem_tmm
            | C::VEX_Tileloadd_tmm_sibmem
    )
}

/// Whether an operand kind is an immediate.
pub fn is_immediate(kind: OpKind) -> bool {
    matches!(
        kind,
        OpKind::Immediate8
            | OpKind::Immediate8_2nd
            | OpKind::Immediate16
            | OpKind::Immediate32
            | OpKind::Immediate64
            | OpKind::Immediate8to16
            | OpKind::Immediate8to32
            | OpKind::Immediate8to64
            | OpKind::Immediate32to64
    )
}

/// Whether an operand kind is memory (explicit or a string instruction's implicit one).
pub fn is_memory(kind: OpKind) -> bool {
    matches!(
        kind,
        OpKind::Memory
            | OpKind::MemorySegSI
            | OpKind::MemorySegESI
            | OpKind::MemorySegRSI
            | OpKind::MemorySegDI
            | OpKind::MemorySegEDI
            | OpKind::MemorySegRDI
            | OpKind::MemoryESDI
            | OpKind::MemoryESEDI
            | OpKind::MemoryESRDI
    )
}

/// Width of operand `op` in bytes (immediates take the width of the destination).
pub fn width(insn: &Instruction, op: u32) -> u32 {
    match insn.op_kind(op) {
        OpKind::Register => insn.op_register(op).size() as u32,
        k if is_memory(k) => insn.memory_size().size() as u32,
        _ if op > 0 => width(insn, 0),
        _ => 8,
    }
}

/// Operand `op`'s value, zero-extended from its width, if known.
pub fn read(st: &State, insn: &Instruction, op: u32, space: &AddressSpace) -> Option<u64> {
    match insn.op_kind(op) {
        OpKind::Register => st.regs.read(insn.op_register(op)),
        k if is_memory(k) => {
            let a = address(&st.regs, insn, op)?;
            let w = width(insn, op);
            if w == 0 || w > 8 {
                return None;
            }
            st.mem.read_u64(a, w, space)
        }
        k if is_immediate(k) => Some(insn.immediate(op) & mask(width(insn, op))),
        _ => None,
    }
}

/// Writes operand `op` (a register or memory) with a value or unknown. A store to an address
/// nobody knows may have hit any byte: all memory becomes unknown.
pub fn write(st: &mut State, insn: &Instruction, op: u32, value: Option<u64>) {
    match insn.op_kind(op) {
        OpKind::Register => st.regs.write(insn.op_register(op), value),
        k if is_memory(k) => {
            let w = width(insn, op);
            match address(&st.regs, insn, op) {
                Some(a) if (1..=8).contains(&w) => st.mem.store(a, w, value),
                Some(a) if w > 0 => st.mem.forget(a, u64::from(w)),
                _ => {
                    super::why::insist(super::why::Cause::UnknownAddress(insn.mnemonic()));
                    st.mem.forget_all()
                }
            }
        }
        _ => {}
    }
}

/// Sign-extends the low `bytes` bytes of `v`.
pub fn sign_extend(v: u64, bytes: u32) -> u64 {
    if bytes >= 8 {
        return v;
    }
    let shift = 64 - bytes * 8;
    (((v << shift) as i64) >> shift) as u64
}

/// Whether an access writes.
pub fn writes(access: OpAccess) -> bool {
    matches!(
        access,
        OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
    )
}

/// The size of each XSAVE state component above the legacy area and header, for a recording
/// that does not say what its CPU enumerates (CPUID leaf 0DH; these are Intel's, and AMD's
/// Zen 4 enumerates the same sizes: only the offsets differ).
const XSAVE_SIZE: [(u32, u64); 9] = [
    (2, 256),
    (3, 64),
    (4, 64),
    (5, 64),
    (6, 512),
    (7, 1024),
    (9, 8),
    (17, 64),
    (18, 8192),
];

/// The size of XSAVE state component `c` (2 and up) on the recording's CPU, if known.
pub fn xsave_size(c: u32, cpu: &Cpu) -> Option<u64> {
    match cpu.xsave {
        Some(layout) => layout.size(c),
        None => XSAVE_SIZE.iter().find(|(i, _)| *i == c).map(|&(_, s)| s),
    }
}

/// Where component `c` starts in XSAVE's standard format on the recording's CPU, if known:
/// AVX (2) right after the header on every processor, the later ones where CPUID leaf 0DH
/// put them ([`crate::recording::xsave_layout::XsaveLayout`]).
pub fn xsave_offset(c: u32, cpu: &Cpu) -> Option<u64> {
    match c {
        2 => Some(576),
        _ => cpu.xsave?.offset(c),
    }
}

/// Where component `c` ends in the standard format, if known.
fn xsave_end(c: u32, cpu: &Cpu) -> Option<u64> {
    match c {
        0 | 1 => Some(512),
        _ => Some(xsave_offset(c, cpu)? + xsave_size(c, cpu)?),
    }
}

/// How far an XSAVE-family instruction may write: the end of the last requested component
/// (EDX:EAX is the request mask), at least the legacy area and header (576 bytes); 16 KiB,
/// past every component's end, when the mask is unknown or names a component whose place is
/// not known. Only components XCR0 enables are written (with XCR0 unknown, every requested
/// one). XSAVEC and XSAVES write the compacted format: the header, then each such component at
/// 64-byte alignment at most.
fn xsave_extent(regs: &RegFile, compacted: bool, cpu: &Cpu) -> u64 {
    let mask = match (regs.read(Register::EAX), regs.read(Register::EDX)) {
        (Some(a), Some(d)) => (d << 32) | a,
        _ => return 16 << 10,
    };
    // Both formats write only the components in RFBM = XCR0 AND EDX:EAX (SDM vol. 1,
    // 13.7 and 13.10); a bound on XCR0 bounds RFBM.
    let mask = mask & cpu.xcr0.unwrap_or(u64::MAX);
    let mut end: u64 = 576;
    for bit in 0..64 {
        if mask & (1 << bit) == 0 || bit < 2 && compacted {
            continue;
        }
        match (compacted, xsave_size(bit, cpu), xsave_end(bit, cpu)) {
            (true, Some(size), _) => end = end.next_multiple_of(64) + size,
            (false, _, Some(e)) => end = end.max(e),
            // A component the recording's CPU does not have in XSAVE's user format: XCR0
            // cannot enable it, so RFBM leaves it out.
            _ if bit >= 2 && cpu.xsave.is_some_and(|l| l.offset(bit).is_none()) => {}
            _ => return 16 << 10,
        }
    }
    end
}

/// Bytes an access of `size` by `insn` may touch, if bounded: its size, or for the XSAVE family
/// (whose area iced cannot size: it depends on the requested components) the bound above;
/// XRSTOR reads an area in either format (its header says which), so the larger bound. Any
/// other access of unknown size is unbounded.
pub fn extent(regs: &RegFile, insn: &Instruction, size: usize, cpu: &Cpu) -> Option<u64> {
    use iced_x86::Mnemonic as M;
    match (size, insn.mnemonic()) {
        (0, M::Xsave | M::Xsave64 | M::Xsaveopt | M::Xsaveopt64) => Some(xsave_extent(regs, false, cpu)),
        (0, M::Xsavec | M::Xsavec64 | M::Xsaves | M::Xsaves64) => Some(xsave_extent(regs, true, cpu)),
        (0, M::Xrstor | M::Xrstor64 | M::Xrstors | M::Xrstors64) => {
            Some(xsave_extent(regs, false, cpu).max(xsave_extent(regs, true, cpu)))
        }
        (0, _) => None,
        (n, _) => Some(n as u64),
    }
}

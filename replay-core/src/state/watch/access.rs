//! Which bytes of memory an instruction reads and writes, from the registers before it and
//! after it: what a data breakpoint (DR7's R/W bits, SDM vol. 3, 18.2.4) compares with the
//! watched bytes. The explicit and implicit operands are iced-x86's `used_memory` (a `push`
//! writes below `rsp`, a `ret` reads at it); a REP string instruction, one position of the
//! history for all its iterations, touches `rcx` elements from `rdi` (and `rsi`), up or down
//! as DF says, and how many it ran is the count before it less the count after (REPE/REPNE
//! stop early).

use iced_x86::{Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind};

use super::super::flags;
use super::super::ops::{address_register, extent, is_memory, writes};
use super::super::reg::{RCX, RDI, RSI};
use super::super::State;

/// Bytes of memory one instruction touches one way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The first byte.
    pub address: u64,
    /// How many bytes.
    pub len: u64,
    /// Whether it writes them (else it reads them).
    pub write: bool,
}

impl Access {
    /// Whether it touches any of the `len` bytes at `address`.
    pub fn overlaps(&self, address: u64, len: u64) -> bool {
        self.address < address.saturating_add(len) && address < self.address.saturating_add(self.len)
    }
}

/// An address or a size of an access that the registers before the instruction do not tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownAddress;

/// Pushes on `out` (which the caller clears) what `insn` writes, and what it reads if `reads`, given the state
/// `before` it and, for a REP string instruction, the state `after` it; an error if the
/// address or size of one of those is unknown.
pub fn accesses(
    before: &State,
    after: &State,
    insn: &Instruction,
    reads: bool,
    factory: &mut InstructionInfoFactory,
    out: &mut Vec<Access>,
) -> Result<(), UnknownAddress> {
    if repeated(insn) {
        rep_string(before, after, insn, out)?;
        if !reads {
            out.retain(|a| a.write);
        }
        return Ok(());
    }
    let info = factory.info(insn);
    for m in info.used_memory() {
        let write = match m.access() {
            OpAccess::NoMemAccess | OpAccess::None => continue,
            a => writes(a),
        };
        let read = reads
            && matches!(
                m.access(),
                OpAccess::Read | OpAccess::CondRead | OpAccess::ReadWrite | OpAccess::ReadCondWrite
            );
        if !read && !write {
            continue;
        }
        let len = extent(&before.regs, insn, m.memory_size().size(), &before.cpu).ok_or(UnknownAddress)?;
        let address = m
            .virtual_address(0, |r, _, _| address_register(&before.regs, r, true))
            .ok_or(UnknownAddress)?;
        if read {
            out.push(Access {
                address,
                len,
                write: false,
            });
        }
        if write {
            out.push(Access { address, len, write });
        }
    }
    Ok(())
}

/// Whether `insn` is a string instruction with a REP or REPNE prefix (`movsd` is also an SSE
/// move, whose operands are no string operands).
pub(super) fn repeated(insn: &Instruction) -> bool {
    (insn.has_rep_prefix() || insn.has_repne_prefix())
        && (0..insn.op_count()).any(|i| {
            let k = insn.op_kind(i);
            is_memory(k) && k != OpKind::Memory
        })
}

/// A REP string instruction's accesses: `n` elements from `rdi` (written by `stos` and `movs`,
/// read by `scas` and `cmps`) and from `rsi` (read by `movs`, `cmps` and `lods`).
fn rep_string(before: &State, after: &State, insn: &Instruction, out: &mut Vec<Access>) -> Result<(), UnknownAddress> {
    use Mnemonic as M;
    let size: u64 = match insn.mnemonic() {
        M::Movsb | M::Stosb | M::Scasb | M::Cmpsb | M::Lodsb | M::Insb | M::Outsb => 1,
        M::Movsw | M::Stosw | M::Scasw | M::Cmpsw | M::Lodsw | M::Insw | M::Outsw => 2,
        M::Movsd | M::Stosd | M::Scasd | M::Cmpsd | M::Lodsd | M::Insd | M::Outsd => 4,
        _ => 8,
    };
    let (Some(n0), Some(n1)) = (before.regs.get(RCX), after.regs.get(RCX)) else {
        return Err(UnknownAddress);
    };
    let n = n0.wrapping_sub(n1);
    if n == 0 {
        return Ok(());
    }
    let up = match before.flags.bit(flags::DF) {
        Some(df) => !df,
        None => return Err(UnknownAddress),
    };
    let span = |start: u64| {
        let len = n.saturating_mul(size);
        match up {
            true => (start, len),
            false => (start.wrapping_sub(len - size), len),
        }
    };
    let (dst_write, dst_read, src_read) = match insn.mnemonic() {
        M::Stosb | M::Stosw | M::Stosd | M::Stosq => (true, false, false),
        M::Movsb | M::Movsw | M::Movsd | M::Movsq => (true, false, true),
        M::Scasb | M::Scasw | M::Scasd | M::Scasq => (false, true, false),
        M::Cmpsb | M::Cmpsw | M::Cmpsd | M::Cmpsq => (false, true, true),
        M::Lodsb | M::Lodsw | M::Lodsd | M::Lodsq => (false, false, true),
        _ => return Err(UnknownAddress),
    };
    if dst_write || dst_read {
        let (address, len) = span(before.regs.get(RDI).ok_or(UnknownAddress)?);
        if src_read {
            let (a, l) = span(before.regs.get(RSI).ok_or(UnknownAddress)?);
            out.push(Access {
                address: a,
                len: l,
                write: false,
            });
        }
        out.push(Access {
            address,
            len,
            write: dst_write,
        });
    } else if src_read {
        let (address, len) = span(before.regs.get(RSI).ok_or(UnknownAddress)?);
        out.push(Access {
            address,
            len,
            write: false,
        });
    }
    Ok(())
}

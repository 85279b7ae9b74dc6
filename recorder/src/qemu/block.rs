//! Translation blocks as the plugin sees them at translation time, classified once so that
//! executing one costs a lookup: the instructions (address, length, class) and what the
//! retirement engine needs to know about the last one.

use iced_x86::{Decoder, DecoderOptions, Instruction, InstructionInfoFactory, Mnemonic, OpKind};
use rtit_replay_core::cofi::{classify, Cofi};

use crate::model::Edge;

/// One instruction of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockInsn {
    /// Its address.
    pub ip: u64,
    /// Its length.
    pub len: u8,
    /// Its class (table 2).
    pub cofi: Cofi,
}

impl BlockInsn {
    /// The address after it.
    pub const fn nlip(&self) -> u64 {
        self.ip.wrapping_add(self.len as u64)
    }
}

/// Which memory accesses of the last instruction the plugin counts to learn whether it
/// completed: its writes if it writes (they come last in a read-modify-write), else its reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// It does not access memory.
    None,
    /// Count reads.
    Read,
    /// Count writes.
    Write,
}

/// A translation block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Its instructions in order; only the last can be a branch.
    pub insns: Box<[BlockInsn]>,
    /// The last instruction's target when the instruction encodes it (direct branches).
    pub target: Option<u64>,
    /// The last instruction is a REP/REPE/REPNE string instruction, which QEMU runs one
    /// iteration per block execution.
    pub rep: bool,
    /// The last instruction's memory accesses to count.
    pub access: Access,
    /// The last instruction can fault without accessing memory (DIV, privileged ones).
    pub faults_without_memory: bool,
    /// How many instructions from the first are not branches (QEMU ends a block at a
    /// branch, so all but the last, unless an instruction it does not end blocks at is one):
    /// a run of them retires at once ([`crate::model::UnitModel::retire_straight`]).
    pub straight: usize,
}

/// What the engine needs of a block at every execution, kept in one small record per block
/// (a table of these is read at each executed block; the instructions themselves, behind a
/// pointer of their own, only where something unusual happened).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Its first address.
    pub start: u64,
    /// Its last instruction.
    pub last: BlockInsn,
    /// See [`Block::target`].
    pub target: Option<u64>,
    /// How many instructions it keeps.
    pub kept: u32,
    /// See [`Block::straight`].
    pub straight: u32,
    /// See [`Block::rep`].
    pub rep: bool,
    /// See [`Block::access`].
    pub access: Access,
    /// See [`Block::faults_without_memory`].
    pub faults_without_memory: bool,
    /// See [`Block::is_vsyscall`].
    pub vsyscall: bool,
    /// Where the last instruction goes when it is not a taken branch (its NLIP, for a
    /// conditional branch or no branch), else [`NOWHERE`].
    pub fall: u64,
    /// Where the last instruction's taken direct branch goes, else [`NOWHERE`].
    pub taken: u64,
}

/// What the fast path reads of a block at each execution, in 32 bytes (half a cache line;
/// [`Summary`] is twice that): the block table is read at every executed block, and the
/// smaller record left the feeder fewer cache misses (issue 20). It is laid out for the
/// question asked at each block, "where did it go, and what does that write": the successor
/// nearly every execution has is one comparison away, with its [`Edge`] beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hot {
    /// Its first address.
    pub start: u64,
    /// The successor one comparison tells, whose edge is [`Self::on_first`]: the direct
    /// branch's target, or the NLIP of a last instruction that is no branch; [`NOWHERE`] for
    /// an indirect branch.
    pub first: u64,
    /// Its last instruction's NLIP.
    pub nlip: u64,
    /// How many instructions it keeps, or [`NEVER`] if no execution of it settles on the
    /// fast path: the vsyscall page, a REP string instruction last, a branch before the last
    /// instruction, or a far transfer or exception last.
    pub expect: u32,
    /// The last instruction's length.
    pub len: u8,
    /// The edge to [`Self::first`].
    pub on_first: Edge,
    /// The edge of an indirect branch last (to anywhere but itself or a signal handler).
    pub indirect: Option<Edge>,
    /// Whether the last instruction is a conditional branch, whose other successor is its
    /// NLIP (a bit 0).
    pub conditional: bool,
}

impl Hot {
    /// The last instruction's address.
    #[inline]
    pub fn last_ip(&self) -> u64 {
        self.nlip.wrapping_sub(u64::from(self.len))
    }
}

/// [`Hot::expect`] of a block that never settles on the fast path: no count of started
/// instructions is this large (QEMU 7.2 ends a block at 512).
pub const NEVER: u32 = u32::MAX;

const _: () = assert!(size_of::<Hot>() == 32, "two to a cache line");

/// An address no block starts at (not canonical): a [`Summary`]'s `fall` or `taken` where
/// the last instruction has none, so that telling a successor is two comparisons at each
/// executed block rather than a dispatch on the branch's class (issue 20: that dispatch was
/// the feeder's hottest instruction).
pub const NOWHERE: u64 = u64::MAX;

/// Where the vsyscall page is (Linux x86-64 ABI); QEMU emulates calls into it.
pub const VSYSCALL_PAGE: u64 = 0xffff_ffff_ff60_0000;

/// A translation error: the block has no decodable instruction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no decodable instruction at {ip:#x} ({bytes} bytes reported)")]
pub struct TranslateError {
    /// The block's address.
    pub ip: u64,
    /// How many bytes QEMU reported for its first instruction.
    pub bytes: usize,
}

impl Block {
    /// Classifies the instructions QEMU reports for a block: `(address, bytes)` each.
    ///
    /// QEMU 7.2 reports an instruction after the first that crosses a page boundary as the
    /// block's last with a truncated size, though it does not run it there: it starts the next
    /// block. Such an instruction (its decoded length exceeds the bytes reported, or it
    /// decodes as invalid from too few bytes) is dropped; [`Block::kept`] says how many
    /// instructions remain, which are the ones the plugin instruments.
    pub fn translate<'a>(insns: impl IntoIterator<Item = (u64, &'a [u8])>) -> Result<Self, TranslateError> {
        let mut out = Vec::new();
        let mut last: Option<Instruction> = None;
        let mut first: Option<(u64, usize)> = None;
        for (ip, bytes) in insns {
            first.get_or_insert((ip, bytes.len()));
            if bytes.is_empty() {
                break;
            }
            let insn = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).decode();
            let truncated = insn.is_invalid() || insn.len() > bytes.len();
            if truncated && !out.is_empty() {
                break;
            }
            let cofi = if insn.is_invalid() {
                Cofi::Exception
            } else {
                classify(&insn)
            };
            out.push(BlockInsn {
                ip,
                len: if insn.is_invalid() {
                    bytes.len().max(1) as u8
                } else {
                    insn.len() as u8
                },
                cofi,
            });
            last = Some(insn);
        }
        let (Some(insn), false) = (last, out.is_empty()) else {
            let (ip, bytes) = first.unwrap_or((0, 0));
            return Err(TranslateError { ip, bytes });
        };
        let cofi = out[out.len() - 1].cofi;
        let target = match cofi {
            Cofi::Conditional | Cofi::DirectJump | Cofi::DirectCall => Some(insn.near_branch_target()),
            _ => None,
        };
        let straight = out.iter().take_while(|i| i.cofi == Cofi::None).count();
        Ok(Self {
            straight,
            insns: out.into_boxed_slice(),
            target,
            rep: is_rep_string(&insn),
            access: access(&insn),
            faults_without_memory: faults_without_memory(&insn),
        })
    }

    /// What the engine needs of it at every execution.
    pub fn summary(&self) -> Summary {
        Summary {
            start: self.start(),
            last: self.last(),
            target: self.target,
            kept: self.kept() as u32,
            straight: self.straight as u32,
            rep: self.rep,
            access: self.access,
            faults_without_memory: self.faults_without_memory,
            vsyscall: self.is_vsyscall(),
            fall: match self.last().cofi {
                Cofi::None | Cofi::Conditional => self.last().nlip(),
                _ => NOWHERE,
            },
            taken: match self.last().cofi {
                Cofi::Conditional | Cofi::DirectJump | Cofi::DirectCall => self.target.unwrap_or(NOWHERE),
                _ => NOWHERE,
            },
        }
    }

    /// What the fast path reads of it ([`Hot`]).
    pub fn hot(&self) -> Hot {
        let last = self.last();
        let far = matches!(last.cofi, Cofi::Far(_) | Cofi::Exception);
        let slow = self.is_vsyscall() || self.rep || self.straight + 1 < self.kept() || far;
        let first = match last.cofi {
            Cofi::None => last.nlip(),
            Cofi::Conditional | Cofi::DirectJump | Cofi::DirectCall => self.target.unwrap_or(NOWHERE),
            _ => NOWHERE,
        };
        Hot {
            start: self.start(),
            first,
            nlip: last.nlip(),
            expect: if slow { NEVER } else { self.kept() as u32 },
            len: last.len,
            // A conditional branch to its own NLIP counts as not taken, whichever way it went,
            // as `Retired::new` has it.
            on_first: Edge::of(last.cofi, first != last.nlip()),
            indirect: last.cofi.is_indirect().then(|| Edge::of(last.cofi, true)),
            conditional: last.cofi == Cofi::Conditional,
        }
    }

    /// How many instructions the block keeps.
    pub fn kept(&self) -> usize {
        self.insns.len()
    }

    /// Its first address.
    pub fn start(&self) -> u64 {
        self.insns[0].ip
    }

    /// The last instruction.
    pub fn last(&self) -> BlockInsn {
        self.insns[self.insns.len() - 1]
    }

    /// Whether QEMU runs it in place of a call into the vsyscall page.
    pub fn is_vsyscall(&self) -> bool {
        self.start() & !0xfff == VSYSCALL_PAGE
    }
}

fn is_rep_string(insn: &Instruction) -> bool {
    let string = (0..insn.op_count()).any(|i| {
        matches!(
            insn.op_kind(i),
            OpKind::MemorySegSI
                | OpKind::MemorySegESI
                | OpKind::MemorySegRSI
                | OpKind::MemoryESDI
                | OpKind::MemoryESEDI
                | OpKind::MemoryESRDI
        )
    });
    string && (insn.has_rep_prefix() || insn.has_repe_prefix() || insn.has_repne_prefix())
}

fn access(insn: &Instruction) -> Access {
    if insn.is_invalid() {
        return Access::None;
    }
    let mut factory = InstructionInfoFactory::new();
    let info = factory.info(insn);
    let used = info.used_memory();
    if used.iter().any(|m| {
        matches!(
            m.access(),
            iced_x86::OpAccess::Write
                | iced_x86::OpAccess::CondWrite
                | iced_x86::OpAccess::ReadWrite
                | iced_x86::OpAccess::ReadCondWrite
        )
    }) {
        Access::Write
    } else if used.is_empty() {
        Access::None
    } else {
        Access::Read
    }
}

fn faults_without_memory(insn: &Instruction) -> bool {
    matches!(
        insn.mnemonic(),
        Mnemonic::Div
            | Mnemonic::Idiv
            | Mnemonic::Hlt
            | Mnemonic::Cli
            | Mnemonic::Sti
            | Mnemonic::In
            | Mnemonic::Out
            | Mnemonic::Rdmsr
            | Mnemonic::Wrmsr
            | Mnemonic::Rdpmc
            | Mnemonic::Invd
            | Mnemonic::Wbinvd
            | Mnemonic::Clts
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(code: &[u8], at: u64, sizes: &[usize]) -> Block {
        let mut parts = Vec::new();
        let mut off = 0;
        for &n in sizes {
            parts.push((at + off as u64, &code[off..off + n]));
            off += n;
        }
        Block::translate(parts).expect("translates")
    }

    #[test]
    fn the_last_instruction_is_classified() {
        // mov eax, 1; add rax, rbx; jne -0x9
        let code = [0xb8, 1, 0, 0, 0, 0x48, 0x01, 0xd8, 0x75, 0xf6];
        let b = block(&code, 0x1000, &[5, 3, 2]);
        assert_eq!(b.kept(), 3);
        assert_eq!(b.last().cofi, Cofi::Conditional);
        assert_eq!(b.target, Some(0x1000));
        assert_eq!((b.rep, b.access, b.faults_without_memory), (false, Access::None, false));
    }

    #[test]
    fn a_truncated_instruction_after_the_first_is_dropped() {
        // nop; then a 5-byte mov reported with 2 bytes (it crosses the page).
        let code = [0x90, 0xb8, 1];
        let b = block(&code, 0xffe, &[1, 2]);
        assert_eq!(b.kept(), 1);
        assert_eq!(b.last().ip, 0xffe);
    }

    #[test]
    fn memory_access_and_rep_are_recognised() {
        // rep movsb
        let b = block(&[0xf3, 0xa4], 0x2000, &[2]);
        assert!(b.rep);
        assert_eq!(b.access, Access::Write);
        // ret reads; call writes; lea reads nothing; div can fault.
        assert_eq!(block(&[0xc3], 0, &[1]).access, Access::Read);
        assert_eq!(block(&[0xe8, 0, 0, 0, 0], 0, &[5]).access, Access::Write);
        assert_eq!(block(&[0x48, 0x8d, 0x04, 0x24], 0, &[4]).access, Access::None);
        assert!(block(&[0x48, 0xf7, 0xf1], 0, &[3]).faults_without_memory);
    }

    #[test]
    fn an_undecodable_block_is_an_error() {
        let err = Block::translate([(0x10, &[][..])]).expect_err("empty");
        assert_eq!(err, TranslateError { ip: 0x10, bytes: 0 });
    }
}

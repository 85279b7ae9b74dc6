//! Basic blocks: instructions decoded from an address up to the first change of flow, with
//! that terminator classified as RTIT sees it, cached so that hot code is decoded once. Each
//! block also remembers the blocks its direct successors start (taken, fall-through), so a
//! hot loop walks from block to block without hashing (libxdc's control-flow-graph cache).

use iced_x86::{Decoder, DecoderOptions, Instruction};
use rustc_hash::FxHashMap;

use crate::cofi::{classify, Cofi};
use crate::image::{AddressSpace, ImageError};

/// Most instructions in one block; a longer straight run continues in a new block.
const MAX_BLOCK_INSNS: usize = 256;

/// No successor known yet.
pub const NO_BLOCK: u32 = u32::MAX;

/// The last instruction of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminator {
    /// Its address.
    pub ip: u64,
    /// Its length.
    pub len: u8,
    /// How it changes the flow; `Cofi::None` when the block was cut at its maximum length.
    pub cofi: Cofi,
    /// For direct branches: the target.
    pub target: u64,
}

impl Terminator {
    /// The address after it.
    pub fn nlip(&self) -> u64 {
        self.ip.wrapping_add(u64::from(self.len))
    }
}

/// A basic block.
#[derive(Debug, Clone)]
pub struct Block {
    /// Its first instruction.
    pub ip: u64,
    /// Offsets of its instructions from `ip`; the terminator's is last.
    offsets: Box<[u16]>,
    /// Its last instruction.
    pub term: Terminator,
}

/// What the walk reads of a block at every pass, packed into 32 bytes so that two share a
/// cache line: hot code's blocks stay cached, where the whole [`Block`] (56 bytes, with its
/// instructions' offsets behind a pointer) spread them over twice the lines.
#[derive(Debug, Clone, Copy)]
struct Hot {
    term_ip: u64,
    target: u64,
    /// Block at the taken target of a direct branch, once seen.
    taken: u32,
    /// Block at the terminator's NLIP, once seen.
    fallthrough: u32,
    /// Instructions, terminator included (at most [`MAX_BLOCK_INSNS`]).
    len: u16,
    term_len: u8,
    cofi: Cofi,
}

const _: () = assert!(size_of::<Hot>() == 32);

impl Hot {
    fn new(block: &Block) -> Self {
        Self {
            term_ip: block.term.ip,
            target: block.term.target,
            taken: NO_BLOCK,
            fallthrough: NO_BLOCK,
            len: block.offsets.len() as u16,
            term_len: block.term.len,
            cofi: block.term.cofi,
        }
    }
}

impl Block {
    /// Number of instructions, terminator included.
    pub fn len(&self) -> u32 {
        self.offsets.len() as u32
    }

    /// Never true: a block has at least its terminator.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// How many instructions come before `ip` in this block, if `ip` starts one of them.
    pub fn index_of(&self, ip: u64) -> Option<u32> {
        let off = u16::try_from(ip.checked_sub(self.ip)?).ok()?;
        self.offsets.binary_search(&off).ok().map(|i| i as u32)
    }
}

/// Why a block could not be decoded.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BlockError {
    /// No image holds the address.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The bytes end in the middle of an instruction.
    #[error("the image ends inside the instruction at {ip:#x}")]
    Truncated {
        /// The instruction.
        ip: u64,
    },
}

/// Blocks by start address, in an arena addressed by index.
#[derive(Debug, Default)]
pub struct BlockCache {
    blocks: Vec<Block>,
    /// Each block's terminator, length and successor links, by the same index.
    hot: Vec<Hot>,
    by_ip: FxHashMap<u64, u32>,
}

impl BlockCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The block with index `id`.
    #[inline]
    pub fn block(&self, id: u32) -> &Block {
        &self.blocks[id as usize]
    }

    /// Block `id`'s terminator and number of instructions: what the walk needs of it.
    #[inline]
    pub fn term(&self, id: u32) -> (Terminator, u32) {
        let h = &self.hot[id as usize];
        let term = Terminator {
            ip: h.term_ip,
            len: h.term_len,
            cofi: h.cofi,
            target: h.target,
        };
        (term, u32::from(h.len))
    }

    /// The block block `id` leads to by its taken edge (`taken`) or its fall-through, if that
    /// link was recorded ([`NO_BLOCK`] if not).
    #[inline]
    pub fn linked(&self, id: u32, taken: bool) -> u32 {
        let h = &self.hot[id as usize];
        if taken {
            h.taken
        } else {
            h.fallthrough
        }
    }

    /// Records a successor link of block `id`.
    #[inline]
    pub fn link(&mut self, id: u32, taken: bool, to: u32) {
        let h = &mut self.hot[id as usize];
        if taken {
            h.taken = to;
        } else {
            h.fallthrough = to;
        }
    }

    /// Number of blocks decoded.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether no block was decoded yet.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The block starting at `ip`, decoding it on first use.
    #[inline]
    pub fn get(&mut self, space: &AddressSpace, ip: u64) -> Result<u32, BlockError> {
        if let Some(&id) = self.by_ip.get(&ip) {
            return Ok(id);
        }
        let block = decode_block(space, ip)?;
        let id = self.blocks.len() as u32;
        self.hot.push(Hot::new(&block));
        self.blocks.push(block);
        self.by_ip.insert(ip, id);
        Ok(id)
    }
}

/// Decodes one instruction at `ip` for display or inspection.
pub fn decode_insn(space: &AddressSpace, ip: u64) -> Result<Instruction, BlockError> {
    let bytes = space.bytes_at(ip)?;
    let mut decoder = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let insn = decoder.decode();
    if insn.is_invalid() && decoder.last_error() == iced_x86::DecoderError::NoMoreBytes {
        return Err(BlockError::Truncated { ip });
    }
    Ok(insn)
}

/// Decodes instructions one after another, each exactly as [`decode_insn`] would, without
/// setting up an iced decoder per instruction (the decoder is large: making one costs more
/// than decoding an instruction with it). An instruction is decoded by the decoder left
/// after the previous one when it stands at that address with bytes left: it reads the rest
/// of the slice `bytes_at` gave for an earlier address of the same segment, which is what
/// `bytes_at` gives for this one (segments never overlap). Anywhere else (the first
/// instruction, a jump in the sequence, the end of a segment, an invalid instruction) it
/// decodes afresh, as `decode_insn` does.
pub struct InsnStream<'a> {
    space: &'a AddressSpace,
    decoder: Option<Decoder<'a>>,
}

impl<'a> InsnStream<'a> {
    /// A stream over the code of `space`.
    pub fn new(space: &'a AddressSpace) -> Self {
        Self { space, decoder: None }
    }

    /// The address after the instruction at `ip`: `decode_insn(space, ip)?.next_ip()`.
    #[inline]
    pub fn next_ip(&mut self, ip: u64) -> Result<u64, BlockError> {
        self.insn(ip).map(|insn| insn.next_ip())
    }

    /// The instruction at `ip`: `decode_insn(space, ip)`.
    #[inline]
    pub fn insn(&mut self, ip: u64) -> Result<Instruction, BlockError> {
        if let Some(decoder) = &mut self.decoder {
            if decoder.ip() == ip && decoder.can_decode() {
                let insn = decoder.decode();
                if !insn.is_invalid() {
                    return Ok(insn);
                }
            }
        }
        let decoder = self
            .decoder
            .insert(Decoder::with_ip(64, self.space.bytes_at(ip)?, ip, DecoderOptions::NONE));
        let insn = decoder.decode();
        if insn.is_invalid() && decoder.last_error() == iced_x86::DecoderError::NoMoreBytes {
            return Err(BlockError::Truncated { ip });
        }
        Ok(insn)
    }
}

fn decode_block(space: &AddressSpace, start: u64) -> Result<Block, BlockError> {
    let bytes = space.bytes_at(start)?;
    let mut decoder = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE);
    let mut offsets = Vec::with_capacity(8);
    let mut insn = Instruction::default();
    loop {
        let ip = decoder.ip();
        if !decoder.can_decode() {
            // The segment ends here: the code continues in no image we have.
            return Err(ImageError::NoImage { ip }.into());
        }
        decoder.decode_out(&mut insn);
        if insn.is_invalid() && decoder.last_error() == iced_x86::DecoderError::NoMoreBytes {
            return Err(BlockError::Truncated { ip });
        }
        offsets.push((ip - start) as u16);
        // Bytes that do not decode raise #UD: the CPU faults there.
        let cofi = if insn.is_invalid() {
            Cofi::Exception
        } else {
            classify(&insn)
        };
        let at_limit = offsets.len() >= MAX_BLOCK_INSNS || ip - start > u64::from(u16::MAX) - 16;
        if cofi != Cofi::None || at_limit {
            let target = match cofi {
                Cofi::Conditional | Cofi::DirectJump | Cofi::DirectCall => insn.near_branch_target(),
                _ => 0,
            };
            return Ok(Block {
                ip: start,
                offsets: offsets.into_boxed_slice(),
                term: Terminator {
                    ip,
                    len: insn.len() as u8,
                    cofi,
                    target,
                },
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cofi::FarKind;
    use crate::image::Image;

    fn space(code: &[u8]) -> AddressSpace {
        let mut s = AddressSpace::new();
        s.add(Image::from_raw("t", 0x1000, code.to_vec())).expect("add");
        s
    }

    #[test]
    fn blocks_end_at_the_first_change_of_flow() {
        // nop; add rax, rbx; jne +2; nop; nop; syscall
        let s = space(&[0x90, 0x48, 0x01, 0xd8, 0x75, 0x02, 0x90, 0x90, 0x0f, 0x05]);
        let mut cache = BlockCache::new();
        let id = cache.get(&s, 0x1000).expect("block");
        let b = cache.block(id);
        assert_eq!(b.len(), 3);
        assert_eq!(
            b.term,
            Terminator {
                ip: 0x1004,
                len: 2,
                cofi: Cofi::Conditional,
                target: 0x1008
            }
        );
        assert_eq!(b.index_of(0x1001), Some(1));
        assert_eq!(b.index_of(0x1002), None, "inside an instruction");
        let id2 = cache.get(&s, 0x1006).expect("block");
        assert_eq!(cache.block(id2).term.cofi, Cofi::Far(FarKind::Syscall));
        assert_eq!(cache.get(&s, 0x1000).expect("cached"), id);
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn code_running_off_its_image_is_an_error() {
        let s = space(&[0x90, 0x90]);
        let err = BlockCache::new().get(&s, 0x1000).expect_err("no terminator");
        assert_eq!(err.to_string(), "no image holds address 0x1002");
        let s = space(&[0x90, 0xe8, 0x00]); // call rel32 cut short
        let err = BlockCache::new().get(&s, 0x1000).expect_err("truncated");
        assert_eq!(err.to_string(), "the image ends inside the instruction at 0x1001");
    }

    #[test]
    fn undecodable_bytes_fault() {
        let s = space(&[0x90, 0x0f, 0x0b]); // ud2
        let mut cache = BlockCache::new();
        let id = cache.get(&s, 0x1000).expect("block");
        assert_eq!(cache.block(id).term.cofi, Cofi::Exception);
    }
}

//! Block ids given where QEMU translates (issue 20): the vCPU must hand QEMU a block's id
//! for its execution callback at once. Asking the engine for it meant taking the plugin's
//! lock, which the feeder holds while it runs the engine on a batch (on python3's startup,
//! 39,000 translations, the vCPU waited about 20 ms for it and spent 15 ms in the engine's
//! table); decoding each block there cost the vCPU another 3,000 instructions a block
//! (callgrind). The vCPU now numbers blocks by the bytes QEMU reported ([`RawBlock`]) and
//! needs only how many instructions a block keeps ([`kept`]); the feeder decodes them and
//! hands them to the engine in the same order ([`Engine::push_block`]).
//!
//! [`Engine::push_block`]: super::engine::Engine::push_block

use std::collections::hash_map::Entry;
use std::sync::Arc;

use iced_x86::{Decoder, DecoderOptions};
use rustc_hash::FxHashMap;

/// A block's instructions as QEMU reported them, in one buffer: each instruction's address
/// (8 bytes, little-endian), its length (1 byte) and its bytes. Shared, not copied, between
/// the numbering and the queue to the feeder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawBlock(Arc<[u8]>);

impl RawBlock {
    /// From `(address, bytes)` of each instruction (at most 255 bytes each: QEMU reports
    /// one instruction's, at most 15).
    pub fn new(insns: &[(u64, &[u8])]) -> Self {
        let mut buf = Vec::new();
        encode(insns, &mut buf);
        Self(buf.into())
    }

    /// `(address, bytes)` of each instruction.
    pub fn insns(&self) -> Vec<(u64, &[u8])> {
        let mut out = Vec::new();
        let mut at = 0;
        while at + 9 <= self.0.len() {
            let ip = u64::from_le_bytes(self.0[at..at + 8].try_into().expect("8 bytes"));
            let len = usize::from(self.0[at + 8]);
            let end = (at + 9 + len).min(self.0.len());
            out.push((ip, &self.0[at + 9..end]));
            at = end;
        }
        out
    }

    /// The first instruction's address (0 for none).
    pub fn start(&self) -> u64 {
        self.0
            .get(..8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
}

/// Writes [`RawBlock`]'s buffer for `insns` into `buf`.
fn encode(insns: &[(u64, &[u8])], buf: &mut Vec<u8>) {
    buf.clear();
    for &(ip, bytes) in insns {
        let bytes = &bytes[..bytes.len().min(255)];
        buf.extend_from_slice(&ip.to_le_bytes());
        buf.push(bytes.len() as u8);
        buf.extend_from_slice(bytes);
    }
}

/// How many of a block's instructions [`super::block::Block::translate`] keeps, decoding
/// only the last: QEMU 7.2 reports an instruction after the first that crosses a page
/// boundary as the block's last with a truncated size (it runs it in the next block), and
/// translation drops such an instruction; an instruction with no bytes ends the block
/// before it. The feeder checks this against the whole translation.
pub fn kept(insns: &[(u64, &[u8])]) -> usize {
    let n = insns.iter().position(|(_, b)| b.is_empty()).unwrap_or(insns.len());
    if n < 2 {
        return n;
    }
    let (ip, bytes) = insns[n - 1];
    let last = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).decode();
    match last.is_invalid() || last.len() > bytes.len() {
        true => n - 1,
        false => n,
    }
}

/// No further block starts at the same address ([`Translations::same_next`]).
const LAST: u32 = u32::MAX;

/// The blocks numbered so far. Numbering is on QEMU's thread at every translation (39,000
/// on python3's startup), so it allocates only for a new block, and once: a vector of ids
/// for each address and a copy of each block for the queue cost the vCPU ~1,000 cycles a
/// translation (issue 20).
#[derive(Debug, Default)]
pub struct Translations {
    /// The first id of the blocks that start at an address.
    by_start: FxHashMap<u64, u32>,
    /// For each id, the next id of a block at the same address, or [`LAST`].
    same_next: Vec<u32>,
    /// Each block, by id, to compare a new translation with.
    blocks: Vec<RawBlock>,
    /// The translation being numbered, encoded.
    scratch: Vec<u8>,
}

impl Translations {
    /// The id of the block QEMU translated from `insns` (`(address, bytes)` of each
    /// instruction): that of the same bytes translated before at the same address (QEMU
    /// translates the same code again after each flush of its translations), with `None`;
    /// else a new one, with the block for the engine.
    pub fn number(&mut self, insns: &[(u64, &[u8])]) -> (u32, Option<RawBlock>) {
        encode(insns, &mut self.scratch);
        let new = self.blocks.len() as u32;
        match self.by_start.entry(insns.first().map_or(0, |(ip, _)| *ip)) {
            Entry::Vacant(v) => {
                v.insert(new);
            }
            Entry::Occupied(o) => {
                let mut id = *o.get();
                loop {
                    if self.blocks[id as usize].0[..] == self.scratch[..] {
                        return (id, None);
                    }
                    match self.same_next[id as usize] {
                        LAST => break,
                        next => id = next,
                    }
                }
                self.same_next[id as usize] = new;
            }
        }
        let block = RawBlock(Arc::from(&self.scratch[..]));
        self.blocks.push(block.clone());
        self.same_next.push(LAST);
        (new, Some(block))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ModelOptions, RtitConfig};
    use crate::qemu::block::Block;
    use crate::qemu::engine::{Engine, Start};

    fn raw(ip: u64, bytes: &[&[u8]]) -> Vec<(u64, Vec<u8>)> {
        let mut at = ip;
        bytes
            .iter()
            .map(|b| {
                let i = (at, b.to_vec());
                at += b.len() as u64;
                i
            })
            .collect()
    }

    fn borrowed(insns: &[(u64, Vec<u8>)]) -> Vec<(u64, &[u8])> {
        insns.iter().map(|(ip, b)| (*ip, &b[..])).collect()
    }

    /// A block's bytes come back as given; the same bytes at the same address get the same
    /// id, other bytes a new one; the engine takes the new ones in order (and refuses an id
    /// out of order).
    #[test]
    fn numbers_blocks_by_their_bytes() {
        let nop_ret = raw(0x1000, &[&[0x90], &[0xc3]]);
        let jmp = raw(0x1000, &[&[0xeb, 0xfe]]);
        let other = raw(0x2000, &[&[0xc3]]);
        assert_eq!(RawBlock::new(&borrowed(&nop_ret)).insns(), borrowed(&nop_ret));
        assert_eq!(RawBlock::new(&borrowed(&other)).start(), 0x2000);
        let mut t = Translations::default();
        let mut engine = Engine::new(
            ModelOptions::default(),
            RtitConfig::user_process(0x1000),
            Start::Entry,
            false,
        );
        let mut ids = Vec::new();
        for b in [&nop_ret, &other, &nop_ret, &jmp, &other, &jmp] {
            let (id, new) = t.number(&borrowed(b));
            if let Some(new) = new {
                let block = Block::translate(new.insns()).expect("translates");
                assert!(engine.push_block(id, block));
            }
            ids.push(id);
        }
        assert_eq!(ids, [0, 1, 0, 2, 1, 2]);
        let again = Block::translate(borrowed(&jmp)).expect("translates");
        assert_eq!(engine.add_block(again.clone()), 2, "the engine holds the same blocks");
        assert!(!engine.push_block(7, again), "an id out of order");
    }

    /// `kept` is what translation keeps: a truncated last instruction (after the first)
    /// dropped, a first one never, an instruction with no bytes ending the block.
    #[test]
    fn kept_is_what_translation_keeps() {
        let cases: [&[&[u8]]; 6] = [
            &[&[0x90], &[0xc3]],
            // mov eax, imm32 cut to 3 of its 5 bytes: runs in the next block.
            &[&[0x90], &[0xb8, 0x01, 0x02]],
            &[&[0xb8, 0x01, 0x02]],
            &[&[0x90], &[], &[0xc3]],
            &[&[0x48, 0x89, 0xe5], &[0x0f, 0x0b]],
            &[&[0x90], &[0x90], &[0x0f]],
        ];
        for bytes in cases {
            let insns = raw(0x40_1000, bytes);
            let b = borrowed(&insns);
            let block = Block::translate(b.iter().copied()).expect("translates");
            assert_eq!(kept(&b), block.kept(), "{bytes:x?}");
        }
        assert_eq!(kept(&borrowed(&raw(0x40_1000, &[&[0x90], &[0xb8, 0x01, 0x02]]))), 1);
        assert_eq!(kept(&[]), 0);
    }
}

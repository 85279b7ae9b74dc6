//! Block ids given where QEMU translates (issue 20): the vCPU must hand QEMU a block's id
//! for its execution callback at once, and asking the engine for it meant taking the
//! plugin's lock, which the feeder holds while it runs the engine on a batch: on python3's
//! startup (39,000 translations) the vCPU waited about 20 ms for it and spent 15 ms more in
//! the engine's table. The vCPU now numbers blocks itself, as [`Engine::add_block`] would,
//! and the engine takes them later, in the same order ([`Engine::push_block`]).
//!
//! [`Engine::add_block`]: super::engine::Engine::add_block
//! [`Engine::push_block`]: super::engine::Engine::push_block

use std::collections::HashMap;

use super::block::Block;

/// The blocks numbered so far.
#[derive(Debug, Default)]
pub struct Translations {
    /// The ids of the blocks that start at an address.
    by_start: HashMap<u64, Vec<u32>>,
    /// Each block, by id, to compare a new translation with.
    blocks: Vec<Block>,
}

impl Translations {
    /// The id of `block`: that of an equal block translated before at the same address
    /// (QEMU translates the same code again after each flush of its translations), with
    /// `None`; else a new one, with the block for the engine.
    pub fn number(&mut self, block: Block) -> (u32, Option<Block>) {
        let same = self.by_start.entry(block.start()).or_default();
        if let Some(&id) = same.iter().find(|&&id| self.blocks[id as usize] == block) {
            return (id, None);
        }
        let id = self.blocks.len() as u32;
        same.push(id);
        self.blocks.push(block.clone());
        (id, Some(block))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ModelOptions, RtitConfig};
    use crate::qemu::engine::{Engine, Start};

    fn block(ip: u64, bytes: &[&[u8]]) -> Block {
        let mut at = ip;
        let insns: Vec<(u64, &[u8])> = bytes
            .iter()
            .map(|b| {
                let i = (at, *b);
                at += b.len() as u64;
                i
            })
            .collect();
        Block::translate(insns).expect("translates")
    }

    /// The ids are the engine's own: a translation again gets the first one's id, a
    /// different block at the same address a new one, and the engine takes the new ones in
    /// order (and refuses an id out of order).
    #[test]
    fn numbers_blocks_as_the_engine_would() {
        let (nop_ret, jmp) = (block(0x1000, &[&[0x90], &[0xc3]]), block(0x1000, &[&[0xeb, 0xfe]]));
        let other = block(0x2000, &[&[0xc3]]);
        let mut t = Translations::default();
        let mut reference = Engine::new(
            ModelOptions::default(),
            RtitConfig::user_process(0x1000),
            Start::Entry,
            false,
        );
        let mut engine = Engine::new(
            ModelOptions::default(),
            RtitConfig::user_process(0x1000),
            Start::Entry,
            false,
        );
        for b in [&nop_ret, &other, &nop_ret, &jmp, &other, &jmp] {
            let (id, new) = t.number(b.clone());
            assert_eq!(id, reference.add_block(b.clone()), "{b:?}");
            if let Some(new) = new {
                assert!(engine.push_block(id, new));
            }
        }
        assert_eq!(engine.add_block(jmp.clone()), 2, "the engine holds the same blocks");
        assert!(!engine.push_block(7, other), "an id out of order");
    }
}

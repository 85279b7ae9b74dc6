//! Which code each stretch of the history ran, for `code-ran.bin` (the format and why:
//! `rtit_replay_core::recording::code_ran`): every block is noted when it starts to run, a
//! bit set in a bitmap of block ids (an OR a block on the fast path, in a few KiB that stay
//! in the cache: a word a block to compare cost 5–11 % of the engine's time), and a stretch
//! is cut at the first batch end past [`STRETCH`] positions, its blocks' pages encoded then.
//! A block under way at a cut is noted in the next stretch too: its instructions may retire
//! on either side.

use rtit_replay_core::recording::code_ran::{encode_stretch, MAGIC, STRETCH};

use crate::qemu::block::Block;

/// Notes in `ran` (a [`CodeNotes::ran`]) that block `id` starts to run: the fast path keeps
/// the slice in registers.
#[inline(always)]
pub(super) fn note(ran: &mut [u64], id: u32) {
    if let Some(word) = ran.get_mut(id as usize / 64) {
        *word |= 1 << (id % 64);
    }
}

/// The notes of the stretch under way and the stretches cut since last taken.
pub(super) struct CodeNotes {
    /// A bit a block id: it ran in the stretch under way ([`note`]).
    pub(super) ran: Vec<u64>,
    /// Where the stretch under way began.
    begun: u64,
    /// Encoded stretches not yet taken (the file's magic first).
    out: Vec<u8>,
    pages: Vec<u64>,
}

impl CodeNotes {
    pub(super) fn new() -> Self {
        Self {
            ran: Vec::new(),
            begun: 0,
            out: MAGIC.to_vec(),
            pages: Vec::new(),
        }
    }

    /// A block was added under id `id`.
    pub(super) fn grow(&mut self, id: u32) {
        let words = id as usize / 64 + 1;
        if self.ran.len() < words {
            self.ran.resize(words, 0);
        }
    }

    /// Block `id` starts to run.
    #[inline(always)]
    pub(super) fn note(&mut self, id: u32) {
        note(&mut self.ran, id);
    }

    /// Whether the stretch under way is long enough to cut at `position`.
    #[inline]
    pub(super) fn due(&self, position: u64) -> bool {
        position - self.begun >= STRETCH
    }

    /// Ends the stretch under way at `position` (nothing if it holds no position), block
    /// `pending` still under way.
    pub(super) fn cut(&mut self, position: u64, blocks: &[Block], pending: Option<u32>) {
        if position <= self.begun {
            return;
        }
        self.pages.clear();
        for (w, word) in self.ran.iter_mut().enumerate() {
            let mut bits = std::mem::take(word);
            while bits != 0 {
                let id = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let b = &blocks[id];
                let last = b.last();
                let end = last.ip + u64::from(last.len) - 1;
                self.pages.extend(b.start() >> 12..=end >> 12);
            }
        }
        self.pages.sort_unstable();
        self.pages.dedup();
        encode_stretch(self.begun, position, &self.pages, &mut self.out);
        self.begun = position;
        if let Some(id) = pending {
            self.note(id);
        }
    }

    /// The bytes encoded since last taken.
    pub(super) fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }
}

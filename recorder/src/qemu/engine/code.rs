//! Which code each stretch of the history ran, for `code-ran.bin` (the format and why:
//! `rtit_replay_core::recording::code_ran`): every block is noted when it starts to run
//! (one load and compare a block on the fast path), and a stretch is cut at the first batch
//! end past [`STRETCH`] positions, its blocks' pages encoded then. A block under way at a
//! cut is noted in the next stretch too: its instructions may retire on either side.

use rtit_replay_core::recording::code_ran::{encode_stretch, MAGIC, STRETCH};

use crate::qemu::block::Block;

/// The notes of the stretch under way and the stretches cut since last taken.
pub(super) struct CodeNotes {
    /// Per block id: the number (plus one) of the stretch it was last noted in.
    seen: Vec<u32>,
    /// The stretch under way's number plus one.
    stretch: u32,
    /// The blocks noted in it.
    noted: Vec<u32>,
    /// Where it began.
    begun: u64,
    /// Encoded stretches not yet taken (the file's magic first).
    out: Vec<u8>,
    pages: Vec<u64>,
}

impl CodeNotes {
    pub(super) fn new() -> Self {
        Self {
            seen: Vec::new(),
            stretch: 1,
            noted: Vec::new(),
            begun: 0,
            out: MAGIC.to_vec(),
            pages: Vec::new(),
        }
    }

    /// A block was added under the next id.
    pub(super) fn grow(&mut self) {
        self.seen.push(0);
    }

    /// Block `id` starts to run.
    #[inline(always)]
    pub(super) fn note(&mut self, id: u32) {
        let seen = &mut self.seen[id as usize];
        if *seen != self.stretch {
            *seen = self.stretch;
            self.noted.push(id);
        }
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
        for &id in &self.noted {
            let b = &blocks[id as usize];
            let last = b.last();
            let end = last.ip + u64::from(last.len) - 1;
            self.pages.extend(b.start() >> 12..=end >> 12);
        }
        self.pages.sort_unstable();
        self.pages.dedup();
        encode_stretch(self.begun, position, &self.pages, &mut self.out);
        self.noted.clear();
        self.stretch += 1;
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

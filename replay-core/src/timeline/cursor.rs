//! Sequential access: a pass that moves one position at a time (the state layer's forward
//! and backward passes) finds each instruction in constant time, without the binary search
//! a position far away needs. Runs are told by their successor codes, which read forwards
//! only, so the cursor holds the chunk of runs it is in decoded (up to [`STRIDE`] of them):
//! a pass going either way decodes each chunk once.

use super::runs::STRIDE;
use super::Timeline;

/// Where the last question was: the chunk of runs decoded and the run in it.
#[derive(Debug, Clone, Default)]
pub struct Cursor {
    /// The chunk decoded (`None` before the first question).
    chunk: Option<usize>,
    /// Its runs' blocks.
    blocks: Vec<u32>,
    /// Their first positions, and one more: where the chunk ends.
    starts: Vec<u64>,
    /// The block of the run after the chunk's last, if there is one.
    after: Option<u32>,
    /// The run asked about last, in the chunk.
    run: usize,
    /// That run's positions and the slot of its first instruction: a question in the same
    /// run, most of a pass's, reads only these.
    start: u64,
    end: u64,
    base: usize,
}

impl Cursor {
    /// The address of the instruction at `position`, moving from where the cursor is.
    pub fn ip(&mut self, t: &Timeline, position: u64) -> Option<u64> {
        self.at(t, position).map(|(ip, _)| ip)
    }

    /// The address of the instruction at `position` and its slot: where it is in the
    /// timeline's table of blocks, below [`Timeline::slots`]. A pass that caches something
    /// per instruction indexes an array by slot: a hash map by address missed the cache at
    /// nearly every step (62 % of python3's walk).
    pub fn at(&mut self, t: &Timeline, position: u64) -> Option<(u64, usize)> {
        let slot = self.slot(t, position)?;
        Some((t.blocks.ips[slot], slot))
    }

    /// The slot of `position` ([`Self::at`]) and that of `position + 1` (`None` at the last
    /// position): a walk needs both at every step, and asking for each on its own made the
    /// cursor move back and forth across a run boundary (a seek at every short run, walking
    /// backwards). No address is read: a walk that keeps a table by slot finds them there.
    #[inline]
    pub fn slots(&mut self, t: &Timeline, position: u64) -> Option<(usize, Option<usize>)> {
        let slot = self.slot(t, position)?;
        let next = if position + 1 < self.end {
            Some(slot + 1)
        } else {
            match self.blocks.get(self.run + 1) {
                Some(&b) => Some(t.blocks.start(b)),
                None => self.after.map(|b| t.blocks.start(b)),
            }
        };
        Some((slot, next))
    }

    /// The slot of `position`, and the first position of its run and the first after it:
    /// the run's positions have consecutive slots, and each but the last runs its next slot
    /// after it (a walk that steps through a run reads its table without the cursor).
    #[inline]
    pub fn run_of(&mut self, t: &Timeline, position: u64) -> Option<(usize, u64, u64)> {
        let slot = self.slot(t, position)?;
        Some((slot, self.start, self.end))
    }

    #[inline]
    fn slot(&mut self, t: &Timeline, position: u64) -> Option<usize> {
        if !(self.start..self.end).contains(&position) {
            if position >= t.len {
                return None;
            }
            self.seek(t, position);
            self.start = self.starts[self.run];
            self.end = self.starts[self.run + 1];
            self.base = t.blocks.start(self.blocks[self.run]);
        }
        Some(self.base + (position - self.start) as usize)
    }

    fn seek(&mut self, t: &Timeline, position: u64) {
        let n = self.blocks.len();
        if self.chunk.is_some() && (self.starts[0]..self.starts[n]).contains(&position) {
            // In the chunk: the next or previous run, as a pass moves, or a search.
            self.run = if position == self.starts[self.run + 1] {
                self.run + 1
            } else if self.run > 0 && position + 1 == self.starts[self.run] {
                self.run - 1
            } else {
                self.starts.partition_point(|&s| s <= position) - 1
            };
            return;
        }
        let k = t.chunk_of(position);
        t.runs.chunk(k, &mut self.blocks);
        self.starts.clear();
        let mut start = t.runs.mark_positions[k];
        for &b in &self.blocks {
            self.starts.push(start);
            start += t.blocks.len(b) as u64;
        }
        self.starts.push(start);
        self.after = (k + 1 < t.runs.chunks()).then(|| {
            let mut at = t.runs.mark_nibbles[k + 1];
            t.runs.decode(&mut at, t.runs.mark_before[k + 1])
        });
        self.chunk = Some(k);
        self.run = self.starts.partition_point(|&s| s <= position) - 1;
        debug_assert!(self.blocks.len() <= STRIDE);
    }
}

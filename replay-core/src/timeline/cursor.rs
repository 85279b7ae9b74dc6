//! Sequential access: a pass that moves one position at a time (the state layer's forward
//! and backward passes) finds each instruction in constant time, without the binary search
//! a position far away needs.

use super::Timeline;

/// Where the last question was: a run and its first position.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cursor {
    run: usize,
    start: u64,
    /// The run's length (0 before the first question).
    len: u64,
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
        if position >= t.len {
            return None;
        }
        if !(self.start..self.start + self.len).contains(&position) {
            self.seek(t, position);
        }
        let slot = t.blocks.start(t.runs[self.run]) + (position - self.start) as usize;
        Some((t.blocks.ips[slot], slot))
    }

    /// The slot of `position` ([`Self::at`]) and that of `position + 1` (`None` at the last
    /// position): a walk needs both at every step, and asking for each on its own made the
    /// cursor move back and forth across a run boundary (a seek by binary search at every
    /// short run, walking backwards). No address is read: a walk that keeps a table by slot
    /// finds them there.
    #[inline]
    pub fn slots(&mut self, t: &Timeline, position: u64) -> Option<(usize, Option<usize>)> {
        if position >= t.len {
            return None;
        }
        if !(self.start..self.start + self.len).contains(&position) {
            self.seek(t, position);
        }
        let slot = t.blocks.start(t.runs[self.run]) + (position - self.start) as usize;
        let next = if position + 1 < self.start + self.len {
            Some(slot + 1)
        } else {
            t.runs.get(self.run + 1).map(|&b| t.blocks.start(b))
        };
        Some((slot, next))
    }

    fn seek(&mut self, t: &Timeline, position: u64) {
        let end = self.start + self.len;
        if self.len > 0 && position == end {
            self.run += 1;
            self.start = end;
        } else if self.len > 0 && self.run > 0 && position < self.start && position + 1 >= self.start {
            self.run -= 1;
            self.start -= t.blocks.len(t.runs[self.run]) as u64;
        } else if let Some((run, start)) = t.locate(position) {
            (self.run, self.start) = (run, start);
        }
        self.len = t.blocks.len(t.runs[self.run]) as u64;
    }
}

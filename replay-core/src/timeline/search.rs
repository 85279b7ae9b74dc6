//! The next or previous position at which any address of a set executes (breakpoints): each
//! block is checked against the set once per search, then every run costs one lookup of its
//! block, and only a block holding an address is looked into.

use std::collections::HashSet;

use super::runs::STRIDE;
use super::Timeline;

/// What a search found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hit {
    /// An address of the set executes at this position.
    At(u64),
    /// None in the range searched.
    None,
    /// `interrupted` said stop; the search had come to this position.
    Interrupted(u64),
}

/// Runs between two calls of `interrupted`.
const POLL: usize = 1 << 16;

/// Chunks of runs decoded side by side ([`super::runs::Runs::chunks_into`]).
const GROUP: usize = 8;

impl Timeline {
    /// Which blocks hold an address of `set`.
    fn holding(&self, set: &HashSet<u64>) -> Vec<bool> {
        (0..self.blocks.count() as u32)
            .map(|b| self.blocks.ips(b).iter().any(|ip| set.contains(ip)))
            .collect()
    }

    /// The first position in `from..until` whose instruction is at an address of `set`.
    pub fn next_hit(&self, from: u64, until: u64, set: &HashSet<u64>, mut interrupted: impl FnMut() -> bool) -> Hit {
        let until = until.min(self.len);
        if from >= until || set.is_empty() {
            return Hit::None;
        }
        let holding = self.holding(set);
        let Some((run, mut start, _)) = self.locate(from) else {
            return Hit::None;
        };
        let mut skip = (from - start) as usize;
        let mut group: Vec<Vec<u32>> = (0..GROUP).map(|_| Vec::with_capacity(STRIDE)).collect();
        let (mut k, mut first) = (run / STRIDE, run % STRIDE);
        let mut looked = 0usize;
        while k < self.runs.chunks() {
            let n = GROUP.min(self.runs.chunks() - k);
            self.runs.chunks_into(k, &mut group[..n]);
            for chunk in &group[..n] {
                for &b in &chunk[first..] {
                    if start >= until {
                        return Hit::None;
                    }
                    if holding[b as usize] {
                        let at = self.blocks.ips(b).iter().skip(skip).position(|ip| set.contains(ip));
                        if let Some(i) = at {
                            let p = start + (skip + i) as u64;
                            return if p < until { Hit::At(p) } else { Hit::None };
                        }
                    }
                    skip = 0;
                    start += self.blocks.len(b) as u64;
                }
                first = 0;
            }
            k += n;
            looked += n * STRIDE;
            if looked >= POLL && interrupted() {
                return Hit::Interrupted(start.min(until));
            }
            looked %= POLL;
        }
        Hit::None
    }

    /// The last position in `until..from` (below `from`, at or above `until`) whose instruction
    /// is at an address of `set`.
    pub fn previous_hit(
        &self,
        from: u64,
        until: u64,
        set: &HashSet<u64>,
        mut interrupted: impl FnMut() -> bool,
    ) -> Hit {
        let from = from.min(self.len);
        if from <= until || set.is_empty() {
            return Hit::None;
        }
        let holding = self.holding(set);
        let Some((run, start, block)) = self.locate(from - 1) else {
            return Hit::None;
        };
        // The run at `from - 1`, up to and including that position.
        let take = (from - start) as usize;
        if let Some(i) = self.blocks.ips(block)[..take].iter().rposition(|ip| set.contains(ip)) {
            let p = start + i as u64;
            return if p >= until { Hit::At(p) } else { Hit::None };
        }
        // Then the runs before it, chunks decoded a group at a time, each read backwards.
        let mut group: Vec<Vec<u32>> = (0..GROUP).map(|_| Vec::with_capacity(STRIDE)).collect();
        let (mut k, mut below) = (run / STRIDE + 1, Some(run % STRIDE));
        let mut start = start;
        let mut looked = 0usize;
        while k > 0 && start > until {
            let n = GROUP.min(k);
            self.runs.chunks_into(k - n, &mut group[..n]);
            for chunk in group[..n].iter().rev() {
                let end = below.take().unwrap_or(chunk.len());
                for &b in chunk[..end].iter().rev() {
                    if start <= until {
                        return Hit::None;
                    }
                    let len = self.blocks.len(b) as u64;
                    start -= len;
                    if holding[b as usize] {
                        if let Some(i) = self.blocks.ips(b).iter().rposition(|ip| set.contains(ip)) {
                            let p = start + i as u64;
                            return if p >= until { Hit::At(p) } else { Hit::None };
                        }
                    }
                }
            }
            k -= n;
            looked += n * STRIDE;
            if looked >= POLL && interrupted() {
                return Hit::Interrupted(start.max(until));
            }
            looked %= POLL;
        }
        Hit::None
    }
}

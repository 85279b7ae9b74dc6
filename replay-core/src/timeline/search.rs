//! The next or previous position at which any address of a set executes (breakpoints): each
//! block is checked against the set once per search, then every run costs one lookup of its
//! block, and only a block holding an address is looked into.

use std::collections::HashSet;

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
        let Some((mut run, mut start)) = self.locate(from) else {
            return Hit::None;
        };
        let mut skip = (from - start) as usize;
        while start < until {
            let b = self.runs[run];
            if holding[b as usize] {
                let at = self.blocks.ips(b).iter().skip(skip).position(|ip| set.contains(ip));
                if let Some(i) = at {
                    let p = start + (skip + i) as u64;
                    return if p < until { Hit::At(p) } else { Hit::None };
                }
            }
            skip = 0;
            start += self.blocks.len(b) as u64;
            run += 1;
            if run % POLL == 0 && interrupted() {
                return Hit::Interrupted(start.min(until));
            }
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
        let Some((mut run, mut start)) = self.locate(from - 1) else {
            return Hit::None;
        };
        // Instructions of the run at `from - 1` looked at: up to and including it.
        let mut take = (from - start) as usize;
        loop {
            let b = self.runs[run];
            if holding[b as usize] {
                let at = self.blocks.ips(b)[..take].iter().rposition(|ip| set.contains(ip));
                if let Some(i) = at {
                    let p = start + i as u64;
                    return if p >= until { Hit::At(p) } else { Hit::None };
                }
            }
            if run == 0 || start <= until {
                return Hit::None;
            }
            run -= 1;
            let n = self.blocks.len(self.runs[run]);
            start -= n as u64;
            take = n as usize;
            if run % POLL == 0 && interrupted() {
                return Hit::Interrupted(start.max(until));
            }
        }
    }
}

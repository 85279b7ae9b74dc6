//! The history as positions 0..N (the timeline layer of docs/design.md): position → instruction address, and
//! the queries reverse execution needs (the next or previous position at which any address
//! of a set executes).
//!
//! Not an array of every address: the flow decoder reports runs (instructions one after
//! another in memory), and runs repeat (loops, calls of the same function), so each distinct
//! run is a *block* whose addresses are decoded once (`blocks`), and the history is the
//! sequence of its runs' blocks, each told by which successor of the block before it it is,
//! mostly in half a byte (`runs`), with the position of every [`STRIDE`]th run. A position is
//! found by a binary search over those marks and a walk of at most `STRIDE` runs; a
//! [`Cursor`] follows a pass that moves one position at a time in constant time; a search for
//! breakpoints looks at each run once, and at a block's addresses only where the block holds
//! one (`search`).
//!
//! Runs average 5–15 instructions on real programs, so this costs about a tenth of a byte an
//! instruction, less than the trace (`docs/benchmarks.md`).

mod blocks;
mod build;
pub mod cache;
mod code_check;
mod cursor;
mod first;
pub mod parallel;
mod prefix;
mod runs;
mod search;
#[cfg(test)]
mod tests;
mod window;

use std::sync::Arc;

pub use build::Builder;
pub use cursor::Cursor;
pub use first::first_ip;
pub use prefix::prefix;
pub use search::Hit;
pub use window::{suffix, window};

use crate::flow::FlowEvent;
use blocks::Blocks;
use runs::{Runs, STRIDE};

/// The reconstructed history, indexed by position.
#[derive(Debug, Default, Clone)]
pub struct Timeline {
    blocks: Blocks,
    /// The block of each run, in the order they ran, and the first position of every
    /// [`STRIDE`]th.
    runs: Runs,
    events: Vec<FlowEvent>,
    len: u64,
}

impl Timeline {
    /// A history of these addresses, one position each, without decoding anything (tests, and
    /// histories given as addresses).
    pub fn from_ips(ips: Vec<u64>) -> Arc<Timeline> {
        let mut t = Timeline::default();
        for ip in ips {
            t.push_ip(ip);
        }
        Arc::new(t)
    }

    /// Appends one instruction at `ip` as a run of its own, undecoded (the faulting
    /// instruction of a run a fault ended, which may not even decode).
    pub fn push_ip(&mut self, ip: u64) {
        let block = self.blocks.single(ip);
        self.push_run(block, 1);
    }

    /// Appends a run of `block`, whose length (`len`) the caller knows.
    #[inline]
    fn push_run(&mut self, block: u32, len: u32) {
        debug_assert_eq!(len, self.blocks.len(block));
        self.runs.push(block, self.len);
        self.len += u64::from(len);
    }

    /// Number of instructions in the history.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the history holds no instruction.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of instruction slots in the table of blocks ([`Cursor::at`]): a block's
    /// instructions once however often it ran.
    pub fn slots(&self) -> usize {
        self.blocks.ips.len()
    }

    /// The address of every instruction slot ([`Self::slots`]), in slot order: what a pass
    /// that decodes each distinct instruction once reads.
    pub fn slot_ips(&self) -> &[u64] {
        &self.blocks.ips
    }

    /// The events, in order; each knows its position.
    pub fn events(&self) -> &[FlowEvent] {
        &self.events
    }

    /// The address of the instruction at `position`.
    pub fn ip_at(&self, position: u64) -> Option<u64> {
        let (_, start, block) = self.locate(position)?;
        Some(self.blocks.ips(block)[(position - start) as usize])
    }

    /// The chunk of runs holding `position` ([`runs`]).
    fn chunk_of(&self, position: u64) -> usize {
        self.runs.mark_positions.partition_point(|&m| m <= position) - 1
    }

    /// The run holding `position`: its number, its first position and its block.
    fn locate(&self, position: u64) -> Option<(usize, u64, u32)> {
        if position >= self.len {
            return None;
        }
        let k = self.chunk_of(position);
        let (mut run, mut start) = (k * STRIDE, self.runs.mark_positions[k]);
        for block in self.runs.iter_from(run) {
            let n = self.blocks.len(block) as u64;
            if position < start + n {
                return Some((run, start, block));
            }
            start += n;
            run += 1;
        }
        None
    }

    /// Resident bytes: the runs, the marks, the blocks' addresses and the events.
    pub fn heap_bytes(&self) -> usize {
        self.runs.heap_bytes() + self.blocks.heap_bytes() + self.events.capacity() * size_of::<FlowEvent>()
    }

    /// Every address, position by position.
    pub fn ips(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs.iter_from(0).flat_map(|b| self.blocks.ips(b).iter().copied())
    }

    /// Every address from `position` on, found without walking the positions before it.
    pub fn ips_from(&self, position: u64) -> impl Iterator<Item = u64> + '_ {
        let (run, start) = self.locate(position).map_or((usize::MAX, position), |(r, s, _)| (r, s));
        let runs = (run != usize::MAX)
            .then(|| self.runs.iter_from(run))
            .into_iter()
            .flatten();
        runs.flat_map(|b| self.blocks.ips(b).iter().copied())
            .skip((position - start) as usize)
    }

    /// Where this history and `other` first differ (instructions or events), if they do:
    /// how a timeline built in parallel is checked against a plain decode's.
    pub fn first_difference(&self, other: &Timeline) -> Option<String> {
        if let Some((p, (a, b))) = self.ips().zip(other.ips()).enumerate().find(|(_, (a, b))| a != b) {
            return Some(format!("position {p}: {a:#x} against {b:#x}"));
        }
        if self.len != other.len {
            return Some(format!("{} instructions against {}", self.len, other.len));
        }
        if let Some((a, b)) = self.events.iter().zip(&other.events).find(|(a, b)| a != b) {
            return Some(format!("event {a} against {b}"));
        }
        if self.events.len() != other.events.len() {
            return Some(format!("{} events against {}", self.events.len(), other.events.len()));
        }
        None
    }

    /// How many runs and distinct blocks.
    pub fn counts(&self) -> (usize, usize) {
        (self.runs.count, self.blocks.count())
    }
}

//! What a watchpoint's search (`state::watch`) needs of the engine: the index of written
//! addresses the anchored engine keeps, a walker of its own, and a switch to go without the
//! index for a comparison.

use super::super::anchored::Anchored;
use super::super::walker::Walker;
use super::Values;

impl Values {
    /// Makes a watchpoint's search walk every instruction, as without anchors: the stops
    /// must be the same, which is what a test compares.
    pub fn walk_every_instruction_for_watches(&mut self) {
        self.watch_index = false;
    }

    /// The bytes the index of written addresses holds, and how many stretches it covers of
    /// how many (`None` without anchors: there is no index).
    pub fn write_index_size(&self) -> Option<(usize, usize, usize)> {
        let a = self.anchored.as_ref()?;
        let (bytes, done) = a.writes().size();
        Some((bytes, done, a.exact_positions().count()))
    }

    /// The anchored engine, for a recording with anchors.
    pub(in crate::state) fn anchored_engine(&self) -> Option<&Anchored> {
        self.anchored.as_ref()
    }

    /// A walker of its own over the same history and inputs (a watchpoint's search).
    pub(in crate::state) fn new_walker(&self) -> Walker {
        Walker::new(self.walker.shared.clone())
    }
}

//! The states kept along the history in one direction, every [`COARSE`] positions, shared
//! by the questions' walks and the background fill ([`super::fill`]): a walk starts from the
//! nearest one, so once the fill has been through a stretch, a stop anywhere in it walks at
//! most [`COARSE`] positions each way.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use super::super::memory::Footprint;
use super::super::State;

/// Positions between kept states: a question next to one walks at most this far (about
/// 12 ms at 45 ns a position).
pub(in crate::state) const COARSE: u64 = 1 << 18;

/// The kept states of one direction, by position.
#[derive(Default)]
pub(super) struct Kept {
    states: Mutex<BTreeMap<u64, State>>,
}

impl Kept {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, State>> {
        self.states.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kept state nearest `towards` in `lo..=hi` (the highest when `towards_high`).
    pub(super) fn nearest(&self, lo: u64, hi: u64, towards_high: bool) -> Option<(u64, State)> {
        let states = self.lock();
        let mut range = states.range(lo..=hi);
        let found = if towards_high { range.next_back() } else { range.next() };
        found.map(|(&q, s)| (q, s.clone()))
    }

    /// Keeps `st` at `at` (a state already there is the same: it is left).
    pub(super) fn keep(&self, at: u64, st: &State) {
        self.lock().entry(at).or_insert_with(|| st.clone());
    }

    /// How many states are kept, and their memory added to `footprint`.
    pub(super) fn count(&self, footprint: &mut Footprint) -> usize {
        let states = self.lock();
        states.values().for_each(|s| s.mem.footprint(footprint));
        states.len()
    }
}

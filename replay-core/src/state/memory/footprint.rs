//! What states' memory costs, counting each allocation once however many states share it:
//! checkpoints share nearly everything with their neighbours, so a sum of their sizes says
//! nothing about what they hold (the cost report and `rtit check-values`).

use rustc_hash::FxHashSet;

/// Allocations seen so far and their bytes.
#[derive(Default)]
pub struct Footprint {
    seen: FxHashSet<usize>,
    bytes: usize,
}

impl Footprint {
    /// Nothing seen.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts `bytes` (plus the shared pointer's counts) for the allocation at `ptr` if it
    /// was not seen yet; whether it was new, so that the caller counts what it holds once.
    pub(super) fn first<T: ?Sized>(&mut self, ptr: *const T, bytes: usize) -> bool {
        let new = self.seen.insert(ptr.cast::<()>() as usize);
        if new {
            self.bytes += bytes + 2 * size_of::<usize>();
        }
        new
    }

    /// Bytes counted.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

//! Sync points for `sync-points.bin` (the format and why:
//! `rtit_replay_core::recording::sync_points`): once [`EVERY`] positions have passed since
//! the last, the first batch end at which the pending block runs from its first instruction
//! in user mode and the unit model holds nothing back ([`crate::model::UnitModel::sync_registers`]) is
//! noted: the position, the pending block's first address, the trace offset of the next
//! packet and the two compression registers. A check at each batch end, none on the path
//! from one block to the next; where one finds none, a check after each block until one is
//! found (a loop can leave the same bits pending at every batch end).

use rtit_replay_core::recording::sync_points::{encode, SyncPoint, MAGIC};

use super::{Engine, Kernel};

/// Positions from one sync point to the next, at least: a replay decodes at most this many
/// more than it needs from the last one before where it starts.
pub const EVERY: u64 = 1 << 22;

/// The points noted and not yet taken, and what finding the next needs.
pub(super) struct SyncNotes {
    /// The next point is due at this position or after.
    due: u64,
    /// Trace bytes taken from the model so far: the offset of its output's first byte.
    taken: u64,
    /// Encoded points not yet taken (the file's magic first).
    out: Vec<u8>,
    /// A batch end found a point due and none there: look after each block.
    searching: bool,
}

impl SyncNotes {
    pub(super) fn new() -> Self {
        Self {
            due: 0,
            taken: 0,
            out: MAGIC.to_vec(),
            searching: false,
        }
    }

    /// After a batch end's look at `position`: still due, so the search goes on a block at
    /// a time.
    pub(super) fn missed(&mut self, position: u64) {
        self.searching = self.due(position);
    }

    /// Whether a point is due at `position` and the last batch end did not find one.
    #[inline]
    pub(super) fn searching(&self, position: u64) -> bool {
        self.searching && self.due(position)
    }

    /// `bytes` of the trace were taken from the model.
    pub(super) fn taken(&mut self, bytes: usize) {
        self.taken += bytes as u64;
    }

    /// Whether a point is due at `position`.
    #[inline]
    pub(super) fn due(&self, position: u64) -> bool {
        position >= self.due
    }
}

impl Engine {
    /// Notes a sync point here if the engine and the model are at one (see the module).
    pub(super) fn try_sync(&mut self) {
        let (Some(p), None, Kernel::User) = (self.pending, self.delivered, self.kernel) else {
            return;
        };
        let Some(model) = self.model.as_ref().filter(|_| p.first == 0 && !self.ended) else {
            return;
        };
        let Some((last_lip, last_call_nlip)) = model.sync_registers() else {
            return;
        };
        let point = SyncPoint {
            position: model.traced(),
            ip: self.hot[p.id as usize].start,
            offset: self.sync.taken + model.output_len() as u64,
            last_lip,
            last_call_nlip,
        };
        encode(&point, &mut self.sync.out);
        self.sync.due = point.position + EVERY;
        self.sync.searching = false;
    }

    /// The sync points noted since last taken (the file's magic first).
    pub fn take_sync(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.sync.out)
    }
}

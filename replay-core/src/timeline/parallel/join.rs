//! Appending the part of a stretch's timeline between two cuts to the whole: its runs'
//! instructions (blocks found again or added to the whole's), its events with their
//! positions moved to the whole's.

use super::super::{Builder, Timeline};
use super::stretch::Cut;
use crate::flow::FlowSink;

impl Builder<'_> {
    /// Appends what `part` holds from `from` (a clean point at the whole's current length) to
    /// `to` (another, or the end of `part`).
    pub(super) fn append(&mut self, part: &Timeline, from: &Cut, to: Option<&Cut>) {
        let base = self.len();
        // The run pending at `from` begins the runs after it: those instructions came before.
        let mut skip = from.pending.map_or(0, |p| p.1) as usize;
        let end = to.map_or(part.runs.count, |c| c.runs);
        // Each of the part's blocks is found again in the whole once, not at every run, and
        // kept with its length so that a run reads nothing more.
        let mut remap = vec![(u32::MAX, 0); part.blocks.count()];
        let from_run = from.runs.min(end);
        for b in part.runs.iter_from(from_run).take(end - from_run) {
            if skip > 0 {
                let ips = part.blocks.ips(b);
                if skip >= ips.len() {
                    skip -= ips.len();
                } else {
                    self.push_ips(&ips[skip..]);
                    skip = 0;
                }
                continue;
            }
            let (mut block, mut len) = remap[b as usize];
            if block == u32::MAX {
                let ips = part.blocks.ips(b);
                (block, len) = (self.intern(ips), ips.len() as u32);
                remap[b as usize] = (block, len);
            }
            self.push_sized(block, len);
        }
        if let Some((ip, n)) = to.and_then(|c| c.pending) {
            let ips = self.walk_ips(ip, n);
            if skip < ips.len() {
                self.push_ips(&ips[skip..]);
            }
        }
        let events = to.map_or(part.events.len(), |c| c.events);
        for e in &part.events[from.events.min(events)..events] {
            let mut e = e.clone();
            e.position = e.position - from.position + base;
            self.event(e);
        }
    }
}

//! A stretch's writes, block by block, for a watchpoint's search that reaches a stretch the
//! background fill has not walked yet: the same forward walk from the exact state below, with
//! nothing kept but what it writes (`memory::log`). The plain walk is about three times as
//! fast as the search's own, which looks at every instruction's operands, and the stretches
//! the search will need next are walked beside it, one a core; the search then walks only the
//! blocks that write the watched bytes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::super::memory::log::Logging;
use super::super::walker::{Shared, Walker};
use super::super::watch::index::{StretchWrites, WriteIndex, BLOCK};
use super::exact::Exact;
use super::side::CANCEL_EVERY;
use super::{Anchored, Resume, POLL};

impl Anchored {
    /// What stretch `i` writes, block by block: from the fill if it walked it, else walked
    /// now, with the first stretches of `next` the fill has not walked either (the search's
    /// next ones) on the other cores; `None` if `interrupted` said to stop first.
    pub(in crate::state) fn stretch_writes(
        &self,
        i: usize,
        next: impl Iterator<Item = usize>,
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Option<&StretchWrites> {
        if self.writes.get(i).is_none() {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let missing = |j: &usize| self.writes.get(*j).is_none();
            let walks: Vec<usize> = std::iter::once(i).chain(next.filter(missing)).take(cores).collect();
            let cancel = AtomicBool::new(false);
            // The fill waits meanwhile, as for a question: the search comes first.
            self.pause.store(true, Ordering::Relaxed);
            let _resume = Resume(&self.pause);
            std::thread::scope(|s| {
                let threads: Vec<_> = (walks.iter())
                    .map(|&j| {
                        let (shared, exact, writes) = (self.shared.clone(), self.exact.clone(), self.writes.clone());
                        let cancel = &cancel;
                        s.spawn(move || walk(&shared, &exact, &writes, j, cancel))
                    })
                    .collect();
                while !threads.iter().all(|t| t.is_finished()) {
                    if interrupted() {
                        cancel.store(true, Ordering::Relaxed);
                    }
                    std::thread::sleep(POLL);
                }
            });
        }
        self.writes.get(i)
    }
}

/// Walks stretch `i` forwards and sets its writes in `writes`, unless `cancel` is set first.
fn walk(shared: &Arc<Shared>, exact: &Exact, writes: &WriteIndex, i: usize, cancel: &AtomicBool) {
    let positions = exact.positions();
    let Some(&bottom) = positions.get(i) else { return };
    let top = match positions.get(i + 1) {
        Some(&t) => t,
        None => shared.history.len().saturating_sub(1),
    };
    let mut st = exact.forward(i).clone();
    let mut walker = Walker::new(shared.clone());
    let log = Logging::start();
    let mut found = StretchWrites::default();
    let mut at = bottom;
    while at < top {
        if (at - bottom) % CANCEL_EVERY == 0 && cancel.load(Ordering::Relaxed) {
            return;
        }
        // To the next block's end (a multiple of CANCEL_EVERY too) or the top.
        let to = (bottom + (at - bottom) / BLOCK * BLOCK + BLOCK).min(top);
        walker.forward_to(&mut st, at, to);
        at = to;
        if (at - bottom) % BLOCK == 0 || at == top {
            found.push(log.take());
        }
    }
    writes.set(i, found);
}

//! Values between exact states (issue 40): where the recording holds whole states along the
//! history (its anchors, besides the start and end snapshots), the values at a position are
//! those the forward pass reaches from the exact state at or before it, merged with those the
//! backward pass reaches from the exact state after it. Each stretch between two exact states
//! is its own: nothing outside it changes an answer inside it, so every answer is final the
//! moment it is computed, and a question costs at most a stretch's walk each way, both ways
//! at once on two cores, whatever the history's length.
//!
//! At an exact state's own position the answer is that state: what the recorder read there,
//! completed with what a short walk next to it works out ([`exact`]: a ymm register's upper
//! half, which QEMU's gdbstub does not give). An end snapshot
//! without the general registers (a program that exited under QEMU: no stop to read them
//! at) is the end of the last stretch instead, its registers the forward pass's.
//!
//! The backward pass starts from each exact state without its read-only ranges: a store
//! through an unknown address makes all other memory unknown, and keeping the read-only
//! pages (python3's libraries: thousands) made every such step copy them, 3 µs a step
//! where 80 ns is the rule. The forward pass keeps them, and it alone needs them.
//!
//! The passes' chains ([`super::engine`]) serve recordings without anchors: there the answers
//! between the snapshots become final only when the chains are complete.

mod exact;
mod fill;
mod kept;
mod side;
mod writes;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::known::Known;
use super::memory::Footprint;
use super::walker::{Shared, Walker};
use super::watch::index::WriteIndex;
use super::State;
use exact::Exact;
pub(crate) use exact::LOOKBACK;
use fill::{Fill, Sources, Verdicts};
use kept::Kept;
pub(in crate::state) use kept::COARSE;
use side::{Direction, Side};

/// A walk longer than this runs on a thread of its own, beside the other direction's.
const ON_A_THREAD: u64 = 1 << 16;

/// How often a question that walks on threads looks at whether it is interrupted.
const POLL: Duration = Duration::from_millis(5);

/// Values from the exact states on either side of each position.
pub(super) struct Anchored {
    shared: Arc<Shared>,
    /// The exact states by position, in order; the first at position 0.
    exact: Arc<Exact>,
    forward: Side,
    backward: Side,
    /// The states kept each way, shared with the fill.
    kept: (Arc<Kept>, Arc<Kept>),
    /// Set while a question walks, for the fill to wait.
    pause: Arc<AtomicBool>,
    /// The stretches whose backward walk teaches nothing ([`fill`]).
    verdicts: Arc<Verdicts>,
    /// What each stretch writes, as the fill's forward walks find it.
    writes: Arc<WriteIndex>,
    fill: Option<Fill>,
}

/// How an anchored engine did (for the engine's statistics).
pub(super) struct AnchoredStats {
    pub(super) forward_steps: u64,
    pub(super) backward_steps: u64,
    pub(super) states: usize,
    pub(super) bytes: usize,
    /// Stretches whose backward walk is skipped, and stretches the fill walked forwards.
    pub(super) settled: (usize, usize),
}

impl Anchored {
    /// An engine over `shared` from `exact` (position 0's state first, then in order of
    /// position, each position once).
    pub(super) fn new(shared: Arc<Shared>, exact: Vec<(u64, State)>) -> Self {
        let kept = (Arc::new(Kept::default()), Arc::new(Kept::default()));
        Self {
            verdicts: Arc::new(Verdicts::new(exact.len())),
            writes: Arc::new(WriteIndex::new(exact.len())),
            exact: Arc::new(Exact::new(shared.clone(), exact)),
            forward: Side::new(Walker::new(shared.clone()), Direction::Forwards, kept.0.clone()),
            backward: Side::new(Walker::new(shared.clone()), Direction::Backwards, kept.1.clone()),
            kept,
            pause: Arc::new(AtomicBool::new(false)),
            fill: None,
            shared,
        }
    }

    /// Starts the background fill ([`fill`]), once.
    pub(super) fn start_fill(&mut self) {
        if self.fill.is_none() {
            self.fill = Some(Fill::spawn(Sources {
                shared: self.shared.clone(),
                exact: self.exact.clone(),
                forward: self.kept.0.clone(),
                backward: self.kept.1.clone(),
                pause: self.pause.clone(),
                verdicts: self.verdicts.clone(),
                writes: self.writes.clone(),
            }));
        }
    }

    /// Skips no backward walk ([`fill::Verdicts::ignore`]).
    pub(super) fn walk_back_everywhere(&mut self) {
        self.verdicts.ignore();
    }

    /// The flag a question sets while it walks, for the fill to wait.
    pub(super) fn pause_flag(&self) -> Arc<AtomicBool> {
        self.pause.clone()
    }

    /// Waits the fill (once started) for `flag` too: another engine's questions, over part
    /// of the same history, come first as well.
    pub(super) fn share_pause(&mut self, flag: Arc<AtomicBool>) {
        debug_assert!(self.fill.is_none(), "before the fill starts");
        self.pause = flag;
    }

    /// Positions of the exact states.
    pub(super) fn exact_positions(&self) -> impl Iterator<Item = u64> + '_ {
        self.exact.positions().iter().copied()
    }

    /// Both passes' states at `p`, or `None` if `interrupted` said to stop first (what was
    /// walked is kept: asking again goes on from there).
    pub(super) fn at(&mut self, p: u64, interrupted: &mut dyn FnMut() -> bool) -> Option<Known> {
        let space = self.shared.space.clone();
        let positions = self.exact.positions();
        let i = positions.partition_point(|q| *q <= p) - 1;
        if positions[i] == p && (i == 0 || self.exact.whole(i)) {
            let st = self.exact.forward(i);
            return Some(Known::new(st.clone(), st.clone(), space));
        }
        // The stretch: from the exact state below to the one above (at `p` itself, for an
        // end snapshot without the registers).
        let (j, k) = match positions[i] == p {
            true => (i - 1, Some(i)),
            false => (i, Some(i + 1).filter(|&k| k < positions.len())),
        };
        let (below, st) = (&positions[j], self.exact.forward(j));
        // A settled stretch: the backward walk would teach nothing ([`fill`]), so only the
        // forward one is made, and read as both passes (a cause asked for is its own).
        let settled = self.verdicts.settled(j);
        let above = k.filter(|_| !settled).map(|k| (positions[k], self.exact.backward(k)));
        let cancel = AtomicBool::new(false);
        let (forward, backward) = (&mut self.forward, &mut self.backward);
        let unknown = State::unknown();
        // No exact state above (a recording without an end snapshot): the backward pass
        // knows nothing there.
        let (top, end) = above.map_or((None, &unknown), |(q, s)| (Some(q), s));
        let mut walk_back = |cancel: &AtomicBool| match top {
            Some(top) => backward.at(p, top, end, cancel),
            None => Some(State::unknown()),
        };
        let long = p - below > ON_A_THREAD || top.is_some_and(|t| t - p > ON_A_THREAD);
        // The fill waits while a question walks: the question comes first.
        self.pause.store(true, Ordering::Relaxed);
        let _resume = Resume(&self.pause);
        let (f, b) = match long {
            // A long walk: both on threads, this one watching for an interruption.
            true => std::thread::scope(|s| {
                let f = s.spawn(|| forward.at(p, *below, st, &cancel));
                let b = s.spawn(|| walk_back(&cancel));
                while !(f.is_finished() && b.is_finished()) {
                    if interrupted() {
                        cancel.store(true, Ordering::Relaxed);
                    }
                    std::thread::sleep(POLL);
                }
                let join = |h: std::thread::ScopedJoinHandle<'_, Option<State>>| h.join().ok().flatten();
                (join(f), join(b))
            }),
            false => (forward.at(p, *below, st, &cancel), walk_back(&cancel)),
        };
        let f = f?;
        let b = if settled { f.clone() } else { b? };
        Some(Known::new(f, b, space))
    }

    /// The stretch holding the crossing from `p` to `p + 1`: its index and its first and
    /// last positions (`None` past the last stretch).
    pub(super) fn stretch_of(&self, p: u64) -> Option<(usize, u64, u64)> {
        let positions = self.exact.positions();
        let i = positions.partition_point(|q| *q <= p).checked_sub(1)?;
        let top = match positions.get(i + 1) {
            Some(&t) => t,
            None => self.shared.history.len().saturating_sub(1),
        };
        (p < top).then_some((i, positions[i], top))
    }

    /// What each stretch writes, as far as the fill has walked.
    pub(super) fn writes(&self) -> &WriteIndex {
        &self.writes
    }

    /// Positions the background fill walked, and in all ((0, 0) before it starts).
    pub(super) fn filled(&self) -> (u64, u64) {
        (self.fill.as_ref()).map_or((0, 0), |f| (f.walked.load(Ordering::Relaxed).min(f.total), f.total))
    }

    /// Steps walked and states held.
    pub(super) fn stats(&self) -> AnchoredStats {
        let mut footprint = Footprint::new();
        let mut states = 0;
        for s in self.exact.held().chain(self.forward.kept()).chain(self.backward.kept()) {
            states += 1;
            s.mem.footprint(&mut footprint);
        }
        states += self.kept.0.count(&mut footprint) + self.kept.1.count(&mut footprint);
        AnchoredStats {
            forward_steps: self.forward.steps(),
            backward_steps: self.backward.steps(),
            states,
            bytes: footprint.bytes() + states * size_of::<State>(),
            settled: self.verdicts.count(),
        }
    }
}

/// Whether `st` knows the general registers and the stack pointer: a snapshot that holds
/// every register the recorder could read, not the instruction pointer alone.
pub(super) fn general_registers(st: &State) -> bool {
    use super::reg::{RAX, RBP, RBX, RCX, RDI, RDX, RSI, RSP};
    [RAX, RBX, RCX, RDX, RSI, RDI, RBP, RSP]
        .into_iter()
        .all(|r| st.regs.get(r).is_some())
}

/// Lets the fill go on when dropped.
struct Resume<'a>(&'a AtomicBool);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

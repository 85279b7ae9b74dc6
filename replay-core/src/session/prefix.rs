//! The history's beginning, served while the whole of it is decoded (issue 40, "the end at
//! once"). A dynamically linked program stops gdb at each library its loader loads, in its
//! first instructions: a `continue` from position 0 meets those stops before anything else.
//! The decoding thread first decodes the trace's beginning alone, up to an anchor
//! ([`crate::timeline::prefix`]), and hands it over with a state layer of its own over the
//! stretches between the start and that anchor, whose answers are those the whole history
//! gives there (each stretch between two exact states is its own, [`crate::state`]). Moves
//! inside it are answered from it; a `continue` that finds no breakpoint there goes on to
//! the end at once where the recording's list of the code each stretch ran allows it
//! ([`super::early_end`]), and otherwise waits for the whole history, as everything else
//! does. Once the whole is decoded its beginning is compared with this one: a difference is
//! an error, never an answer. The values in the beginning are still taken from it then:
//! they are the whole's, and the walks a stop there did need not be done again.

use std::collections::HashSet;
use std::sync::Arc;

use super::anchor_states::anchor_states;
use super::open::{barriers, Work};
use super::{Session, Stop};
use crate::state::{self, Known, Values};
use crate::timeline::{Hit, Timeline};

/// The beginning ends at the first anchor this many positions in, or further.
const AT_LEAST: u64 = 1 << 22;

/// The history's beginning and the state layer over it.
pub(super) struct Prefix {
    /// Positions below this are answered from it: up to the anchor that ends it.
    upto: u64,
    timeline: Arc<Timeline>,
    values: Values,
    /// The answer at the position asked last.
    known: Option<(u64, Known)>,
}

impl Prefix {
    /// The beginning of `work`'s history, for a whole (not `partial`) recording with an
    /// anchor at least [`AT_LEAST`] positions in; `None` otherwise, or if that anchor is
    /// most of the trace in.
    pub(super) fn decode(work: &Work) -> Option<Prefix> {
        let (anchors, maps) = work.prepared.anchors.as_ref().filter(|_| !work.partial)?;
        let k = anchors.list.iter().position(|a| a.position >= AT_LEAST)?;
        let top = anchors.list[k].position;
        let gaps = work.recording.gaps();
        let input = work.recording.decode_input(&work.trace, &work.space, &gaps);
        let timeline = Arc::new(crate::timeline::prefix(&input, top + 1)?);
        let p = &work.prepared;
        // A page file that fails here fails the whole history's states too, with the error.
        let exact = anchor_states(&anchors.first(k + 1), maps, &p.start, &p.map_changes, &work.space).ok()?;
        let (hard_barriers, soft_barriers) = barriers(&timeline, false);
        let inputs = state::Inputs {
            anchors: exact,
            end: None,
            hard_barriers,
            soft_barriers,
            map_changes: p.map_changes.clone(),
            syscalls: p.syscalls.clone(),
            results: p.results.clone(),
            signals: p.signals.clone(),
            cpuid: p.cpuid.clone(),
            start: p.start.clone(),
            fault: false,
            history: timeline.clone(),
        };
        Some(Prefix {
            upto: top + 1,
            timeline,
            // Held: no background work beside the whole decode, only the stops' walks.
            values: Values::held(work.space.clone(), inputs),
            known: None,
        })
    }

    /// Sets the flag its questions set while they walk to `flag`.
    pub(super) fn share_pause(&mut self, flag: Arc<std::sync::atomic::AtomicBool>) {
        self.values.share_pause(flag);
    }

    /// The positions it answers, and its history (to compare with the whole one's).
    pub(super) fn history(&self) -> (u64, Arc<Timeline>) {
        (self.upto, self.timeline.clone())
    }
}

/// The first position below `upto` at which `whole` differs from its beginning `prefix`.
pub(super) fn first_difference(prefix: &Timeline, whole: &Timeline, upto: u64) -> Option<u64> {
    let n = upto.min(prefix.len());
    if whole.len() < n {
        return Some(whole.len());
    }
    (prefix.ips().zip(whole.ips()).take(n as usize))
        .position(|(a, b)| a != b)
        .map(|p| p as u64)
}

impl Session {
    /// The beginning, if `position` is in it (waiting for the beginning if it is still
    /// being decoded).
    fn prefix_serving(&mut self, position: u64) -> Option<&mut Prefix> {
        // A whole history that failed (its beginning differing from this one's, say) is
        // no ground for any answer.
        if matches!(self.history.now(), Some(Err(_))) {
            self.prefix = None;
            return None;
        }
        if self.prefix.is_none() {
            self.prefix = self.history.take_prefix();
        }
        self.prefix.as_mut().filter(|p| position < p.upto)
    }

    /// Whether the beginning answers at `position`.
    pub(super) fn prefix_holds(&mut self, position: u64) -> bool {
        self.prefix_serving(position).is_some()
    }

    /// [`Self::prefix_serving`] for a move: only while the whole history is not decoded.
    fn prefix_moving(&mut self, position: u64) -> Option<&mut Prefix> {
        match self.ready() {
            true => None,
            false => self.prefix_serving(position),
        }
    }

    /// What is known at the current position from the beginning, if it answers there.
    pub(super) fn known_from_prefix(&mut self) -> Option<&Known> {
        let position = self.position;
        let p = self.prefix_serving(position)?;
        if p.known.as_ref().map(|(q, _)| *q) != Some(position) {
            p.known = Some((position, p.values.at(position)?));
        }
        p.known.as_ref().map(|(_, k)| k)
    }

    /// Works out the values at the current position from the beginning, if it answers
    /// there; whether they are final (`None`: it does not answer there).
    pub(super) fn settle_prefix(&mut self, interrupted: &mut dyn FnMut() -> bool) -> Option<bool> {
        let position = self.position;
        self.prefix_serving(position)?;
        // The stop comes first: the whole decode waits meanwhile.
        let (history, p) = (&self.history, self.prefix.as_mut()?);
        Some(history.pausing_decode(|| p.values.settle(position, interrupted)))
    }

    /// The instruction at `position` from the beginning, if it is there.
    pub(super) fn ip_from_prefix(&self, position: u64) -> Option<u64> {
        let p = self.prefix.as_ref().filter(|p| position < p.upto)?;
        (!self.ready()).then(|| p.timeline.ip_at(position)).flatten()
    }

    /// A `continue` before the whole history is decoded: to a breakpoint in the beginning,
    /// else to the end if no breakpoint can run before it; `None` to wait for the whole.
    pub(super) fn continue_early(
        &mut self,
        breakpoints: &HashSet<u64>,
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Option<Stop> {
        if self.ready() {
            return None;
        }
        let from = self.position + 1;
        let mut beyond = from;
        if let Some(p) = self.prefix_moving(self.position) {
            let upto = p.upto;
            match p.timeline.next_hit(from, upto, breakpoints, &mut *interrupted) {
                Hit::At(q) => return Some(self.moved(q, Stop::Breakpoint)),
                Hit::Interrupted(q) => return Some(self.moved(q, Stop::Interrupted)),
                Hit::None => beyond = upto.max(from),
            }
        }
        (self.end_at_once(beyond, breakpoints)).or_else(|| self.continue_in_windows(beyond, breakpoints))
    }

    /// A `reverse-continue` inside the beginning before the whole history is decoded: to
    /// the breakpoint before, or to position 0; `None` outside it.
    pub(super) fn reverse_early(
        &mut self,
        breakpoints: &HashSet<u64>,
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Option<Stop> {
        let from = self.position;
        let p = self.prefix_moving(from)?;
        Some(match p.timeline.previous_hit(from, 0, breakpoints, &mut *interrupted) {
            Hit::At(q) => self.moved(q, Stop::Breakpoint),
            Hit::Interrupted(q) => self.moved(q, Stop::Interrupted),
            Hit::None => self.moved(0, Stop::Begin),
        })
    }

    /// One step forwards inside the beginning before the whole history is decoded; `None`
    /// outside it.
    pub(super) fn step_early(&mut self) -> Option<Stop> {
        let next = self.position + 1;
        self.prefix_moving(next)?;
        Some(self.moved(next, Stop::Step))
    }

    fn moved(&mut self, position: u64, stop: Stop) -> Stop {
        self.position = position;
        self.known = None;
        stop
    }
}

//! The history's end, served while the whole of it is decoded (issue 40, "the end at
//! once"): a `continue` to the end of a long run that exited, and `bt` there, answer within
//! about a second instead of after the whole decode. QEMU 7.2 reads no registers at
//! `exit_group`, so the end's values come from the last anchor: the decoding thread decodes
//! the trace from the recorder's last sync point before that anchor to the end
//! ([`crate::timeline::suffix`]), exactly as the whole decode goes there, and checks that it
//! ends at the instruction count the recorder wrote. A state layer over it has the anchor
//! and the end snapshot as its exact states, the same as the whole history's there, so its
//! answers at and after the anchor are the whole's; before the anchor it knows no state, so
//! it answers nothing there. Once the whole is decoded its end is compared with this one: a
//! difference is an error, never an answer.

use std::collections::HashSet;
use std::sync::Arc;

use super::anchor_states::anchor_states;
use super::open::{barriers, Work};
use super::{Session, Stop};
use crate::recording::EndState;
use crate::state::{self, Known, State, Values};
use crate::timeline::{Hit, Timeline};

/// The history's end and the state layer over it, positions counted from `base`.
pub(super) struct Suffix {
    /// The whole history's position of this one's first.
    base: u64,
    /// Positions from this one on (the anchor's) are answered from it.
    from: u64,
    timeline: Arc<Timeline>,
    values: Values,
    /// The answer at the position asked last.
    known: Option<(u64, Known)>,
}

impl Suffix {
    /// The end of `work`'s history, for a whole (not `partial`) recording of a run that
    /// exited, with anchors and sync points; `None` otherwise, or if the stretch to decode
    /// is most of the trace (the whole decode is then as near) or does not end where the
    /// recorder counted.
    pub(super) fn decode(work: &Work) -> Option<Suffix> {
        let rec = &work.recording;
        let total = rec.manifest.instructions;
        if work.partial || !matches!(rec.manifest.end, EndState::Exited { .. }) {
            return None;
        }
        let (anchors, maps) = work.prepared.anchors.as_ref()?;
        let k = anchors
            .list
            .iter()
            .rposition(|a| a.position > 0 && a.position < total)?;
        let anchor = anchors.list[k].position;
        let points = rec.sync_points().ok()??;
        let point = points.iter().rev().find(|p| p.position <= anchor)?;
        if total - point.position > total / 2 {
            return None;
        }
        let base = point.position;
        let gaps = rec.gaps();
        let input = rec.decode_input(&work.trace, &work.space, &gaps);
        let timeline = Arc::new(crate::timeline::suffix(&input, point));
        // Where the recorder counted: a spin the trace cannot count is left to the whole.
        let unshown: u64 = timeline.events().iter().map(crate::flow::FlowEvent::unshown).sum();
        if base + timeline.len() != total || unshown != 0 {
            return None;
        }
        let p = &work.prepared;
        // The pages of every anchor up to this one make its memory; a page file that fails
        // here fails the whole history's states too, with the error.
        let states = anchor_states(&anchors.first(k + 1), maps, &p.start, &p.map_changes, &work.space).ok()?;
        let (_, mut at_anchor) = states.into_iter().last().filter(|(q, _)| *q == anchor)?;
        let mut end = p.end.as_ref().ok()?.clone()?;
        // The kernel rewrites a registered rseq area at any return to the program; the
        // registration is before this stretch, so the whole's state layer would not see it here.
        let volatile = state::rseq_areas(&p.syscalls);
        at_anchor.mem.set_volatile(&volatile);
        end.mem.set_volatile(&volatile);
        let shift = |q: u64| q.checked_sub(base);
        let (hard_barriers, soft_barriers) = barriers(&timeline, false);
        let inputs = state::Inputs {
            anchors: vec![(anchor - base, at_anchor)],
            end: Some(end),
            hard_barriers,
            soft_barriers,
            map_changes: (p.map_changes.iter())
                .filter_map(|(q, e)| Some((shift(*q)?, e.clone())))
                .collect(),
            syscalls: (p.syscalls.iter())
                .filter_map(|r| {
                    Some(crate::syscall::SyscallRecord {
                        position: shift(r.position)?,
                        ..r.clone()
                    })
                })
                .collect(),
            results: (p.results.iter())
                .filter_map(|r| {
                    Some(crate::recording::InsnResult {
                        position: shift(r.position)?,
                        ..r.clone()
                    })
                })
                .collect(),
            signals: (p.signals.iter())
                .filter_map(|s| {
                    Some(crate::recording::SignalEntry {
                        position: shift(s.position)?,
                        ..s.clone()
                    })
                })
                .collect(),
            cpuid: p.cpuid.clone(),
            // Nothing is known where this stretch begins: only from the anchor on.
            start: State {
                cpu: p.start.cpu,
                ..State::unknown()
            },
            fault: false,
            history: timeline.clone(),
        };
        Some(Suffix {
            base,
            from: anchor,
            timeline,
            // Held: no background work beside the whole decode, only the stops' walks.
            values: Values::held(work.space.clone(), inputs),
            known: None,
        })
    }

    /// The flag its questions set while they walk.
    pub(super) fn pause_flag(&self) -> Option<Arc<std::sync::atomic::AtomicBool>> {
        self.values.pause_flag()
    }

    /// Sets the flag its questions set while they walk to `flag` (the beginning's).
    pub(super) fn share_pause(&mut self, flag: Arc<std::sync::atomic::AtomicBool>) {
        self.values.share_pause(flag);
    }

    /// Its first position in the whole, and its history (to compare with the whole one's).
    pub(super) fn history(&self) -> (u64, Arc<Timeline>) {
        (self.base, self.timeline.clone())
    }

    /// The whole history's last position.
    fn last(&self) -> u64 {
        self.base + self.timeline.len() - 1
    }
}

/// The first position at which `whole` differs from its end `suffix` (which starts at
/// `base`), if it does.
pub(super) fn first_difference(suffix: &Timeline, whole: &Timeline, base: u64) -> Option<u64> {
    if whole.len() != base + suffix.len() {
        return Some(whole.len().min(base + suffix.len()));
    }
    (suffix.ips().zip(whole.ips_from(base)))
        .position(|(a, b)| a != b)
        .map(|p| base + p as u64)
}

impl Session {
    /// The end, if `position` is in what it answers (waiting for it if it is still being
    /// decoded).
    fn suffix_serving(&mut self, position: u64) -> Option<&mut Suffix> {
        if matches!(self.history.now(), Some(Err(_))) {
            self.suffix = None;
            return None;
        }
        if self.suffix.is_none() {
            self.suffix = self.history.take_suffix();
        }
        self.suffix
            .as_mut()
            .filter(|s| s.from <= position && position <= s.last())
    }

    /// What is known at the current position from the end, if it answers there.
    pub(super) fn known_from_suffix(&mut self) -> Option<&Known> {
        let position = self.position;
        let s = self.suffix_serving(position)?;
        let at = position - s.base;
        if s.known.as_ref().map(|(q, _)| *q) != Some(at) {
            s.known = Some((at, s.values.at(at)?));
        }
        s.known.as_ref().map(|(_, k)| k)
    }

    /// Works out the values at the current position from the end, if it answers there;
    /// whether they are final (`None`: it does not answer there).
    pub(super) fn settle_suffix(&mut self, interrupted: &mut dyn FnMut() -> bool) -> Option<bool> {
        let position = self.position;
        let s = self.suffix_serving(position)?;
        let at = position - s.base;
        Some(s.values.settle(at, interrupted))
    }

    /// The instruction at `position` from the end, if it is there and the whole is not.
    pub(super) fn ip_from_suffix(&self, position: u64) -> Option<u64> {
        let s = self.suffix.as_ref().filter(|s| s.base <= position)?;
        (!self.ready()).then(|| s.timeline.ip_at(position - s.base)).flatten()
    }

    /// A `continue` from `from` before the whole history is decoded, which found no
    /// breakpoint before it: to a breakpoint in the end, else to the end itself, if the list
    /// of the code each stretch ran shows that no breakpoint's page ran code from `from` to
    /// where the end answers; `None` to wait for the whole.
    pub(super) fn continue_to_suffix(&mut self, from: u64, breakpoints: &HashSet<u64>) -> Option<Stop> {
        if self.ready() {
            return None;
        }
        let code = self.code.clone()?;
        let at = from.max(self.suffix_from()?);
        let Some(s) = self.suffix_serving(at) else {
            // Past its last position: at the end already.
            let last = self.suffix.as_ref().map(Suffix::last).filter(|&l| from > l)?;
            return Some(self.moved_to(last, Stop::End));
        };
        let (base, start, last) = (s.base, s.from.max(from), s.last());
        if code.may_run(from, start, breakpoints.iter().copied()) {
            return None;
        }
        Some(
            match s
                .timeline
                .next_hit(start - base, last + 1 - base, breakpoints, || false)
            {
                Hit::At(q) => self.moved_to(base + q, Stop::Breakpoint),
                _ => self.moved_to(last, Stop::End),
            },
        )
    }

    /// A `reverse-continue` inside the end before the whole history is decoded: to the
    /// breakpoint before, else to position 0 if the list of the code each stretch ran shows
    /// that none ran before the end; `None` to wait for the whole.
    pub(super) fn reverse_in_suffix(&mut self, breakpoints: &HashSet<u64>) -> Option<Stop> {
        let from = self.position;
        if self.ready() {
            return None;
        }
        let code = self.code.clone()?;
        let s = self.suffix_serving(from)?;
        let (base, start) = (s.base, s.from);
        match s
            .timeline
            .previous_hit(from - base, start - base, breakpoints, || false)
        {
            Hit::At(q) => Some(self.moved_to(base + q, Stop::Breakpoint)),
            _ if !code.may_run(0, start, breakpoints.iter().copied()) => Some(self.moved_to(0, Stop::Begin)),
            _ => None,
        }
    }

    /// One step forwards inside the end before the whole history is decoded; `None`
    /// outside it (or at its last position: what comes after is for the whole to say).
    pub(super) fn step_in_suffix(&mut self) -> Option<Stop> {
        if self.ready() {
            return None;
        }
        let next = self.position + 1;
        let s = self.suffix_serving(self.position)?;
        (next <= s.last()).then(|| self.moved_to(next, Stop::Step))
    }

    /// Where the end starts answering, waiting for it to be decoded.
    fn suffix_from(&mut self) -> Option<u64> {
        if self.suffix.is_none() {
            self.suffix = self.history.take_suffix();
        }
        self.suffix.as_ref().map(|s| s.from)
    }

    fn moved_to(&mut self, position: u64, stop: Stop) -> Stop {
        self.position = position;
        self.known = None;
        stop
    }
}

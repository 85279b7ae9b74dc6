//! A stretch of the history decoded alone, between two exact states (issue 40: "a stop's
//! values first", "a breakpoint search answers as soon as the hit is decoded"). The qemu
//! recorder's sync points ([`crate::recording::sync_points`]) let a decode start exactly at
//! a place near any anchor, so a stretch from one anchor to the next (or to the end of a run
//! that exited or faulted) can be decoded from the last sync point before the anchor, in tens of
//! milliseconds, while the whole trace is decoded. A state layer over it has the same exact
//! states on either side as the whole history's there (the two anchors, or the anchor and
//! the end snapshot), so its answers there are the whole's; before the anchor it knows no
//! state and answers nothing.

use std::sync::Arc;

use super::anchor_states::anchor_states_at;
use super::open::{barriers, Prepared};
use crate::flow::FlowEvent;
use crate::image::AddressSpace;
use crate::recording::sync_points::SyncPoint;
use crate::recording::{EndState, Recording};
use crate::state::{self, Known, State, Values};
use crate::timeline::Timeline;

/// Positions a window decodes before its anchor at most: sync points come every 2^22
/// positions or so, and an anchor's window starts at the last one far enough before it.
const MAX_LEAD: u64 = 1 << 26;

/// What decoding a window needs, shared by the decoding thread and the session.
#[derive(Clone)]
pub(super) struct Source {
    pub(super) recording: Recording,
    pub(super) space: AddressSpace,
    pub(super) trace: Arc<Vec<u8>>,
    pub(super) prepared: Arc<Prepared>,
    /// The recorder's sync points, in order.
    pub(super) points: Arc<Vec<SyncPoint>>,
}

impl Source {
    /// What a whole (not `partial`) recording with anchors and sync points offers for
    /// windows; `None` otherwise.
    pub(super) fn new(
        recording: &Recording,
        space: &AddressSpace,
        trace: &Arc<Vec<u8>>,
        prepared: &Arc<Prepared>,
        partial: bool,
    ) -> Option<Self> {
        prepared.anchors.as_ref().filter(|_| !partial)?;
        let points = recording.sync_points().ok()??;
        Some(Self {
            recording: recording.clone(),
            space: space.clone(),
            trace: trace.clone(),
            prepared: prepared.clone(),
            points: Arc::new(points),
        })
    }

    /// The positions of the anchors a window can start at: inside the history.
    fn anchor_positions(&self) -> Vec<u64> {
        let total = self.recording.manifest.instructions;
        let Some((anchors, _)) = &self.prepared.anchors else {
            return Vec::new();
        };
        (anchors.list.iter())
            .map(|a| a.position)
            .filter(|&p| p > 0 && p < total)
            .collect()
    }

    /// The window holding `position` (at or after its anchor), if one can be decoded there.
    pub(super) fn window_at(&self, position: u64) -> Option<Window> {
        let anchors = self.anchor_positions();
        let k = anchors.partition_point(|&a| a <= position).checked_sub(1)?;
        self.window(k)
    }

    /// The window from the last anchor to the end of a run that exited.
    pub(super) fn last_window(&self) -> Option<Window> {
        let k = self.anchor_positions().len().checked_sub(1)?;
        self.window(k)
            .filter(|w| w.last + 1 == self.recording.manifest.instructions)
    }

    /// The window from the `k`th anchor inside the history to the next, or to the end of a
    /// run that exited or faulted.
    fn window(&self, k: usize) -> Option<Window> {
        let rec = &self.recording;
        let total = rec.manifest.instructions;
        let anchors = self.anchor_positions();
        let (anchor, next) = (anchors[k], anchors.get(k + 1).copied());
        // A fault's instruction follows the last one that retired, as in the whole history,
        // and the end snapshot holds the state there.
        let fault = match &rec.manifest.end {
            EndState::Signaled { ip: Some(ip), .. } if next.is_none() => {
                Some(u64::from_str_radix(ip.trim_start_matches("0x"), 16).ok()?)
            }
            _ => None,
        };
        if next.is_none()
            && fault.is_none()
            && !matches!(rec.manifest.end, EndState::Exited { .. } | EndState::Exec { .. })
        {
            return None;
        }
        // Far enough before the anchor for its completing walk ([`state::LOOKBACK`]) to be
        // the whole history's.
        let point = (self.points.iter().rev()).find(|p| p.position + state::LOOKBACK <= anchor)?;
        let base = point.position;
        // Far from any point (a recording whose loop left its unit model none to note, made
        // before points were noted with LAST_LIP invalid): the whole decode, on every core,
        // comes sooner than this one.
        if anchor - base > MAX_LEAD {
            return None;
        }
        let gaps = rec.gaps();
        let input = rec.decode_input(&self.trace, &self.space, &gaps);
        // To the next anchor: stopped past the trace offset of the second sync point after
        // it (the first one's offset may be read a little before its position).
        let stop = next.and_then(|n| {
            let i = self.points.partition_point(|p| p.position <= n);
            self.points.get(i + 1).map(|p| p.offset as usize)
        });
        let mut timeline = crate::timeline::window(&input, point, stop);
        let unshown: u64 = timeline.events().iter().map(FlowEvent::unshown).sum();
        let last = match next {
            Some(n) if base + timeline.len() > n && unshown == 0 => n,
            // The end: where the recorder counted (a spin the trace cannot count is left to
            // the whole), or the fault after it.
            None if base + timeline.len() == total && unshown == 0 => match fault {
                Some(ip) => {
                    timeline.push_ip(ip);
                    total
                }
                None => total - 1,
            },
            _ => return None,
        };
        let timeline = Arc::new(timeline);
        let p = &*self.prepared;
        let (all, maps) = p.anchors.as_ref()?;
        let upto = all
            .list
            .iter()
            .position(|a| Some(a.position) == next.or(Some(anchor)))?;
        // The pages of every anchor up to these make their memory; a page file that fails
        // here fails the whole history's states too, with the error.
        let wanted = |q: u64| q == anchor || Some(q) == next;
        let states = anchor_states_at(
            &all.first(upto + 1),
            maps,
            &p.start,
            &p.map_changes,
            &self.space,
            wanted,
        )
        .ok()?;
        // The kernel rewrites a registered rseq area at any return to the program; the
        // registration is before this stretch, so the state layer here would not see it.
        let volatile = state::rseq_areas(&p.syscalls);
        let mut exact: Vec<(u64, State)> = (states.into_iter())
            .filter(|(q, _)| *q == anchor || Some(*q) == next)
            .map(|(q, mut st)| {
                st.mem.set_volatile(&volatile);
                (q - base, st)
            })
            .collect();
        exact.dedup_by_key(|(q, _)| *q);
        if exact.len() != 1 + usize::from(next.is_some()) {
            return None;
        }
        let end = match next {
            Some(_) => None,
            None => {
                let mut end = p.end.as_ref().ok()?.clone()?;
                end.mem.set_volatile(&volatile);
                Some(end)
            }
        };
        let shift = |q: u64| q.checked_sub(base);
        let (hard_barriers, soft_barriers) = barriers(&timeline, fault.is_some());
        let inputs = state::Inputs {
            anchors: exact,
            end,
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
            // Nothing is known where the decode starts: only from the anchor on.
            start: State {
                cpu: p.start.cpu,
                ..State::unknown()
            },
            fault: fault.is_some(),
            history: timeline.clone(),
        };
        Some(Window {
            base,
            from: anchor,
            last,
            timeline,
            // Held: no background work, only the stops' walks.
            values: Values::held(self.space.clone(), inputs),
            known: None,
            checked: false,
        })
    }
}

/// A stretch of the history and the state layer over it, positions counted from `base`.
pub(super) struct Window {
    /// The whole history's position of this one's first.
    pub(super) base: u64,
    /// The first position it answers: its anchor's.
    pub(super) from: u64,
    /// The last position it answers: the next anchor's, or the history's last.
    pub(super) last: u64,
    pub(super) timeline: Arc<Timeline>,
    pub(super) values: Values,
    /// The answer at the position asked last (relative).
    known: Option<(u64, Known)>,
    /// Compared with the whole history already (or to be by the decoding thread).
    pub(super) checked: bool,
}

impl Window {
    /// Whether it answers at `position`.
    pub(super) fn holds(&self, position: u64) -> bool {
        self.from <= position && position <= self.last
    }

    /// What is known at `position` (one it holds).
    pub(super) fn known_at(&mut self, position: u64) -> Option<&Known> {
        let at = position - self.base;
        if self.known.as_ref().map(|(q, _)| *q) != Some(at) {
            self.known = Some((at, self.values.at(at)?));
        }
        self.known.as_ref().map(|(_, k)| k)
    }

    /// Works out the values at `position` (one it holds); whether they are final.
    pub(super) fn settle(&mut self, position: u64, interrupted: &mut dyn FnMut() -> bool) -> bool {
        self.values.settle(position - self.base, interrupted)
    }

    /// The instruction at `position`, if it decoded it.
    pub(super) fn ip_at(&self, position: u64) -> Option<u64> {
        self.timeline.ip_at(position.checked_sub(self.base)?)
    }

    /// Sets the flag its questions set while they walk to `flag`.
    pub(super) fn share_pause(&mut self, flag: Arc<std::sync::atomic::AtomicBool>) {
        self.values.share_pause(flag);
    }
}

/// The first position at which `whole` differs from a window's history `part`, which starts
/// at `base`, if it does.
pub(super) fn differs(part: &Timeline, base: u64, whole: &Timeline) -> Option<u64> {
    if whole.len() < base + part.len() {
        return Some(whole.len());
    }
    (part.ips().zip(whole.ips_from(base)))
        .position(|(a, b)| a != b)
        .map(|p| base + p as u64)
}

/// [`differs`] for `window`.
pub(super) fn first_difference(window: &Window, whole: &Timeline) -> Option<u64> {
    differs(&window.timeline, window.base, whole)
}

//! One stretch of a split trace: its decoder (cold from its PSB, but for the first), the
//! timeline it builds, and the clean points the joins need.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::super::{Builder, Timeline};
use super::Input;
use crate::flow::{CleanPoint, FlowDecoder, FlowEvent, FlowSink, Resume, Watch};

/// Clean points a cold stretch keeps from its start, for the stretch before to meet it at.
const KEEP: usize = 64;

/// Where a stretch's timeline is cut at a clean point.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cut {
    /// Runs the stretch's timeline held.
    pub runs: usize,
    /// Events it held.
    pub events: usize,
    /// Instructions the decoder had reconstructed: the timeline's plus `pending`.
    pub position: u64,
    /// The run the decoder had not handed over yet (first address, instructions): the next
    /// runs of the timeline begin with it.
    pub pending: Option<(u64, u64)>,
}

impl Cut {
    /// The start of a decode.
    pub const START: Cut = Cut {
        runs: 0,
        events: 0,
        position: 0,
        pending: None,
    };
}

/// A clean point: where the timeline is cut there and the decoder's state.
#[derive(Clone)]
pub(super) struct Snapshot<'a> {
    pub cut: Cut,
    pub resume: Resume<'a>,
}

/// One stretch being decoded.
pub(super) struct Stretch<'a> {
    decoder: FlowDecoder<'a>,
    builder: Option<Builder<'a>>,
    /// The timeline, once the decode stopped.
    pub timeline: Timeline,
    /// Decoded cold from a PSB (every stretch but the first).
    cold: bool,
    /// The next stretch's PSB: the first decode stops at a clean point past it.
    stop_at: usize,
    /// Trace offset from which every clean point is kept as [`Self::last`].
    tail_from: usize,
    /// The first clean points (cold stretches).
    snapshots: Vec<Snapshot<'a>>,
    /// The last clean point within the trace's last bytes.
    pub last: Option<Snapshot<'a>>,
    /// The decode reached the end of the trace.
    finished: bool,
    /// Where it met a later stretch: that stretch and its clean point.
    pub met: Option<(usize, usize)>,
}

impl<'a> Stretch<'a> {
    pub fn new(input: &Input<'a>, start: usize, next: Option<usize>, cold: bool, tail_from: usize) -> Self {
        let decoder = match cold {
            true => input.decoder().cold_at(start),
            false => input.decoder(),
        };
        let mut builder = Builder::new(input.space);
        builder.reserve_for_trace(next.unwrap_or(input.trace.len()).saturating_sub(start));
        Self {
            decoder,
            builder: Some(builder),
            timeline: Timeline::default(),
            cold,
            stop_at: next.unwrap_or(usize::MAX),
            tail_from,
            snapshots: Vec::new(),
            last: None,
            finished: false,
            met: None,
        }
    }

    /// Decodes from the start to the first clean point past the next stretch's PSB, keeping
    /// the first clean points.
    pub fn first(&mut self, done: &AtomicU64, pause: &AtomicBool) {
        let Some(builder) = &mut self.builder else { return };
        let mut sink = Counting::new(builder, done, pause);
        let mut watch = First {
            cold: self.cold,
            snapshots: &mut self.snapshots,
            stop_at: self.stop_at,
            tail_from: self.tail_from,
            last: &mut self.last,
        };
        self.finished = self.decoder.decode_watched(&mut sink, &mut watch);
        sink.report();
        if self.finished {
            self.finish();
        }
    }

    /// The first clean points, for the stretches before to meet.
    pub fn take_snapshots(&mut self) -> Vec<Snapshot<'a>> {
        std::mem::take(&mut self.snapshots)
    }

    /// Decodes on until a clean point where a later stretch (the next, or if it never meets
    /// that one, the one after …) was in the same state, or to the end of the trace.
    pub fn meet(&mut self, snapshots: &[Vec<Snapshot<'a>>], starts: &[usize], done: &AtomicU64, pause: &AtomicBool) {
        let Some(builder) = &mut self.builder else { return };
        let target = starts.partition_point(|&s| s < self.stop_at);
        let mut sink = Counting::new(builder, done, pause);
        let mut watch = Meet {
            snapshots,
            starts,
            target,
            met: &mut self.met,
            tail_from: self.tail_from,
            last: &mut self.last,
        };
        self.finished = self.decoder.decode_watched(&mut sink, &mut watch);
        sink.report();
        self.finish();
    }

    fn finish(&mut self) {
        if let Some(b) = self.builder.take() {
            self.timeline = b.finish();
        }
    }
}

/// The first decode's watcher.
struct First<'s, 'a> {
    cold: bool,
    snapshots: &'s mut Vec<Snapshot<'a>>,
    stop_at: usize,
    tail_from: usize,
    last: &'s mut Option<Snapshot<'a>>,
}

impl<'a> Watch<'a, Counting<'_, 'a>> for First<'_, 'a> {
    #[inline]
    fn wants(&self, raw: usize) -> bool {
        (self.cold && self.snapshots.len() < KEEP) || raw >= self.stop_at || raw >= self.tail_from
    }

    fn clean(&mut self, point: CleanPoint<'a>, sink: &mut Counting<'_, 'a>) -> bool {
        let raw = point.resume.offset();
        if raw >= self.stop_at {
            return true;
        }
        let snap = sink.snapshot(point);
        if raw >= self.tail_from {
            *self.last = Some(snap.clone());
        }
        if self.cold && self.snapshots.len() < KEEP {
            self.snapshots.push(snap);
        }
        false
    }
}

/// The second decode's watcher: looks for a later stretch's clean point in the same state.
struct Meet<'s, 'a> {
    snapshots: &'s [Vec<Snapshot<'a>>],
    starts: &'s [usize],
    /// The stretch to meet.
    target: usize,
    met: &'s mut Option<(usize, usize)>,
    tail_from: usize,
    last: &'s mut Option<Snapshot<'a>>,
}

impl<'a> Watch<'a, Counting<'_, 'a>> for Meet<'_, 'a> {
    #[inline]
    fn wants(&self, raw: usize) -> bool {
        self.starts.get(self.target).is_some_and(|&s| raw >= s) || raw >= self.tail_from
    }

    fn clean(&mut self, point: CleanPoint<'a>, sink: &mut Counting<'_, 'a>) -> bool {
        let raw = point.resume.offset();
        // Past a stretch's last kept clean point (or it kept none) it cannot be met: the
        // decode goes on through it, towards the one after.
        while let Some(&start) = self.starts.get(self.target) {
            let past = !matches!(self.snapshots[self.target].last(), Some(s) if raw <= s.resume.offset());
            if raw < start || !past {
                break;
            }
            self.target += 1;
        }
        if let Some(snaps) = self.snapshots.get(self.target) {
            let from = snaps.partition_point(|s| s.resume.offset() < raw);
            let same = snaps[from..]
                .iter()
                .take_while(|s| s.resume.offset() == raw)
                .position(|s| s.resume.same(&point.resume));
            if let Some(k) = same {
                *self.met = Some((self.target, from + k));
                return true;
            }
        }
        if raw >= self.tail_from {
            *self.last = Some(sink.snapshot(point));
        }
        false
    }
}

/// The stretch's builder, counting the instructions decoded for the progress line, and
/// waiting while the decode is paused.
pub(super) struct Counting<'b, 'a> {
    builder: &'b mut Builder<'a>,
    done: &'b AtomicU64,
    told: u64,
    pause: &'b AtomicBool,
}

/// Instructions between two updates of the shared count.
const TELL_EVERY: u64 = 1 << 20;

impl<'b, 'a> Counting<'b, 'a> {
    fn new(builder: &'b mut Builder<'a>, done: &'b AtomicU64, pause: &'b AtomicBool) -> Self {
        let told = builder.len();
        Self {
            builder,
            done,
            told,
            pause,
        }
    }

    fn report(&mut self) {
        let now = self.builder.len();
        self.done.fetch_add(now.saturating_sub(self.told), Ordering::Relaxed);
        self.told = now;
        while self.pause.load(Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    fn snapshot(&self, point: CleanPoint<'a>) -> Snapshot<'a> {
        let (runs, events) = self.builder.counts();
        Snapshot {
            cut: Cut {
                runs,
                events,
                position: point.position,
                pending: point.pending,
            },
            resume: point.resume,
        }
    }
}

impl FlowSink for Counting<'_, '_> {
    fn run(&mut self, ip: u64, count: u64) {
        self.builder.run(ip, count);
        if self.builder.len() >= self.told + TELL_EVERY {
            self.report();
        }
    }

    fn event(&mut self, event: FlowEvent) {
        self.builder.event(event);
    }
}

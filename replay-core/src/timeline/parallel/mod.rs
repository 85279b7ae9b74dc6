//! Building the timeline on every core (issue 19): the trace is split at PSBs into stretches,
//! each decoded on a thread of its own, cold from its PSB (no previous IP, no call to return
//! to), then the stretches are joined where they agree.
//!
//! A stretch decoded cold cannot be trusted at first: RTIT clears LAST_LIP and
//! LAST_CALL_NLIP at a PSB up to four packets late (§3.3.9), and a cold decoder knows neither
//! the last call's NLIP nor anything before its PSB. So each records its first clean points
//! ([`crate::flow::Resume`]); the stretch before it decodes on past the PSB until it reaches
//! one of them in the very same state, and from there on the two decodes would be identical:
//! the stretch before stops, the cold one counts from that point. Nothing a cold decoder did
//! before it is used. If the stretch before never meets one (no clean point it agrees on),
//! it goes on through the cold stretch itself: slower, never different. The end of the trace
//! (the TNT bits left in RTIT_TNT_BUFF, the recorder's count, both absolute) is decoded once
//! the position is known: again from the last clean point, by a decoder resumed there.
//!
//! Files: `stretch` (one stretch: its decoder, timeline and clean points), `join` (appending
//! part of a stretch's timeline to the whole).

mod join;
mod stretch;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::{Builder, Timeline};
use crate::flow::{FlowDecoder, TraceEnd};
use crate::image::AddressSpace;
use crate::packet::{DecoderConfig, PacketDecoder};
use stretch::{Cut, Stretch};

/// How a trace is split.
#[derive(Debug, Clone, Copy)]
pub struct Split {
    /// Threads to decode on.
    pub threads: usize,
    /// Trace bytes a stretch holds at least: below this the overlap a join costs is not
    /// worth it.
    pub min_bytes: usize,
}

impl Split {
    /// Every core, stretches of at least 1 MiB of trace (5–20 M instructions).
    pub fn all_cores() -> Self {
        Self {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            min_bytes: 1 << 20,
        }
    }

    /// One thread: a plain decode.
    pub fn sequential() -> Self {
        Self {
            threads: 1,
            min_bytes: usize::MAX,
        }
    }
}

/// What to decode: a recording's trace, its code, its lost stretches and its end.
pub struct Input<'a> {
    /// The trace.
    pub trace: &'a [u8],
    /// Its packet format.
    pub config: crate::flow::FlowConfig,
    /// The code.
    pub space: &'a AddressSpace,
    /// Bytes lost before each offset ([`FlowDecoder::with_gaps`]).
    pub gaps: &'a [(usize, Option<u64>)],
    /// What the trace leaves unsaid at its end ([`FlowDecoder::with_end`]).
    pub end: Option<TraceEnd>,
}

impl<'a> Input<'a> {
    /// A decoder of the whole trace, without its end.
    fn decoder(&self) -> FlowDecoder<'a> {
        FlowDecoder::new(self.trace, self.config, self.space).with_gaps(self.gaps)
    }
}

/// A timeline built, and how.
pub struct Built {
    /// The timeline: the same instructions and events as a plain decode's.
    pub timeline: Timeline,
    /// Stretches the trace was split into (1: a plain decode).
    pub stretches: usize,
    /// Joins where a stretch met the next in the same state (at most `stretches - 1`; fewer
    /// where a stretch had to decode through the next one itself).
    pub joins: usize,
}

/// Decodes `input` into a timeline, on `split.threads` threads where the trace is long
/// enough, calling `progress` with the instructions decoded so far now and then.
pub fn build(input: &Input<'_>, split: Split, progress: &mut (dyn FnMut(u64) + Send)) -> Built {
    build_pausing(input, split, progress, &AtomicBool::new(false))
}

/// [`build`], whose threads wait while `pause` is set (looked at every million or so
/// instructions): a stop's walk for its values goes first (issue 40: on two cores, a walk
/// beside the decode took three times as long).
pub fn build_pausing(
    input: &Input<'_>,
    split: Split,
    progress: &mut (dyn FnMut(u64) + Send),
    pause: &AtomicBool,
) -> Built {
    let starts = psbs(input.trace, input.config.packets, split);
    if starts.len() < 2 {
        return Built {
            timeline: sequential(input, progress),
            stretches: 1,
            joins: 0,
        };
    }
    let done = AtomicU64::new(0);
    let tail_from = input.trace.len().saturating_sub(TAIL_BYTES);
    let mut stretches: Vec<Stretch> = starts
        .iter()
        .enumerate()
        .map(|(i, &at)| Stretch::new(input, at, starts.get(i + 1).copied(), i > 0, tail_from))
        .collect();
    run_all(&mut stretches, &done, progress, |s, done| s.first(done, pause));
    let snapshots: Vec<_> = stretches.iter_mut().map(Stretch::take_snapshots).collect();
    run_all(&mut stretches, &done, progress, |s, done| {
        s.meet(&snapshots, &starts, done, pause)
    });
    match join_all(input, &stretches, &snapshots) {
        Some((timeline, joins)) => Built {
            timeline,
            stretches: stretches.len(),
            joins,
        },
        None => Built {
            timeline: sequential(input, progress),
            stretches: 1,
            joins: 0,
        },
    }
}

/// Trace bytes from the end within which every clean point is kept: the end is decoded
/// again from the last one.
const TAIL_BYTES: usize = 64 << 10;

/// A plain decode.
fn sequential(input: &Input<'_>, progress: &mut (dyn FnMut(u64) + Send)) -> Timeline {
    let mut builder = Builder::new(input.space).with_progress(progress);
    builder.reserve_for_trace(input.trace.len());
    input.decoder().with_end(input.end).decode(&mut builder);
    builder.finish()
}

/// Where the stretches start: offset 0, then the first PSB at or after each even share of
/// the trace.
fn psbs(trace: &[u8], config: DecoderConfig, split: Split) -> Vec<usize> {
    let n = (trace.len() / split.min_bytes.max(1))
        .min(split.threads.max(1) * 2)
        .max(1);
    let mut starts = vec![0];
    let mut scan = PacketDecoder::new(trace, config);
    for i in 1..n {
        scan.seek_cold(trace.len() / n * i);
        match scan.sync_forward() {
            Some(at) if at > *starts.last().unwrap_or(&0) => starts.push(at),
            _ => {}
        }
    }
    starts
}

/// Runs `work` on every stretch, each on a thread of its own, telling `progress` what
/// `done` counts while they run.
fn run_all<'a, F>(stretches: &mut [Stretch<'a>], done: &AtomicU64, progress: &mut (dyn FnMut(u64) + Send), work: F)
where
    F: Fn(&mut Stretch<'a>, &AtomicU64) + Sync,
{
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel();
        let handles: Vec<_> = stretches
            .iter_mut()
            .map(|s| {
                let (work, tx) = (&work, tx.clone());
                scope.spawn(move || {
                    work(s, done);
                    let _ = tx.send(());
                })
            })
            .collect();
        drop(tx);
        // Each thread says when it is done (or drops its sender if it panicked).
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(()) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => progress(done.load(Ordering::Relaxed)),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        for h in handles {
            if let Err(panic) = h.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

/// Joins the stretches: each from the clean point where the one before met it, to where it
/// met the next; and how many joins. `None` if the end cannot be placed (no clean point to
/// take it up from).
fn join_all(
    input: &Input<'_>,
    stretches: &[Stretch<'_>],
    snapshots: &[Vec<stretch::Snapshot<'_>>],
) -> Option<(Timeline, usize)> {
    let mut whole = Builder::new(input.space);
    whole.reserve(stretches.iter().map(|s| s.timeline.runs.count).sum());
    let (mut cur, mut from, mut joins) = (0, Cut::START, 0);
    // The clean point `from` is (none for the first stretch's start).
    let mut from_resume = None;
    loop {
        let s = &stretches[cur];
        match s.met {
            Some((next, k)) => {
                whole.append(&s.timeline, &from, None);
                from = snapshots[next][k].cut;
                from_resume = Some(&snapshots[next][k].resume);
                cur = next;
                joins += 1;
            }
            None => {
                let Some(end) = input.end else {
                    whole.append(&s.timeline, &from, None);
                    break;
                };
                // The end is absolute: decode it again from the last clean point, now that its
                // position is known.
                let last = s.last.as_ref().filter(|l| l.cut.position >= from.position);
                let resume = match last {
                    Some(l) => {
                        whole.append(&s.timeline, &from, Some(&l.cut));
                        &l.resume
                    }
                    None => from_resume?,
                };
                let position = whole.len();
                input
                    .decoder()
                    .resumed(resume, position)
                    .with_end(Some(end))
                    .decode(&mut whole);
                break;
            }
        }
    }
    Some((whole.finish(), joins))
}

//! Copying the trace out of the circular output region (§2.3), and noticing when the unit
//! wrapped over bytes rtit had not copied yet.
//!
//! The region is filled with [`PATTERN`] before the unit writes to it, and each part rtit
//! copies is filled again. The unit always starts writing at offset 0 (rtit resets
//! RTIT_OFFSET when it resumes), so after a drain at offset `O` the bytes from `O` to the end
//! hold the pattern unless the unit went round: then every byte was overwritten at least
//! once, the oldest surviving bytes start at `O`, and whatever came before them is lost.
//! `PATTERN` is a reserved packet header (figure 2: 0xA0–0xAF), and no packet is longer than
//! 9 bytes, so 9 or more pattern bytes in a row never occur in a trace: a tail that long
//! still holding the pattern proves there was no wrap. A shorter tail proves nothing, and
//! rtit then counts the interval as wrapped: a gap reported that did not happen costs a few
//! bytes, one not reported would be a silently wrong history.

use rtit_replay_core::packet::PSB_BYTES;
use rtit_replay_core::recording::TraceGap;

use super::device::OutputRegion;

/// The byte the free part of the region holds.
pub const PATTERN: u8 = 0xa5;
/// Fewer pattern bytes than this prove nothing (the longest packet is 9 bytes).
const PROOF: usize = 9;

/// What to do when the trace outgrows the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrapMode {
    /// Let it wrap and keep the last region-full, as a flight recorder (perf's snapshot
    /// mode): the beginning of the run is a gap.
    FlightRecorder,
    /// Pause tracing periodically, copy the new bytes out and restart the region; an interval
    /// that wrapped anyway is a gap.
    Drain,
}

/// The trace copied out so far, and its gaps.
#[derive(Debug, Default)]
pub struct Collector {
    trace: Vec<u8>,
    gaps: Vec<TraceGap>,
    /// Drains that found the unit had wrapped.
    pub wraps: u64,
    /// Keep at most about this many bytes, the newest (a flight recorder that drains).
    keep: Option<usize>,
    /// Bytes dropped from the front to stay within `keep`.
    dropped: u64,
}

/// What a collector gathered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    /// The trace kept.
    pub trace: Vec<u8>,
    /// Where bytes were lost, as offsets in `trace`.
    pub gaps: Vec<TraceGap>,
    /// How many bytes came before the first one kept (their marks are not in `trace`).
    pub dropped: u64,
}

impl Collected {
    /// Where a [`Collector::mark`] is in the trace kept; `None` if it was before it.
    pub fn offset_of(&self, mark: u64) -> Option<u64> {
        mark.checked_sub(self.dropped)
    }
}

impl Collector {
    /// Prepares `region` (all pattern) for the unit's first write at offset 0.
    pub fn new(region: &mut dyn OutputRegion) -> Self {
        region.fill(0, region.size(), PATTERN);
        Self::default()
    }

    /// Like [`Collector::new`] for a flight recorder that is drained at points where
    /// offsets must be known: it keeps only the newest region-full of bytes (from a PSB).
    pub fn keeping_last(region: &mut dyn OutputRegion) -> Self {
        let keep = Some(region.size());
        Self {
            keep,
            ..Self::new(region)
        }
    }

    /// The place the trace has reached, counting dropped bytes: something that happened
    /// between the last drain and the next start is here ([`Collected::offset_of`]).
    pub fn mark(&self) -> u64 {
        self.dropped + self.trace.len() as u64
    }

    /// Copies what the unit wrote since it last started at offset 0 and stopped, drained, at
    /// `offset`; prepares the region for the next start at offset 0.
    pub fn drain(&mut self, region: &mut dyn OutputRegion, offset: u64) {
        let size = region.size();
        let offset = offset as usize & (size - 1);
        let tail = size - offset;
        let wrapped = match tail {
            _ if tail >= PROOF => !holds_pattern(region, offset, tail),
            // Nothing written, or exactly a region-full: only the whole region tells.
            _ if offset == 0 => !holds_pattern(region, 0, size),
            _ => true,
        };
        let mut bytes = vec![0u8; size];
        if wrapped {
            // Oldest first: from `offset` round to `offset`.
            region.read(offset, &mut bytes[..tail]);
            region.read(0, &mut bytes[tail..]);
            self.wraps += 1;
            self.lost(&bytes);
            region.fill(0, size, PATTERN);
        } else {
            region.read(0, &mut bytes[..offset]);
            self.trace.extend_from_slice(&bytes[..offset]);
            region.fill(0, offset, PATTERN);
        }
        self.bound();
    }

    /// Drops the oldest bytes beyond `keep`, from a PSB on so the rest decodes; the
    /// beginning of the trace becomes a gap.
    fn bound(&mut self) {
        let Some(keep) = self.keep else { return };
        if self.trace.len() <= keep {
            return;
        }
        let from = self.trace.len() - keep;
        let cut = memchr::memmem::find(&self.trace[from..], &PSB_BYTES).map_or(self.trace.len(), |at| from + at);
        self.trace.drain(..cut);
        self.dropped += cut as u64;
        let cut = cut as u64;
        self.gaps.retain_mut(|g| {
            g.offset = g.offset.saturating_sub(cut);
            g.offset > 0
        });
        self.gaps.insert(
            0,
            TraceGap {
                offset: 0,
                lost_bytes: None,
            },
        );
    }

    /// Appends what survived a wrap: from its first PSB (a point the decoder can start from),
    /// with a gap there.
    fn lost(&mut self, survived: &[u8]) {
        let psb = memchr::memmem::find(survived, &PSB_BYTES);
        self.gaps.push(TraceGap {
            offset: self.trace.len() as u64,
            lost_bytes: None,
        });
        if let Some(at) = psb {
            self.trace.extend_from_slice(&survived[at..]);
        }
    }

    /// The trace, its gaps, and how much of it was dropped.
    pub fn finish(self) -> Collected {
        Collected {
            trace: self.trace,
            gaps: self.gaps,
            dropped: self.dropped,
        }
    }
}

fn holds_pattern(region: &dyn OutputRegion, offset: usize, len: usize) -> bool {
    let mut buf = vec![0u8; len];
    region.read(offset, &mut buf);
    buf.iter().all(|&b| b == PATTERN)
}

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
}

impl Collector {
    /// Prepares `region` (all pattern) for the unit's first write at offset 0.
    pub fn new(region: &mut dyn OutputRegion) -> Self {
        region.fill(0, region.size(), PATTERN);
        Self::default()
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

    /// The trace and its gaps.
    pub fn finish(self) -> (Vec<u8>, Vec<TraceGap>) {
        (self.trace, self.gaps)
    }
}

fn holds_pattern(region: &dyn OutputRegion, offset: usize, len: usize) -> bool {
    let mut buf = vec![0u8; len];
    region.read(offset, &mut buf);
    buf.iter().all(|&b| b == PATTERN)
}

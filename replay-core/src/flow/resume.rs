//! Where a decode can be compared and taken up again: a *clean point* is an instruction
//! boundary where the walk needs nothing from its past but what [`Resume`] holds (no TNT bit
//! pending, the spin detector about to restart), so two decoders at clean points with the
//! same [`Resume`] reconstruct the rest of the trace identically, however each got there.
//! A trace split at PSBs is decoded in parallel on that ground (`timeline::parallel`): a
//! stretch decoded cold from its PSB counts from the first clean point at which the stretch
//! before it arrives in the same state.

use super::decoder::{FlowDecoder, State};
use super::source::Source;
use super::FlowSink;

/// The decoder's state at a clean point: enough to compare two decoders and to make a third
/// that goes on from there.
#[derive(Clone)]
pub struct Resume<'a> {
    ip: u64,
    source: Source<'a>,
    last_call_nlip: Option<u64>,
    current: usize,
}

impl Resume<'_> {
    /// Whether a decoder here reconstructs the rest of the trace as one at `other` does.
    pub fn same(&self, other: &Self) -> bool {
        self.ip == other.ip
            && self.last_call_nlip == other.last_call_nlip
            && self.current == other.current
            && self.source.same_state(&other.source)
    }

    /// Trace offset the packet decoder has read up to.
    pub fn offset(&self) -> usize {
        self.source.raw_offset()
    }

    /// The next instruction.
    pub fn ip(&self) -> u64 {
        self.ip
    }
}

/// A clean point as a watcher sees it.
pub struct CleanPoint<'a> {
    /// The state there.
    pub resume: Resume<'a>,
    /// Instructions the decoder reconstructed before it.
    pub position: u64,
    /// The run not yet handed to the sink (first address, instructions): the sink has
    /// `position` minus these.
    pub pending: Option<(u64, u64)>,
}

/// Looks at a decode's clean points.
pub trait Watch<'a, S> {
    /// Whether the clean point whose packet decoder has read up to `raw` is of interest
    /// (cheap: asked at every one).
    fn wants(&self, raw: usize) -> bool;
    /// A clean point of interest; `true` stops the decode there (its pending run handed to
    /// `sink`), to be taken up again by [`FlowDecoder::decode_watched`].
    fn clean(&mut self, point: CleanPoint<'a>, sink: &mut S) -> bool;
}

/// No watcher: a plain decode.
pub(super) struct Unwatched;

impl<S> Watch<'_, S> for Unwatched {
    #[inline(always)]
    fn wants(&self, _: usize) -> bool {
        false
    }

    fn clean(&mut self, _: CleanPoint<'_>, _: &mut S) -> bool {
        false
    }
}

impl<'a> FlowDecoder<'a> {
    /// Starts cold at the PSB at `offset`: waits for an IP to trust, knows no previous IP nor
    /// call, and reports nothing of the trace before `offset`.
    pub fn cold_at(mut self, offset: usize) -> Self {
        self.source.seek_cold(offset);
        self.state = State::Lost;
        self
    }

    /// Goes on from `resume` (a clean point of a decoder of the same trace and spaces) as if
    /// `position` instructions came before.
    pub fn resumed(mut self, resume: &Resume<'a>, position: u64) -> Self {
        self.source = resume.source.clone();
        self.state = State::Tracing(resume.ip);
        self.last_call_nlip = resume.last_call_nlip;
        self.current = resume.current;
        self.position = position;
        self
    }

    /// Decodes into `sink`, showing `watch` the clean points it wants, until the trace ends
    /// (`true`) or `watch` stops it (`false`: call again to go on).
    pub fn decode_watched<S: FlowSink>(&mut self, sink: &mut S, watch: &mut impl Watch<'a, S>) -> bool {
        self.paused = false;
        while self.state != State::Done && !self.paused {
            match self.state {
                State::Tracing(ip) => self.walk(ip, sink, watch),
                _ => self.idle(sink),
            }
        }
        if self.paused {
            return false;
        }
        self.flush(sink);
        true
    }

    /// At a clean point candidate `ip` (no TNT bit pending): shows it to `watch` if it wants
    /// it; `true` if the decode stops here.
    #[inline]
    pub(super) fn clean_point<S: FlowSink>(&mut self, ip: u64, sink: &mut S, watch: &mut impl Watch<'a, S>) -> bool {
        if !watch.wants(self.source.raw_offset()) || !self.spin.stale((self.source.taken, self.tnt_left)) {
            return false;
        }
        // The boundary peeks first anyway: peeking now changes nothing but makes the state
        // canonical (a packet peeked or not would compare unequal).
        let _ = self.peek();
        let point = CleanPoint {
            resume: Resume {
                ip,
                source: self.source.clone(),
                last_call_nlip: self.last_call_nlip,
                current: self.current,
            },
            position: self.position,
            pending: self.run.map(|(ip, n, _)| (ip, n)),
        };
        if !watch.clean(point, sink) {
            return false;
        }
        self.flush(sink);
        self.state = State::Tracing(ip);
        self.paused = true;
        true
    }
}

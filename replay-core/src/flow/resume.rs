//! Where a decode can be compared and taken up again: a *clean point* is an instruction
//! boundary where the walk needs nothing from its past but what [`Resume`] holds (no TNT bit
//! pending, the spin detector about to restart), so two decoders at clean points with the
//! same [`Resume`] reconstruct the rest of the trace identically, however each got there.
//! A trace split at PSBs is decoded in parallel on that ground (`timeline::parallel`): a
//! stretch decoded cold from its PSB counts from the first clean point at which the stretch
//! before it arrives in the same state.

use super::source::Source;

/// The decoder's state at a clean point: enough to compare two decoders and to make a third
/// that goes on from there.
#[derive(Clone)]
pub struct Resume<'a> {
    pub(super) ip: u64,
    pub(super) source: Source<'a>,
    pub(super) last_call_nlip: Option<u64>,
    pub(super) current: usize,
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
    /// `sink`), to be taken up again by [`super::FlowDecoder::decode_watched`].
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

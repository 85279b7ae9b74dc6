//! The packets as the flow decoder wants them: one packet of lookahead, with the timing
//! packets (PSB, MTC, STS, cycle counts) folded into [`Timing`] on the way, since they never
//! change the flow.

use super::timing::Timing;
use crate::packet::{DecodeError, Decoded, DecoderConfig, PacketDecoder};

/// The flow-significant packets of a trace.
#[derive(Clone)]
pub(crate) struct Source<'a> {
    decoder: PacketDecoder<'a>,
    peeked: Option<Result<Decoded, DecodeError>>,
    pub timing: Timing,
    /// Items taken so far: the flow decoder's measure of progress through the trace.
    pub taken: u64,
}

impl<'a> Source<'a> {
    pub fn new(trace: &'a [u8], config: DecoderConfig) -> Self {
        Self {
            decoder: PacketDecoder::new(trace, config),
            peeked: None,
            timing: Timing::default(),
            taken: 0,
        }
    }

    /// Reports lost data at `gaps` (see [`PacketDecoder::with_gaps`]).
    pub fn with_gaps(mut self, gaps: &'a [(usize, Option<u64>)]) -> Self {
        self.decoder = self.decoder.with_gaps(gaps);
        self
    }

    /// The next flow-significant packet (or decode error), without consuming it.
    #[inline]
    pub fn peek(&mut self) -> Option<&Result<Decoded, DecodeError>> {
        if self.peeked.is_none() {
            self.peeked = self.pull();
        }
        self.peeked.as_ref()
    }

    /// Takes the next flow-significant packet (or decode error).
    #[inline]
    pub fn next(&mut self) -> Option<Result<Decoded, DecodeError>> {
        self.taken += 1;
        match self.peeked.take() {
            Some(item) => Some(item),
            None => self.pull(),
        }
    }

    #[inline]
    fn pull(&mut self) -> Option<Result<Decoded, DecodeError>> {
        loop {
            let item = self.decoder.next()?;
            match &item {
                Ok(d) if self.timing.update(&d.packet) => continue,
                _ => return Some(item),
            }
        }
    }

    /// Moves to the PSB at `offset` and starts cold there ([`PacketDecoder::seek_cold`]).
    pub fn seek_cold(&mut self, offset: usize) {
        self.decoder.seek_cold(offset);
        self.peeked = None;
    }

    /// Whether `other` gives the rest of the trace exactly as this one will (timing aside:
    /// it never changes the flow).
    pub fn same_state(&self, other: &Self) -> bool {
        self.decoder.same_state(&other.decoder) && self.peeked == other.peeked
    }

    /// Offset of the next byte the packet decoder reads (past the packet peeked, if any):
    /// cheap, and never behind [`Self::offset`].
    #[inline]
    pub fn raw_offset(&self) -> usize {
        self.decoder.offset()
    }

    /// Byte offset of the next packet not yet taken.
    pub fn offset(&mut self) -> usize {
        match self.peek() {
            Some(Ok(d)) => d.offset,
            Some(Err(e)) => e.offset,
            None => self.decoder.offset(),
        }
    }
}

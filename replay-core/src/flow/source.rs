//! The packets as the flow decoder wants them: one packet of lookahead, with the timing
//! packets (PSB, MTC, STS, cycle counts) folded into [`Timing`] on the way, since they never
//! change the flow.

use super::timing::Timing;
use crate::packet::{DecodeError, Decoded, DecoderConfig, Packet, PacketDecoder, Tnt};

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
    #[inline(always)]
    pub fn peek(&mut self) -> Option<&Result<Decoded, DecodeError>> {
        // Inline: most calls find the packet peeked already; the decoding is out of line.
        if self.peeked.is_none() {
            self.fill();
        }
        self.peeked.as_ref()
    }

    /// Decodes the next flow-significant packet into the lookahead.
    #[inline(never)]
    fn fill(&mut self) {
        // A TNT or a TIP (most of a trace, and never timing packets) is written in place,
        // field by field; the hot readers below read it back the same way. Built by `pull`
        // and copied here whole, it stalled on store forwarding.
        self.peeked = if let Some((offset, tnt)) = self.decoder.next_tnt() {
            Some(Ok(Decoded {
                offset,
                packet: Packet::Tnt(tnt),
                ip: None,
            }))
        } else if let Some((offset, payload, ip)) = self.decoder.next_tip() {
            Some(Ok(Decoded {
                offset,
                packet: Packet::Tip(payload),
                ip: Some(ip),
            }))
        } else {
            self.pull()
        };
    }

    /// The next packet if it is a TNT, without consuming it: [`Self::peek`] without copying
    /// the packet out.
    #[inline]
    pub fn peek_tnt(&mut self) -> Option<Tnt> {
        match self.peek() {
            Some(Ok(Decoded {
                packet: Packet::Tnt(tnt),
                ..
            })) => Some(*tnt),
            _ => None,
        }
    }

    /// The target of the next packet if it is a TIP, without consuming it.
    #[inline]
    pub fn peek_tip(&mut self) -> Option<u64> {
        match self.peek() {
            Some(Ok(Decoded {
                packet: Packet::Tip(_),
                ip,
                ..
            })) => *ip,
            _ => None,
        }
    }

    /// Whether the next packet is a TNT or a TIP: one a branch takes, never one that binds
    /// at an instruction boundary, so the walk's checks for those can be skipped.
    #[inline]
    pub fn peek_branch(&mut self) -> bool {
        matches!(
            self.peek(),
            Some(Ok(Decoded {
                packet: Packet::Tnt(_) | Packet::Tip(_),
                ..
            }))
        )
    }

    /// Takes the next flow-significant packet (or decode error). Every caller peeked at it
    /// first and has what it needs, so nothing is handed back.
    #[inline]
    pub fn next(&mut self) {
        self.taken += 1;
        if self.peeked.take().is_none() {
            let _ = self.pull();
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

    /// Moves to a recorder's sync point at `offset` with RTIT_LAST_LIP `last_lip`
    /// ([`PacketDecoder::seek_synced`]).
    pub fn seek_synced(&mut self, offset: usize, last_lip: u64) {
        self.decoder.seek_synced(offset, last_lip);
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

//! The packet decoder: a byte slice in, [`Decoded`] packets out, errors as values with their
//! offset. After an error it resumes at the next PSB, the only point where packet boundaries
//! are known again (§4.2.1).

use super::header::{
    IP_PACKET, IP_PACKET_MASK, MTC, PIP, PSB, PSB_BYTES, STS, TIP_EVENT, TNT_MASK, TRACE_STOP, ZEXT_BIT,
};
use super::{CycleCount, DecodeError, DecodeErrorKind, FupEvent, Mtc, Packet, PacketKind, Pip, Sts, Tnt};
use crate::ip::{IpPayload, IpSize, LastLip};

/// The TNT packet of every header byte (`Psb` where the byte is no TNT). The decoder copies
/// a TNT packet out of this table instead of building it: a value built field by field on the
/// stack and then copied whole stalls on store forwarding, and TNT is most of a trace.
static TNT_PACKETS: [Packet; 128] = {
    let mut table = [Packet::Psb; 128];
    let mut byte = 0;
    while byte < 128 {
        if let Some(tnt) = Tnt::from_header(byte as u8) {
            table[byte] = Packet::Tnt(tnt);
        }
        byte += 1;
    }
    table
};

/// The RTIT_CTL bits that change the byte format of the trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecoderConfig {
    /// RTIT_CTL.Cycle_Acc: a cycle-count packet follows every packet that carries one
    /// (§4.2.15, [`Packet::carries_cycle_count`]).
    pub cycle_accurate: bool,
}

impl DecoderConfig {
    /// The format configuration of a trace written under this RTIT_CTL value.
    pub const fn from_rtit_ctl(ctl: u64) -> Self {
        Self {
            cycle_accurate: ctl & crate::regs::ctl::CYCLE_ACC != 0,
        }
    }
}

/// A decoded packet with its position and, for TIP and FUP, the full IP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Byte offset of the packet's first byte.
    pub offset: usize,
    /// The packet as transmitted.
    pub packet: Packet,
    /// For TIP and FUP: the payload expanded against LAST_LIP, as a canonical address.
    pub ip: Option<u64>,
}

/// Decodes RTIT packets from a byte slice.
///
/// It keeps LAST_LIP across PSBs: the hardware clears its own copy at a PSB, but possibly up to
/// 4 packets late (§3.3.9), so the previous IP stays the right base for a compressed IP either
/// way. [`PacketDecoder::sync_forward`] starts cold (no previous IP), as after an error.
#[derive(Debug, Clone)]
pub struct PacketDecoder<'a> {
    buf: &'a [u8],
    pos: usize,
    config: DecoderConfig,
    last_lip: LastLip,
    /// The previous packet carries a cycle count, which is next.
    cyc_due: bool,
    /// An error happened: find the next PSB before decoding again.
    lost: bool,
    /// Where trace bytes were lost (offset of the first byte after, bytes lost if known), in
    /// order; `gaps[next_gap..]` are still ahead.
    gaps: &'a [(usize, Option<u64>)],
    next_gap: usize,
    /// The offset of `gaps[next_gap]`, or `usize::MAX`: one compare on the hot path.
    gap_at: usize,
}

impl<'a> PacketDecoder<'a> {
    /// A decoder at offset 0 of `buf`, which must start at a packet boundary (as the output
    /// region of the unit does); use [`PacketDecoder::sync_forward`] otherwise.
    pub fn new(buf: &'a [u8], config: DecoderConfig) -> Self {
        Self {
            buf,
            pos: 0,
            config,
            last_lip: LastLip::new(),
            cyc_due: false,
            lost: false,
            gaps: &[],
            next_gap: 0,
            gap_at: usize::MAX,
        }
    }

    /// Reports a [`DecodeErrorKind::Lost`] when decoding reaches each of `gaps` (offsets of
    /// the first byte after lost data, ascending), and starts cold there.
    pub fn with_gaps(mut self, gaps: &'a [(usize, Option<u64>)]) -> Self {
        self.gaps = gaps;
        self.next_gap = 0;
        self.gap_at = gaps.first().map_or(usize::MAX, |g| g.0);
        self
    }

    /// The gap the decoder just reached: reported once, then decoding goes on cold from there.
    #[cold]
    fn gap(&mut self) -> DecodeError {
        let (offset, bytes) = self.gaps[self.next_gap];
        self.next_gap += 1;
        self.gap_at = self.gaps.get(self.next_gap).map_or(usize::MAX, |g| g.0);
        self.lost = false;
        self.cyc_due = false;
        self.last_lip.invalidate();
        self.pos = self.pos.max(offset.min(self.buf.len()));
        DecodeError {
            offset,
            kind: DecodeErrorKind::Lost { bytes },
        }
    }

    /// Offset of the next byte to decode.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// The decoder's LAST_LIP: the IP of the last TIP or FUP decoded.
    pub fn last_lip(&self) -> LastLip {
        self.last_lip
    }

    /// The format configuration.
    pub fn config(&self) -> DecoderConfig {
        self.config
    }

    /// Moves to the next PSB at or after the current offset and starts cold there (no
    /// previous IP, no pending cycle count). Returns its offset, or `None` (and moves to the
    /// end) if there is none.
    pub fn sync_forward(&mut self) -> Option<usize> {
        self.lost = false;
        self.cyc_due = false;
        self.last_lip.invalidate();
        match memchr::memmem::find(&self.buf[self.pos..], &PSB_BYTES) {
            Some(at) => {
                self.pos += at;
                Some(self.pos)
            }
            None => {
                self.pos = self.buf.len();
                None
            }
        }
    }

    /// Moves to `offset` (a PSB found by [`Self::sync_forward`] or a scan) and starts cold
    /// there, as a decoder of one stretch of a trace split for parallel decoding: no previous
    /// IP, and the gaps before `offset` are behind it (the stretch before reports them).
    pub fn seek_cold(&mut self, offset: usize) {
        self.pos = offset.min(self.buf.len());
        self.lost = false;
        self.cyc_due = false;
        self.last_lip.invalidate();
        self.next_gap = self.gaps.partition_point(|g| g.0 <= offset);
        self.gap_at = self.gaps.get(self.next_gap).map_or(usize::MAX, |g| g.0);
    }

    /// Moves to `offset`, a packet boundary where the unit's RTIT_LAST_LIP was `last_lip`
    /// (0: not valid, as a PSB's clearing leaves it until the next IP-carrying packet) and no
    /// cycle count was due (a recorder's sync point, [`crate::recording::sync_points`]): what
    /// follows decodes as from the start.
    pub fn seek_synced(&mut self, offset: usize, last_lip: u64) {
        self.seek_cold(offset);
        if last_lip != 0 {
            self.last_lip.set(last_lip);
        }
    }

    /// Whether `other` decodes the rest of the same trace exactly as this one will: the same
    /// offset, LAST_LIP, pending cycle count, error state and gaps ahead.
    pub fn same_state(&self, other: &Self) -> bool {
        std::ptr::eq(self.buf, other.buf)
            && self.pos == other.pos
            && self.config == other.config
            && self.last_lip == other.last_lip
            && self.cyc_due == other.cyc_due
            && self.lost == other.lost
            && std::ptr::eq(self.gaps, other.gaps)
            && self.next_gap == other.next_gap
    }

    /// Takes the next packet if it is a TNT, exactly as [`Iterator::next`] would (its offset
    /// and the packet); anything else (another packet, an error, a gap, the end) is left
    /// for `next`. The flow decoder's hot path: most of a trace is TNT, and this hands it
    /// over in registers instead of as a [`Decoded`] built and copied through memory.
    #[inline]
    pub fn next_tnt(&mut self) -> Option<(usize, Tnt)> {
        if self.lost || self.cyc_due || self.pos >= self.gap_at {
            return None;
        }
        let offset = self.pos;
        let tnt = Tnt::from_header(*self.buf.get(offset)?)?;
        self.pos = offset + 1;
        self.cyc_due = self.config.cycle_accurate && tnt.is_full();
        Some((offset, tnt))
    }

    /// Takes the next packet if it is a TIP that decodes (its offset, payload and expanded
    /// IP), exactly as [`Iterator::next`] would; anything else, and a TIP that `next` would
    /// report an error for or read near the end of the trace, is left for `next`. With
    /// [`Self::next_tnt`], the flow decoder's hot path.
    #[inline]
    pub fn next_tip(&mut self) -> Option<(usize, IpPayload, u64)> {
        if self.lost || self.cyc_due || self.pos >= self.gap_at {
            return None;
        }
        let offset = self.pos;
        let header = *self.buf.get(offset)?;
        if header & IP_PACKET_MASK != IP_PACKET || (header >> 3) & 7 != TIP_EVENT {
            return None;
        }
        let size = IpSize::from_cnt(header & 3)?;
        let mut word = [0u8; 8];
        word.copy_from_slice(self.buf.get(offset..offset + 8)?);
        let payload = IpPayload {
            size,
            zext: header & ZEXT_BIT != 0,
            bits: (u64::from_le_bytes(word) >> 8) & size.mask(),
        };
        // Leaves LAST_LIP alone where it fails: `next` reports that.
        let ip = self.last_lip.decompress(payload).ok()?;
        self.pos = offset + 1 + size.bytes();
        self.cyc_due = self.config.cycle_accurate && Packet::Tip(payload).carries_cycle_count();
        Some((offset, payload, ip))
    }

    /// Records an error at `offset` and arranges to resume at the next PSB after it.
    #[cold]
    fn fail(&mut self, offset: usize, kind: DecodeErrorKind) -> DecodeError {
        self.pos = (offset + 1).min(self.buf.len());
        self.lost = true;
        DecodeError { offset, kind }
    }

    #[cold]
    fn truncated(&mut self, packet: PacketKind, needed: usize) -> DecodeError {
        // Packets are at most 9 bytes long, so both counts fit a byte.
        let available = (self.buf.len() - self.pos) as u8;
        let needed = needed as u8;
        let kind = DecodeErrorKind::Truncated {
            packet,
            needed,
            available,
        };
        self.fail(self.pos, kind)
    }

    /// The `n` bytes of the packet at the current offset, or a truncation error.
    #[inline]
    fn take(&mut self, packet: PacketKind, n: usize) -> Result<&'a [u8], DecodeError> {
        match self.buf.get(self.pos..self.pos + n) {
            Some(bytes) => Ok(bytes),
            None => Err(self.truncated(packet, n)),
        }
    }

    /// A cycle-count packet (§4.2.14, figure 13) at the current offset.
    #[inline]
    fn decode_cyc(&mut self, first: u8) -> Result<Packet, DecodeError> {
        let len = first & 3;
        if len == 0 {
            return Err(self.fail(self.pos, DecodeErrorKind::ReservedCycleLength(first)));
        }
        let b = self.take(PacketKind::Cyc, len.into())?;
        let mut value = u32::from(b[0] >> 2);
        if len > 1 {
            value |= u32::from(b[1]) << 6;
        }
        if len > 2 {
            value |= u32::from(b[2]) << 14;
        }
        // The value fits `len` bytes by construction.
        Ok(Packet::Cyc(CycleCount { value, len }))
    }

    /// A TIP or FUP (§4.2.3, §4.2.4, figures 5 and 8), its IP expanded against LAST_LIP.
    #[inline]
    fn decode_ip_packet(&mut self, header: u8) -> Result<(Packet, u64), DecodeError> {
        let event = (header >> 3) & 7;
        let (packet, fup) = if event == TIP_EVENT {
            (PacketKind::Tip, None)
        } else {
            match FupEvent::from_code(event) {
                Some(e) => (PacketKind::Fup(e), Some(e)),
                None => return Err(self.fail(self.pos, DecodeErrorKind::ReservedHeader(header))),
            }
        };
        let Some(size) = IpSize::from_cnt(header & 3) else {
            return Err(self.fail(self.pos, DecodeErrorKind::ReservedIpSize { packet, header }));
        };
        let n = 1 + size.bytes();
        let bits = match self.buf.get(self.pos..self.pos + 8) {
            // Fast path: one unaligned load, masked to the payload.
            Some(b) => {
                let mut word = [0u8; 8];
                word.copy_from_slice(b);
                (u64::from_le_bytes(word) >> 8) & size.mask()
            }
            None => {
                let b = self.take(packet, n)?;
                b[1..].iter().rev().fold(0, |acc, &x| (acc << 8) | u64::from(x))
            }
        };
        let payload = IpPayload {
            size,
            zext: header & ZEXT_BIT != 0,
            bits,
        };
        let ip = match self.last_lip.decompress(payload) {
            Ok(ip) => ip,
            Err(source) => return Err(self.fail(self.pos, DecodeErrorKind::NoPreviousIp { packet, source })),
        };
        self.pos += n;
        let packet = match fup {
            Some(e) => Packet::Fup(e, payload),
            None => Packet::Tip(payload),
        };
        Ok((packet, ip))
    }

    /// The packets with header bits 7:6 = 11 (figure 2): PSB, TraceSTOP, PIP, MTC, STS.
    #[inline]
    fn decode_extended(&mut self, header: u8) -> Result<Packet, DecodeError> {
        let packet = match header {
            PSB => {
                let b = self.take(PacketKind::Psb, PSB_BYTES.len())?;
                if let Some(index) = b[1..].iter().position(|&x| x != 0) {
                    let kind = DecodeErrorKind::MalformedPsb {
                        index: index as u8 + 1,
                        value: b[1 + index],
                    };
                    return Err(self.fail(self.pos, kind));
                }
                Packet::Psb
            }
            TRACE_STOP => Packet::TraceStop,
            h if h & !1 == PIP => {
                let b = self.take(PacketKind::Pip, 6)?;
                let cr3 = b[1..6].iter().rev().fold(0, |acc, &x| (acc << 8) | u64::from(x));
                Packet::Pip(Pip { cr3, pg: h & 1 != 0 })
            }
            h if h & !3 == MTC => {
                let b = self.take(PacketKind::Mtc, 2)?;
                Packet::Mtc(Mtc { rng: h & 3, tsc: b[1] })
            }
            h if h & 0xf0 == STS => {
                let b = self.take(PacketKind::Sts, 7)?;
                let btc = b[2..7].iter().rev().fold(0, |acc, &x| (acc << 8) | u64::from(x));
                Packet::Sts(Sts {
                    acbr: ((h & 0xf) << 2) | (b[1] >> 6),
                    ecbr: b[1] & 0x3f,
                    btc,
                })
            }
            _ => return Err(self.fail(self.pos, DecodeErrorKind::ReservedHeader(header))),
        };
        self.pos += packet.encoded_len();
        Ok(packet)
    }

    /// Any packet but the TNT fast path of `next`.
    #[inline(always)]
    fn decode_one(&mut self, offset: usize, header: u8) -> Result<Decoded, DecodeError> {
        let (packet, ip) = if self.cyc_due {
            self.cyc_due = false;
            let packet = self.decode_cyc(header)?;
            self.pos += packet.encoded_len();
            return Ok(Decoded {
                offset,
                packet,
                ip: None,
            });
        } else if header & TNT_MASK == 0 {
            // 0x00 and 0x01: the TNT fast path took every valid TNT header.
            return Err(self.fail(offset, DecodeErrorKind::EmptyTnt(header)));
        } else if header & IP_PACKET_MASK == IP_PACKET {
            let (packet, ip) = self.decode_ip_packet(header)?;
            (packet, Some(ip))
        } else {
            (self.decode_extended(header)?, None)
        };
        self.cyc_due = self.config.cycle_accurate && packet.carries_cycle_count();
        Ok(Decoded { offset, packet, ip })
    }
}

impl Iterator for PacketDecoder<'_> {
    type Item = Result<Decoded, DecodeError>;

    /// The next packet or error; `None` at the end of the trace. After an error, decoding
    /// resumes at the next PSB, and the bytes skipped to reach it are not reported.
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.lost && self.sync_forward().is_none() {
            return None;
        }
        if self.pos >= self.gap_at {
            return Some(Err(self.gap()));
        }
        let offset = self.pos;
        let Some(&header) = self.buf.get(offset) else {
            // The trace may not end where a cycle count is due: that packet is cut off.
            return self.cyc_due.then(|| Err(self.truncated(PacketKind::Cyc, 1)));
        };
        // Fast path for the most frequent packet, a TNT byte.
        if !self.cyc_due {
            if let Some(tnt) = Tnt::from_header(header) {
                self.pos = offset + 1;
                self.cyc_due = self.config.cycle_accurate && tnt.is_full();
                return Some(Ok(Decoded {
                    offset,
                    packet: TNT_PACKETS[usize::from(header)],
                    ip: None,
                }));
            }
        }
        Some(self.decode_one(offset, header))
    }
}

#[cfg(test)]
mod tests;

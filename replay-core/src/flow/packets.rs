//! What the walk takes from the trace: the next flow packet, a TNT bit, a TIP, a return's
//! target; and what the trace says after its last packet (the recording's end).

use super::block::NO_BLOCK;
use super::decoder::FlowDecoder;
use super::failure::{Failure, Step};
use crate::packet::{Decoded, FupEvent, Packet};

impl FlowDecoder<'_> {
    /// The next flow packet, with FUP.PCC (information only) and PIP (switching the address
    /// space) taken on the way.
    pub(super) fn peek(&mut self) -> Step<Option<Decoded>> {
        loop {
            match self.source.peek() {
                None => return Ok(None),
                Some(Err(e)) => {
                    let (offset, message) = (e.offset, e.kind.to_string());
                    let lost = match e.kind {
                        crate::packet::DecodeErrorKind::Lost { bytes } => Some(bytes),
                        _ => None,
                    };
                    let mut f = Failure::new(None, offset, message);
                    f.lost = lost;
                    f.from_source = true;
                    return Err(f);
                }
                Some(Ok(d)) => match d.packet {
                    Packet::Fup(FupEvent::PeriodicCycleCount, _) => {
                        self.source.next();
                    }
                    Packet::Pip(pip) => {
                        self.source.next();
                        self.switch_space(pip.cr3);
                    }
                    _ => return Ok(Some(*d)),
                },
            }
        }
    }

    pub(super) fn switch_space(&mut self, cr3: u64) {
        if let Some(i) = self.spaces.iter().position(|(c, ..)| *c == Some(cr3)) {
            self.current = i;
            // Block ids belong to one space's cache.
            self.last_call_block = NO_BLOCK;
        }
    }

    pub(super) fn offset(&mut self) -> usize {
        self.source.offset()
    }

    #[cold]
    pub(super) fn unexpected(&mut self, ip: u64, wanted: &str, found: Option<Decoded>) -> Box<Failure> {
        let offset = found.map_or_else(|| self.offset(), |d| d.offset);
        let name = found.map_or("the end of the trace", |d| d.packet.name());
        let mut f = Failure::new(
            Some(ip),
            offset,
            format!("{wanted} at {ip:#x}, but the trace has {name}"),
        );
        f.end = found.is_none();
        f
    }

    /// The next TNT bit, for the branch at `ip`. Inline: most bits are pending already; the
    /// next packet is taken out of line.
    #[inline(always)]
    pub(super) fn take_bit(&mut self, ip: u64) -> Step<bool> {
        if self.tnt_left == 0 {
            self.refill_bits(ip)?;
        }
        self.tnt_left -= 1;
        Ok((self.tnt_bits >> self.tnt_left) & 1 == 1)
    }

    /// No TNT bit pending: the next TNT packet's bits for the branch at `ip` (or, past the
    /// last packet, those RTIT_TNT_BUFF held); afterwards at least one is pending.
    #[inline(never)]
    fn refill_bits(&mut self, ip: u64) -> Step<()> {
        if let Some(tnt) = self.source.peek_tnt() {
            self.source.next();
            self.tnt_left = u32::from(tnt.count());
            self.tnt_bits = u64::from(tnt.header());
            return Ok(());
        }
        let d = self.peek()?;
        match d.map(|d| d.packet) {
            Some(Packet::Tnt(tnt)) => {
                self.source.next();
                self.tnt_left = u32::from(tnt.count());
                self.tnt_bits = u64::from(tnt.header());
            }
            None if self.begin_tail() && self.tnt_left > 0 => {}
            _ => return Err(self.unexpected(ip, "a conditional branch needs a TNT bit", d)),
        }
        Ok(())
    }

    /// The TIP for the indirect branch at `ip`.
    pub(super) fn take_tip(&mut self, ip: u64, what: &str) -> Step<u64> {
        if self.tnt_left != 0 {
            let message = format!("{} TNT bits left over at the {what} at {ip:#x}", self.tnt_left);
            return Err(Failure::new(Some(ip), self.offset(), message));
        }
        if let Some(target) = self.source.peek_tip() {
            self.source.next();
            return Ok(target);
        }
        let d = self.peek()?;
        match d {
            Some(Decoded {
                packet: Packet::Tip(_),
                ip: Some(target),
                ..
            }) => {
                self.source.next();
                Ok(target)
            }
            _ => Err(self.unexpected(ip, &format!("the {what} needs a TIP"), d)),
        }
    }

    /// Where the near RET at `ip` goes: compressed (a taken TNT bit: to the last call's NLIP)
    /// or not (a TIP).
    pub(super) fn return_target(&mut self, ip: u64) -> Step<u64> {
        let compressed = self.tnt_left > 0
            || self.source.peek_tnt().is_some()
            || match self.peek()? {
                Some(d) => matches!(d.packet, Packet::Tnt(_)),
                None => self.begin_tail() && self.tnt_left > 0,
            };
        if !compressed {
            return self.take_tip(ip, "return");
        }
        if !self.take_bit(ip)? {
            let message = format!("a not-taken TNT bit for the return at {ip:#x}");
            return Err(Failure::new(Some(ip), self.offset(), message));
        }
        match self.last_call_nlip {
            Some(nlip) => Ok(nlip),
            None => {
                let message = format!("a compressed return at {ip:#x} with no call seen to return to");
                Err(Failure::new(Some(ip), self.offset(), message))
            }
        }
    }

    /// The trace has no packet left. With the recording's end, the walk goes on: the TNT
    /// bits RTIT_TNT_BUFF still held become pending, and the history stops at the count the
    /// recorder saw. Returns whether the walk is past the last packet with an end to reach.
    #[cold]
    pub(super) fn begin_tail(&mut self) -> bool {
        if let Some(end) = self.end.take() {
            self.tail = true;
            self.limit = end.instructions;
            // The register's bits are an item of the trace like a TNT packet: progress.
            self.source.taken += 1;
            if let Some(tnt) = end.tnt_buff {
                if self.tnt_left == 0 {
                    self.tnt_left = u32::from(tnt.count());
                    self.tnt_bits = u64::from(tnt.header());
                }
            }
        }
        self.tail
    }

    /// An error for a walk that entered a block again with the trace standing still.
    #[cold]
    pub(super) fn spinning(&mut self, ip: u64) -> Box<Failure> {
        let d = self.peek().ok().flatten();
        let next = d.map_or_else(
            || "the end of the trace".to_string(),
            |d| format!("{} at offset {:#x}", d.packet.name(), d.offset),
        );
        let pending = match self.tnt_left {
            0 => String::new(),
            n => format!(" with {n} TNT bits pending"),
        };
        let message = format!(
            "the code loops through {ip:#x} with no branch the trace could describe, and what the trace says next ({next}{pending}) never fits in it: the trace does not match the code"
        );
        let offset = self.offset();
        Failure::new(Some(ip), offset, message)
    }
}

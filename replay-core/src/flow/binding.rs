//! Where packets bind when no branch asks for one: while tracing is off or after an error
//! (waiting for an IP to trust), and at each instruction boundary while tracing (an
//! asynchronous FUP, a silent stop and restart, a gap, TraceSTOP).

use super::decoder::{Boundary, FlowDecoder, State};
use super::failure::Failure;
use super::{EventKind, FlowSink};
use crate::cofi::Cofi;
use crate::packet::{Decoded, FupEvent, Packet};

impl FlowDecoder<'_> {
    /// Disabled or lost: read packets until the history can continue.
    pub(super) fn idle(&mut self, sink: &mut impl FlowSink) {
        let lost = self.state == State::Lost;
        let d = match self.peek() {
            Ok(Some(d)) => d,
            Ok(None) => {
                self.state = State::Done;
                return;
            }
            Err(f) => return self.fail(sink, *f),
        };
        self.source.next();
        match (d.packet, d.ip) {
            (Packet::Fup(FupEvent::PacketGenEnable, _), Some(ip)) => {
                self.event(sink, d.offset, EventKind::Enabled { ip });
                self.state = State::Tracing(ip);
            }
            // Lost: tracing is now known to be off. Disabled: an extra FUP.PGD (errata E2).
            (Packet::Fup(FupEvent::PacketGenDisable, _), _) if lost => self.state = State::Disabled,
            (Packet::Fup(FupEvent::PacketGenDisable, _), _) => {}
            (Packet::Fup(FupEvent::BufferOverflow, _), Some(ip)) => self.gap(sink, d.offset, ip),
            (Packet::Tip(_), Some(ip)) if lost => {
                self.event(sink, d.offset, EventKind::Enabled { ip });
                self.state = State::Tracing(ip);
            }
            (Packet::Tnt(_) | Packet::Fup(FupEvent::FarTransfer, _), _) if lost => {}
            (Packet::TraceStop, _) => self.stop(sink, d.offset),
            (packet, _) if !lost => {
                let message = format!("{} while tracing is disabled", packet.name());
                let f = Failure::new(None, d.offset, message);
                self.fail(sink, *f);
            }
            _ => {}
        }
    }

    pub(super) fn gap(&mut self, sink: &mut impl FlowSink, offset: usize, ip: u64) {
        self.event(sink, offset, EventKind::Gap { ip });
        self.last_call_nlip = None;
        self.tnt_left = 0;
        self.state = State::Tracing(ip);
        // Errata E5: a TIP right after FUP.BuffOvf with the same IP is spurious.
        if let Ok(Some(Decoded {
            packet: Packet::Tip(_),
            ip: Some(t),
            ..
        })) = self.peek()
        {
            if t == ip {
                self.source.next();
            }
        }
    }

    pub(super) fn stop(&mut self, sink: &mut impl FlowSink, offset: usize) {
        self.event(sink, offset, EventKind::Stop);
        self.source.timing.restarted();
        self.tnt_left = 0;
        self.state = State::Disabled;
    }

    /// Tracing stopped with FUP.PGD at `ip`; a TIP right after it (a far transfer that kept
    /// ContextEn, table 19 row 30) is consumed with it.
    pub(super) fn disabled(&mut self, sink: &mut impl FlowSink, offset: usize, ip: u64) {
        self.event(sink, offset, EventKind::Disabled { ip: Some(ip) });
        if let Ok(Some(Decoded {
            packet: Packet::Tip(_), ..
        })) = self.peek()
        {
            self.source.next();
        }
        self.state = State::Disabled;
    }

    /// An asynchronous FUP binds at `ip` on the first pass the walk makes there (§4.3). If
    /// the code from `ip` comes back to it needing nothing from the trace, the CPU may have
    /// passed through `ip` any number of times first: says so with a [`EventKind::Spins`].
    fn spun(&mut self, ip: u64, offset: usize, sink: &mut impl FlowSink) {
        if self.loops_back(ip) {
            let kind = EventKind::Spins { ip, instructions: None };
            self.event(sink, offset, kind);
        }
    }

    /// Whether the code from `ip` returns to `ip` through straight-line code, direct jumps
    /// and direct calls only (looked at for a few thousand blocks at most).
    fn loops_back(&mut self, ip: u64) -> bool {
        const BLOCKS: usize = 4096;
        let (_, space, cache) = &mut self.spaces[self.current];
        let mut seen = rustc_hash::FxHashSet::default();
        let mut at = ip;
        for _ in 0..BLOCKS {
            let Ok(id) = cache.get(space, at) else { return false };
            if !seen.insert(id) {
                return false;
            }
            let block = cache.block(id);
            if at != ip && block.index_of(ip).is_some() {
                return true;
            }
            let t = block.term;
            at = match t.cofi {
                Cofi::None => t.nlip(),
                Cofi::DirectJump | Cofi::DirectCall => t.target,
                _ => return false,
            };
            if at == ip {
                return true;
            }
        }
        false
    }

    /// What binds at the boundary before `ip`, with no TNT bit pending.
    pub(super) fn boundary(&mut self, ip: u64, sink: &mut impl FlowSink) -> Boundary {
        // The usual cases first, read in place: the next TNT bits (taken now, as below), or a
        // TIP (the block's branch takes it; nothing binds here).
        if let Some(tnt) = self.source.peek_tnt() {
            self.source.next();
            self.tnt_left = u32::from(tnt.count());
            self.tnt_bits = u64::from(tnt.header());
            return Boundary::Walk;
        }
        if self.source.peek_tip().is_some() {
            return Boundary::Walk;
        }
        let d = match self.peek() {
            Ok(Some(d)) => d,
            Ok(None) if self.begin_tail() => return Boundary::Walk,
            Ok(None) => {
                self.state = State::Done;
                return Boundary::Leave;
            }
            Err(f) => {
                self.fail(sink, *f);
                return Boundary::Leave;
            }
        };
        let Some(fup_ip) = d.ip else {
            match d.packet {
                Packet::TraceStop => {
                    self.source.next();
                    self.stop(sink, d.offset);
                    return Boundary::Leave;
                }
                // The next bits: nothing can bind before they are used, so take them now
                // and skip the boundary checks until they are.
                Packet::Tnt(tnt) => {
                    self.source.next();
                    self.tnt_left = u32::from(tnt.count());
                    self.tnt_bits = u64::from(tnt.header());
                }
                _ => {}
            }
            return Boundary::Walk;
        };
        match d.packet {
            Packet::Fup(FupEvent::BufferOverflow, _) => {
                self.source.next();
                self.gap(sink, d.offset, fup_ip);
                Boundary::Continue(fup_ip)
            }
            // Tracing was stopped without FUP.PGD (TriggerEn cleared, §4.2.8) and resumed.
            Packet::Fup(FupEvent::PacketGenEnable, _) => {
                self.source.next();
                self.event(sink, d.offset, EventKind::Disabled { ip: None });
                self.event(sink, d.offset, EventKind::Enabled { ip: fup_ip });
                Boundary::Continue(fup_ip)
            }
            Packet::Fup(FupEvent::PacketGenDisable, _) if fup_ip == ip => {
                self.source.next();
                self.spun(ip, d.offset, sink);
                self.disabled(sink, d.offset, ip);
                Boundary::Leave
            }
            Packet::Fup(FupEvent::FarTransfer, _) if fup_ip == ip => {
                self.source.next();
                self.spun(ip, d.offset, sink);
                match self.take_tip(ip, "interrupt or fault") {
                    Ok(target) => {
                        self.event(sink, d.offset, EventKind::Interrupt { ip, target });
                        Boundary::Continue(target)
                    }
                    Err(f) => {
                        self.fail(sink, *f);
                        Boundary::Leave
                    }
                }
            }
            _ => Boundary::Walk,
        }
    }
}

//! The walk: blocks from a known IP, taking from the trace what each terminator needs.
//!
//! Binding rules (§4.2.2, §4.3, table 1, table 19):
//! - a partial TNT is flushed before every FUP, TIP and PIP, so when a FUP is the next packet
//!   and no TNT bit is pending, every branch before the FUP's event has been walked;
//! - an asynchronous FUP (FUP.FAR of an interrupt or fault, FUP.PGD) binds at the first
//!   instruction boundary, from there, whose IP is the FUP's: the instruction there did not
//!   execute (a fault's FUP carries its own IP, an interrupt's the next one);
//! - a far-transfer instruction takes FUP.FAR or FUP.PGD with its NLIP (or, errata E1, an
//!   address inside it), then the TIP (none after a FUP.PGD that left ContextEn);
//! - a near branch that leaves the filter range is followed by FUP.PGD with its NLIP, after
//!   its TIP if it has one; walking out of a range by falling through is the same FUP at the
//!   next boundary;
//! - a near RET is compressed when a TNT bit is pending or a TNT packet is next, and then
//!   returns to the NLIP of the last near call walked (RTIT_LAST_CALL_NLIP);
//! - FUP.BuffOvf is a gap: the branches before it are walked, then the history resumes at
//!   its IP (errata E5: a TIP to that same IP right after it is dropped);
//! - a FUP.PGD while tracing is already disabled is ignored (errata E2).
//!
//! A terminator is emitted only once its packet agreed with it, so an inconsistency never
//! leaves an invented instruction behind. After an error the decoder waits for the next IP it
//! can trust: FUP.PGE, FUP.BuffOvf or a TIP (after FUP.FAR, the TIP that follows it).
//!
//! Bounded by the trace: a walk that comes back to a block it entered since the trace last
//! said anything is an error at the next packet's offset (`spin`), so the history decoded
//! from any trace is at most three times the images' blocks per packet or TNT bit it holds.
//! Past the last packet the walk goes on only with the recording's [`TraceEnd`] (the bits
//! left in RTIT_TNT_BUFF), and only to the instruction count the recorder saw.

use super::block::{BlockCache, BlockError, NO_BLOCK};
use super::failure::{Failure, Step};
use super::resume::{Unwatched, Watch};
use super::source::Source;
use super::spin::Spin;
use super::{EventKind, FlowEvent, FlowSink, Timing, TraceEnd};
use crate::cofi::{Cofi, FarKind};
use crate::image::AddressSpace;
use crate::packet::{Decoded, DecoderConfig, FupEvent, Packet};

/// Configuration of a flow decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowConfig {
    /// The packet format (Cycle_Acc).
    pub packets: DecoderConfig,
    /// The IP filter the trace was written under, where known: whether a taken near branch
    /// can have left it, and so whether a FUP.PGD with the branch's NLIP right after it is
    /// the branch leaving the filter range (table 1) or an interrupt that came once the code
    /// had come back to that NLIP (a taken `jne` whose target jumps back to it, then a
    /// signal: read as a filter exit, the history lost the instructions in between and every
    /// position after it was off). `None`: any branch may have left it.
    pub filter: Option<IpFilter>,
}

/// RTIT_EVENTS' filter event and the ranges of RTIT_LIP0-3 (§3.3.5, table 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpFilter {
    /// RTIT_EVENTS (its low three bits: the filter event).
    pub events: u64,
    /// RTIT_LIP0-3: RANGE0 is [LIP0, LIP2), RANGE1 [LIP1, LIP3).
    pub lip: [u64; 4],
}

impl IpFilter {
    /// FilterEn after a branch to `ip`: a branch enters the ranges it lands in and leaves
    /// the others.
    pub const fn enabled_after_branch(&self, ip: u64) -> bool {
        let in0 = self.lip[0] <= ip && ip < self.lip[2];
        let in1 = self.lip[1] <= ip && ip < self.lip[3];
        match self.events & 0b111 {
            0b000 => in0,
            0b001 => in1,
            0b010 => in0 || in1,
            0b111 => true,
            _ => false,
        }
    }
}

impl Default for FlowConfig {
    fn default() -> Self {
        Self::from_rtit_ctl(0)
    }
}

impl FlowConfig {
    /// The configuration for a trace written under this RTIT_CTL value, with any IP filter.
    pub const fn from_rtit_ctl(ctl: u64) -> Self {
        Self {
            packets: DecoderConfig::from_rtit_ctl(ctl),
            filter: None,
        }
    }

    /// The configuration for a trace written under these RTIT_CTL and RTIT_EVENTS values and
    /// RTIT_LIP0-3.
    pub const fn from_rtit(ctl: u64, events: u64, lip: [u64; 4]) -> Self {
        Self {
            packets: DecoderConfig::from_rtit_ctl(ctl),
            filter: Some(IpFilter { events, lip }),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Waiting for FUP.PGE.
    Disabled,
    /// After an error: waiting for an IP to trust.
    Lost,
    /// Walking from this IP.
    Tracing(u64),
    /// The trace has ended.
    Done,
}

/// What happened at an instruction boundary.
pub(super) enum Boundary {
    /// Nothing binds here: walk the block.
    Walk,
    /// The history continues at this IP.
    Continue(u64),
    /// Tracing stopped, ended or failed here.
    Leave,
}

/// Decodes a trace against an address space (or several, switched by PIP).
pub struct FlowDecoder<'a> {
    pub(super) source: Source<'a>,
    pub(super) spaces: Vec<(Option<u64>, &'a AddressSpace, BlockCache)>,
    pub(super) current: usize,
    pub(super) state: State,
    /// Pending TNT bits: the `tnt_left` low bits of `tnt_bits`, oldest highest.
    pub(super) tnt_bits: u64,
    pub(super) tnt_left: u32,
    /// The decoder's RTIT_LAST_CALL_NLIP: kept across PSBs (§3.3.9), cleared by FUP.BuffOvf.
    pub(super) last_call_nlip: Option<u64>,
    /// The block whose call set `last_call_nlip`: its unused fall-through link leads to the
    /// block a return to that NLIP lands in.
    pub(super) last_call_block: u32,
    pub(super) position: u64,
    /// A run not yet handed to the sink, extended while the history stays sequential.
    pub(super) run: Option<(u64, u64, u64)>,
    /// Catches a walk that the trace can never end.
    pub(super) spin: Spin,
    /// What the recording says about the end of the trace, until the last packet is used.
    pub(super) end: Option<TraceEnd>,
    /// Past the last packet: walking on to `limit` instructions with the end's TNT bits.
    pub(super) tail: bool,
    pub(super) limit: u64,
    /// A watcher stopped the decode at a clean point ([`super::resume`]).
    pub(super) paused: bool,
    /// See [`FlowConfig::filter`].
    pub(super) filter: Option<IpFilter>,
}

impl<'a> FlowDecoder<'a> {
    /// A decoder of `trace` with the code of `space`.
    pub fn new(trace: &'a [u8], config: FlowConfig, space: &'a AddressSpace) -> Self {
        Self::with_spaces(trace, config, vec![(None, space)])
    }

    /// A decoder with one address space per CR3, switched by PIP packets; an entry with no
    /// CR3 is used until the first PIP.
    pub fn with_spaces(trace: &'a [u8], config: FlowConfig, spaces: Vec<(Option<u64>, &'a AddressSpace)>) -> Self {
        Self {
            source: Source::new(trace, config.packets),
            spaces: spaces.into_iter().map(|(cr3, s)| (cr3, s, BlockCache::new())).collect(),
            current: 0,
            state: State::Disabled,
            tnt_bits: 0,
            tnt_left: 0,
            last_call_nlip: None,
            last_call_block: NO_BLOCK,
            position: 0,
            run: None,
            spin: Spin::default(),
            end: None,
            tail: false,
            limit: u64::MAX,
            paused: false,
            filter: config.filter,
        }
    }

    /// What the recording says about the end of the trace: past the last packet, the
    /// decoder uses the TNT bits left in RTIT_TNT_BUFF and stops at exactly the instruction
    /// count the recorder saw (or earlier, where a branch would need a packet).
    pub fn with_end(mut self, end: Option<TraceEnd>) -> Self {
        self.end = end;
        self
    }

    /// Trace bytes were lost before each of `gaps` (offset of the first byte after, bytes lost
    /// if known; ascending), as a recording's manifest lists them: the history has a
    /// [`EventKind::Lost`] there and resumes at the next IP the trace gives.
    pub fn with_gaps(mut self, gaps: &'a [(usize, Option<u64>)]) -> Self {
        self.source = self.source.with_gaps(gaps);
        self
    }

    /// What the timing packets said so far.
    pub fn timing(&self) -> Timing {
        self.source.timing
    }

    /// Instructions reconstructed so far.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Decodes the whole trace into `sink`.
    pub fn decode(&mut self, sink: &mut impl FlowSink) {
        self.decode_watched(sink, &mut Unwatched);
    }

    // ---- output ----

    #[inline]
    pub(super) fn emit(&mut self, ip: u64, count: u64, end: u64, sink: &mut impl FlowSink) {
        self.position += count;
        match &mut self.run {
            Some((_, n, e)) if *e == ip => {
                *n += count;
                *e = end;
            }
            run => {
                if let Some((rip, n, _)) = run.take() {
                    sink.run(rip, n);
                }
                *run = Some((ip, count, end));
            }
        }
    }

    pub(super) fn flush(&mut self, sink: &mut impl FlowSink) {
        if let Some((ip, n, _)) = self.run.take() {
            sink.run(ip, n);
        }
    }

    pub(super) fn event(&mut self, sink: &mut impl FlowSink, offset: usize, kind: EventKind) {
        self.flush(sink);
        sink.event(FlowEvent {
            kind,
            offset,
            position: self.position,
        });
    }

    #[cold]
    pub(super) fn fail(&mut self, sink: &mut impl FlowSink, f: Failure) {
        if f.from_source {
            self.source.next();
        }
        if f.end {
            self.state = State::Done;
            return;
        }
        self.tnt_left = 0;
        let kind = match f.lost {
            Some(bytes) => EventKind::Lost { bytes },
            None => EventKind::Error {
                ip: f.ip,
                message: f.message,
            },
        };
        self.event(sink, f.offset, kind);
        // The decoder's own RTIT_LAST_CALL_NLIP does not survive lost data.
        self.last_call_nlip = None;
        self.state = State::Lost;
    }

    /// Walks blocks from `ip` until tracing stops, the trace ends or an error.
    pub(super) fn walk<S: FlowSink>(&mut self, mut ip: u64, sink: &mut S, watch: &mut impl Watch<'a, S>) {
        // The block just left and whether by its taken edge, to follow cached links.
        let mut from: Option<(u32, bool)> = None;
        loop {
            if self.tnt_left == 0 {
                if self.clean_point(ip, sink, watch) {
                    return;
                }
                match self.boundary(ip, sink) {
                    Boundary::Walk => {}
                    Boundary::Continue(next) => {
                        ip = next;
                        from = None;
                        continue;
                    }
                    Boundary::Leave => return,
                }
            }
            let id = match self.block_at(ip, from) {
                Ok(id) => id,
                Err(e) => {
                    let offset = self.offset();
                    let f = Failure::new(Some(ip), offset, e.to_string());
                    return self.fail(sink, *f);
                }
            };
            if self.tail {
                // Past the last packet: the history ends at the recorder's count.
                let left = self.limit.saturating_sub(self.position);
                let len = u64::from(self.spaces[self.current].2.term(id).1);
                if left <= len {
                    if left > 0 {
                        self.emit(ip, left, 0, sink);
                    }
                    self.state = State::Done;
                    return;
                }
            }
            let (term, len) = self.spaces[self.current].2.term(id);
            let mut count = u64::from(len) - 1;
            // An asynchronous FUP that binds inside this block: walk up to it.
            if self.tnt_left == 0 && !self.source.peek_branch() {
                if let Ok(Some(Decoded {
                    packet: Packet::Fup(e, _),
                    ip: Some(f),
                    ..
                })) = self.peek()
                {
                    let block = self.spaces[self.current].2.block(id);
                    let binds = matches!(e, FupEvent::PacketGenDisable | FupEvent::FarTransfer);
                    if binds && f > ip && f <= term.ip {
                        if let Some(k) = block.index_of(f) {
                            self.emit(ip, u64::from(k), f, sink);
                            ip = f;
                            from = None;
                            continue;
                        }
                    }
                }
            }
            if count > 0 {
                self.emit(ip, count, term.ip, sink);
            }
            count = 1;
            let nlip = term.nlip();
            let next = match self.terminator(&term, sink) {
                Ok(next) => next,
                Err(f) => return self.fail(sink, *f),
            };
            if !matches!(self.state, State::Tracing(_)) {
                // A far transfer that ended in FUP.PGD: emitted, and tracing stopped.
                return;
            }
            self.emit(term.ip, count, nlip, sink);
            // A near branch out of the filter range: FUP.PGD with its NLIP (table 1).
            let may_leave = !matches!(self.filter, Some(f) if f.enabled_after_branch(next));
            if may_leave && next != nlip && self.tnt_left == 0 && !self.source.peek_branch() {
                if let Ok(Some(Decoded {
                    packet: Packet::Fup(FupEvent::PacketGenDisable, _),
                    ip: Some(f),
                    offset,
                })) = self.peek()
                {
                    if f == nlip {
                        self.source.next();
                        return self.disabled(sink, offset, nlip);
                    }
                }
            }
            if term.cofi.is_near_call() {
                self.last_call_block = id;
            }
            from = match term.cofi {
                // Direct successors are fixed: the block at `next` is the one to link.
                Cofi::Conditional => Some((id, next != nlip)),
                // A block that needed nothing from the trace: only such blocks make a walk
                // that circles (anything taken moves the trace's mark on and restarts the
                // detector), so only they are checked, off the hot path of loops that branch.
                Cofi::None | Cofi::DirectJump | Cofi::DirectCall => {
                    if self.spin.loops((self.source.taken, self.tnt_left), id) {
                        return self.spun_forever(ip, sink);
                    }
                    Some((id, next != nlip))
                }
                Cofi::Return if Some(next) == self.last_call_nlip && self.last_call_block != NO_BLOCK => {
                    Some((self.last_call_block, false))
                }
                _ => None,
            };
            ip = next;
        }
    }

    /// The walk came back to the block at `ip` with the trace standing still: it would circle
    /// forever. Past the last packet that is where the program was when it was stopped (every
    /// remaining instruction a further pass: counted, not walked, so no count, right or wrong,
    /// makes the history circle without bound); before it, the trace does not match the code.
    #[cold]
    fn spun_forever(&mut self, ip: u64, sink: &mut impl FlowSink) {
        if self.tail {
            let instructions = Some(self.limit.saturating_sub(self.position));
            let offset = self.offset();
            self.event(sink, offset, EventKind::Spins { ip, instructions });
            self.state = State::Done;
            return;
        }
        let f = self.spinning(ip);
        self.fail(sink, *f);
    }

    /// The block at `ip`, through the link from the previous block when there is one.
    #[inline]
    fn block_at(&mut self, ip: u64, from: Option<(u32, bool)>) -> Result<u32, BlockError> {
        let (_, space, cache) = &mut self.spaces[self.current];
        if let Some((prev, taken)) = from {
            let linked = cache.linked(prev, taken);
            if linked != NO_BLOCK {
                return Ok(linked);
            }
            let id = cache.get(space, ip)?;
            cache.link(prev, taken, id);
            return Ok(id);
        }
        cache.get(space, ip)
    }

    /// Executes a terminator against the trace: where it goes. After a far transfer that
    /// ended in FUP.PGD the state is no longer `Tracing` (it executed, then tracing stopped).
    /// Always inlined: once per block, and left out of line in the watched decode of a
    /// stretch it cost a call with the terminator spilled to memory (10% of the profile).
    #[inline(always)]
    fn terminator(&mut self, t: &super::Terminator, sink: &mut impl FlowSink) -> Step<u64> {
        let nlip = t.nlip();
        Ok(match t.cofi {
            Cofi::None => nlip,
            Cofi::Conditional => {
                if self.take_bit(t.ip)? {
                    t.target
                } else {
                    nlip
                }
            }
            Cofi::DirectJump => t.target,
            Cofi::DirectCall => {
                self.last_call_nlip = Some(nlip);
                t.target
            }
            Cofi::IndirectJump => self.take_tip(t.ip, "indirect jump")?,
            Cofi::IndirectCall => {
                let target = self.take_tip(t.ip, "indirect call")?;
                self.last_call_nlip = Some(nlip);
                target
            }
            Cofi::Return => self.return_target(t.ip)?,
            Cofi::Far(kind) => return self.far_transfer(t, kind, sink),
            Cofi::Exception => {
                let d = self.peek()?;
                return Err(self.unexpected(t.ip, "an instruction that cannot execute (#UD) needs a fault", d));
            }
        })
    }

    /// A far-transfer instruction: FUP.FAR (its NLIP, or inside it: E1) and TIP, or FUP.PGD.
    /// Rare (system calls, faults): kept out of the walk's inlined code.
    #[inline(never)]
    fn far_transfer(&mut self, t: &super::Terminator, kind: FarKind, sink: &mut impl FlowSink) -> Step<u64> {
        let nlip = t.nlip();
        if self.tnt_left != 0 {
            let offset = self.offset();
            let message = format!(
                "{} TNT bits left over at the far transfer at {:#x}",
                self.tnt_left, t.ip
            );
            return Err(Failure::new(Some(t.ip), offset, message));
        }
        let d = self.peek()?;
        if let Some(Decoded {
            packet: Packet::Fup(event, _),
            ip: Some(f),
            offset,
        }) = d
        {
            if f > t.ip && f <= nlip {
                match event {
                    FupEvent::FarTransfer => {
                        self.source.next();
                        return self.take_tip(t.ip, "far transfer");
                    }
                    FupEvent::PacketGenDisable => {
                        self.source.next();
                        self.emit(t.ip, 1, nlip, sink);
                        self.disabled(sink, offset, nlip);
                        return Ok(nlip);
                    }
                    _ => {}
                }
            }
        }
        if kind == FarKind::Into {
            // INTO without OF set does not trap.
            return Ok(nlip);
        }
        Err(self.unexpected(t.ip, "a far transfer needs FUP.FAR or FUP.PGD with its next IP", d))
    }
}

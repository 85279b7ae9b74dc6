//! A decode watched at its clean points ([`super::resume`]): started cold at a PSB, taken
//! up again from a [`Resume`], stopped where a watcher says.

use super::decoder::{FlowDecoder, State};
use super::resume::{CleanPoint, Resume, Watch};
use super::FlowSink;
use crate::recording::sync_points::SyncPoint;

impl<'a> FlowDecoder<'a> {
    /// Starts cold at the PSB at `offset`: waits for an IP to trust, knows no previous IP nor
    /// call, and reports nothing of the trace before `offset`.
    pub fn cold_at(mut self, offset: usize) -> Self {
        self.source.seek_cold(offset);
        self.state = State::Lost;
        self
    }

    /// Starts at a recorder's sync point ([`crate::recording::sync_points`]): in the state the
    /// whole decode is in there, as if `position` instructions came before (of the first
    /// address space: a recording with sync points has one).
    pub fn synced(mut self, point: &SyncPoint, position: u64) -> Self {
        self.source.seek_synced(point.offset as usize, point.last_lip);
        self.state = State::Tracing(point.ip);
        self.last_call_nlip = point.last_call_nlip;
        self.current = 0;
        self.position = position;
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

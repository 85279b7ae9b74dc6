//! Building a timeline from the flow decoder's runs and events as they come, each new
//! distinct run decoded into a block once, so nothing per instruction is ever held.

use rustc_hash::FxHashMap;

use super::Timeline;
use crate::flow::{FlowEvent, FlowSink, InsnStream};
use crate::image::AddressSpace;

/// Receives the decoder's output (a [`FlowSink`]) and makes a [`Timeline`] of it.
pub struct Builder<'a> {
    space: &'a AddressSpace,
    timeline: Timeline,
    /// The block of each distinct run, by its first address and instruction count, with the
    /// block's length: a run then costs one lookup, not a second one in the blocks' bounds.
    seen: FxHashMap<(u64, u64), (u32, u32)>,
    /// A block's addresses while it is decoded.
    scratch: Vec<u64>,
    /// Told the instructions so far every [`PROGRESS_EVERY`] of them.
    progress: Option<&'a mut (dyn FnMut(u64) + Send)>,
    /// When to tell it next.
    next_progress: u64,
}

/// Instructions between progress reports (a few milliseconds of decoding).
const PROGRESS_EVERY: u64 = 1 << 22;

impl<'a> Builder<'a> {
    /// An empty timeline whose runs' instructions are in `space`.
    pub fn new(space: &'a AddressSpace) -> Self {
        Self {
            space,
            timeline: Timeline::default(),
            seen: FxHashMap::default(),
            scratch: Vec::new(),
            progress: None,
            next_progress: PROGRESS_EVERY,
        }
    }

    /// Tells `progress` the instructions so far, now and then: building the timeline of
    /// billions takes seconds.
    pub fn with_progress(mut self, progress: &'a mut (dyn FnMut(u64) + Send)) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Makes room for `runs` runs at once, if the memory is there (the runs list of a long
    /// history is tens of megabytes: grown by doubling, each step copies it and touches its
    /// pages afresh). Unused room is given back by [`Self::finish`].
    pub fn reserve(&mut self, runs: usize) {
        self.timeline.runs.reserve(runs);
    }

    /// Makes room for the runs a trace of `bytes` bytes usually holds: branchy code such as
    /// python3's makes 0.6–0.85 runs a byte of trace, so one a byte seldom needs more (a hot
    /// loop makes more runs a byte, and its list grows as it would have).
    pub fn reserve_for_trace(&mut self, bytes: usize) {
        self.reserve(bytes);
    }

    /// The timeline built.
    pub fn finish(mut self) -> Timeline {
        self.timeline.runs.shrink_to_fit();
        self.timeline.events.shrink_to_fit();
        self.timeline
    }

    /// Number of instructions so far.
    pub fn len(&self) -> u64 {
        self.timeline.len
    }

    /// Whether no instruction came yet.
    pub fn is_empty(&self) -> bool {
        self.timeline.len == 0
    }

    /// The events so far.
    pub fn events(&self) -> &[FlowEvent] {
        &self.timeline.events
    }

    /// Runs and events so far.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.timeline.runs.count, self.timeline.events.len())
    }

    /// Decodes a new run: sequential from `first`. A run cut short by an undecodable
    /// instruction ends there (the decoder reported it).
    fn decode(&mut self, first: u64, count: u64) -> (u32, u32) {
        self.fill_scratch(first, count);
        (self.timeline.blocks.add(&self.scratch), self.scratch.len() as u32)
    }

    /// The addresses of `count` instructions one after another from `first` into
    /// `self.scratch` (fewer if one does not decode). Decoded afresh every time, even where
    /// blocks overlap: decoding on with one decoder ([`InsnStream`]) costs less than looking
    /// each successor up in a map of every instruction seen, a chain of dependent cache
    /// misses once the map outgrows the cache.
    fn fill_scratch(&mut self, first: u64, count: u64) {
        self.scratch.clear();
        let mut ip = first;
        let mut insns = InsnStream::new(self.space);
        for _ in 0..count {
            self.scratch.push(ip);
            ip = match insns.next_ip(ip) {
                Ok(n) => n,
                Err(_) => break,
            };
        }
    }

    /// The addresses of the run of `count` instructions from `first`.
    pub(super) fn walk_ips(&mut self, first: u64, count: u64) -> Vec<u64> {
        self.fill_scratch(first, count);
        self.scratch.clone()
    }

    /// Appends a run of these addresses (decoded elsewhere): its block found again by its
    /// first address and length, or added.
    pub(super) fn push_ips(&mut self, ips: &[u64]) {
        if !ips.is_empty() {
            let block = self.intern(ips);
            self.push_block(block);
        }
    }

    /// The block of these addresses (not empty): found by its first address and length, or
    /// added.
    pub(super) fn intern(&mut self, ips: &[u64]) -> u32 {
        let key = (ips[0], ips.len() as u64);
        match self.seen.get(&key) {
            Some(&(b, _)) => b,
            None => {
                let b = self.timeline.blocks.add(ips);
                self.seen.insert(key, (b, ips.len() as u32));
                b
            }
        }
    }

    pub(super) fn push_block(&mut self, block: u32) {
        let len = self.timeline.blocks.len(block);
        self.push_sized(block, len);
    }

    /// Appends a run of `block`, which holds `len` instructions.
    #[inline]
    pub(super) fn push_sized(&mut self, block: u32, len: u32) {
        self.timeline.push_run(block, len);
        if self.timeline.len >= self.next_progress {
            self.next_progress = self.timeline.len + PROGRESS_EVERY;
            if let Some(p) = &mut self.progress {
                p(self.timeline.len);
            }
        }
    }
}

impl FlowSink for Builder<'_> {
    fn run(&mut self, ip: u64, count: u64) {
        if count == 0 {
            return;
        }
        let (block, len) = match self.seen.get(&(ip, count)) {
            Some(&b) => b,
            None => {
                let b = self.decode(ip, count);
                self.seen.insert((ip, count), b);
                b
            }
        };
        self.push_sized(block, len);
    }

    fn event(&mut self, event: FlowEvent) {
        self.timeline.events.push(event);
    }
}

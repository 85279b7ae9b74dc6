//! A replay session over a recording: the history as positions, a current position, and the
//! moves reverse debugging needs (step, continue to the next or previous breakpoint hit).
//!
//! Position `i` is the state before instruction `i` of the history executes. For a program that
//! exited, the last position is its last instruction (the exit system call, about to run); for
//! one killed by a fault there is one more position, at the faulting instruction, which never
//! retired.
//!
//! Values are shown only where they are right: `rip` always; the other registers and memory as
//! the state layer ([`crate::state`]) knows them. Everything else is unknown: unknown is
//! acceptable, wrong is not.

mod anchor_states;
mod background;
mod catch;
mod code_list;
mod early_end;
mod history;
mod moves;
mod open;
mod prefix;
mod stop;
mod watching;
mod window;
mod windows;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::flow::FlowEvent;
use crate::image::AddressSpace;
use crate::recording::{Recording, RecordingError};
use crate::state::{self, Known, Reg, Values, Why};
use crate::timeline::cache::{CacheError, Origin, Policy};
use crate::timeline::{self as tl, Timeline};
use background::Background;
pub use background::OnDone;
pub use catch::Catch;
pub use history::History;
use history::{errors, spins, NO_TIMELINE};
use open::{Decoded, Work};
pub use stop::Stop;

/// Registers by name at one position.
pub type Registers = BTreeMap<String, u64>;

/// A replay session.
pub struct Session {
    recording: Recording,
    space: AddressSpace,
    /// The history and the state layer over it, or the thread decoding them.
    history: Background,
    /// What is known at position 0 while the history is decoded.
    at_start: Option<Known>,
    /// Where the history starts, known before it is decoded (`None`: only the decode knows).
    first_ip: Option<u64>,
    /// The end of a run a fault ended, known before the history is ([`early_end`]).
    early_end: Option<early_end::EarlyEnd>,
    /// The history's beginning while the whole is decoded ([`prefix`]).
    prefix: Option<prefix::Prefix>,
    /// Stretches of the history decoded alone while the whole is decoded ([`windows`]).
    windows: Vec<window::Window>,
    /// What decoding them needs, for a recording that has sync points and anchors.
    window_source: Option<window::Source>,
    /// A window found to differ from the whole history, once that is decoded.
    window_failure: Option<RecordingError>,
    /// Positions of the windows decoded so far (a search decodes some before it waits for
    /// the whole).
    windows_built: u64,
    /// The code each stretch ran, if the recording lists it ([`code_list`]).
    code: Option<std::sync::Arc<crate::recording::code_ran::CodeRan>>,
    position: u64,
    /// The state at the position asked last (gdb asks many questions at one stop), and the
    /// state layer's generation it was computed at.
    known: Option<(u64, u64, Known)>,
    /// How long a question may wait for values due soon (applied once the state layer runs).
    patience: Option<Duration>,
}

impl Session {
    /// Decodes a recording and starts at position 0. An incomplete recording (a trace cut
    /// short, fewer instructions than the manifest counts) is refused.
    pub fn open(recording: Recording) -> Result<Self, RecordingError> {
        Self::open_with(recording, false)
    }

    /// [`Self::open`]; with `partial`, an incomplete recording is opened with what it holds
    /// and [`Self::incomplete`] says what is missing. Its end snapshot and faulting
    /// instruction are left out: the history does not reach them.
    pub fn open_with(recording: Recording, partial: bool) -> Result<Self, RecordingError> {
        Self::open_reporting(recording, partial, &mut |_| {})
    }

    /// [`Self::open_with`], telling `progress` the instructions decoded so far now and then
    /// (out of the manifest's count).
    pub fn open_reporting(
        recording: Recording,
        partial: bool,
        progress: &mut (dyn FnMut(u64) + Send),
    ) -> Result<Self, RecordingError> {
        Self::open_cached(recording, partial, Policy::Auto, progress)
    }

    /// [`Self::open_reporting`], reading and storing the timeline next to the recording as
    /// `policy` says ([`crate::timeline::cache`]).
    pub fn open_cached(
        recording: Recording,
        partial: bool,
        policy: Policy,
        progress: &mut (dyn FnMut(u64) + Send),
    ) -> Result<Self, RecordingError> {
        let (work, _, _) = Self::work(recording, partial, policy)?;
        let recording = work.recording.clone();
        let space = work.space.clone();
        let dir = recording.dir.display().to_string();
        let code = work.code.clone().filter(|_| !partial);
        let decoded = open::decode(work, progress)?;
        let mut session = Self::new(recording, space, Background::done(Ok(decoded), dir), None, None);
        session.code = code;
        Ok(session)
    }

    /// [`Self::open_cached`] without waiting for the history: the session answers at
    /// position 0 from the start snapshot at once, while a thread of its own decodes the
    /// trace; anything that needs the history (a move, its length) waits for it. What the
    /// recording's files hold is checked before this returns; an incomplete history shows
    /// only once decoded, and `on_done` is told either way (on the decoding thread). After a
    /// failure the session has no positions and moves stop with [`Stop::NoHistory`].
    pub fn open_background(
        recording: Recording,
        partial: bool,
        policy: Policy,
        progress: Box<dyn FnMut(u64) + Send>,
        on_done: OnDone,
    ) -> Result<Self, RecordingError> {
        let (work, at_start, early_end) = Self::work(recording, partial, policy)?;
        let first_ip = tl::first_ip(
            &work
                .recording
                .decode_input(&work.trace, &work.space, &work.recording.gaps()),
        );
        let recording = work.recording.clone();
        let space = work.space.clone();
        let code = work.code.clone().filter(|_| !partial);
        let source = window::Source::new(&work.recording, &work.space, &work.trace, &work.prepared, partial);
        let history = Background::spawn(work, source.clone(), progress, on_done);
        let mut session = Self::new(recording, space, history, first_ip.map(|_| at_start), first_ip);
        session.early_end = early_end;
        session.code = code;
        session.window_source = source;
        Ok(session)
    }

    /// Everything read from the recording's files before decoding, checked, and what is
    /// known at position 0 and at the end from it.
    fn work(
        recording: Recording,
        partial: bool,
        policy: Policy,
    ) -> Result<(Work, Known, Option<early_end::EarlyEnd>), RecordingError> {
        let space = recording.address_space()?;
        let trace = recording.trace()?;
        // A trace shorter than the recorder wrote is refused before anything is decoded.
        if !partial {
            recording.check_length(trace.len())?;
        }
        let prepared = open::prepare(&recording, &space)?;
        let at_start = prepared.known_at_start(&space);
        let code = recording.code_ran()?.map(std::sync::Arc::new);
        let early_end = early_end::EarlyEnd::new(&recording, &prepared, &space, code.as_deref(), partial);
        let work = Work {
            pause: None,
            decode_pause: Default::default(),
            code,
            recording,
            space,
            trace: std::sync::Arc::new(trace),
            prepared: std::sync::Arc::new(prepared),
            partial,
            policy,
        };
        Ok((work, at_start, early_end))
    }

    fn new(
        recording: Recording,
        space: AddressSpace,
        history: Background,
        at_start: Option<Known>,
        first_ip: Option<u64>,
    ) -> Self {
        Self {
            recording,
            space,
            history,
            at_start,
            first_ip,
            early_end: None,
            prefix: None,
            windows: Vec::new(),
            window_source: None,
            window_failure: None,
            windows_built: 0,
            code: None,
            position: 0,
            known: None,
            patience: None,
        }
    }

    /// The history, waiting for it; `None` if decoding it failed.
    fn decoded(&self) -> Option<&Decoded> {
        self.history.get().ok()
    }

    /// [`Self::decoded`], mutably; applies what was set while it was decoded.
    fn decoded_mut(&mut self) -> Option<&mut Decoded> {
        let patience = self.patience.take();
        let d = self.history.get_mut().ok()?;
        if let Some(p) = patience {
            d.values.set_patience(p);
        }
        Some(d)
    }

    /// Whether the history is decoded (or failed to be) by now.
    pub fn ready(&self) -> bool {
        self.history.now().is_some()
    }

    /// Waits up to `timeout` for the history; whether it is there (or failed).
    pub fn wait_ready(&self, timeout: Duration) -> bool {
        self.history.wait_for(timeout).is_some()
    }

    /// Why there is no history, if decoding it failed (waiting for the decode to end).
    pub fn failure(&self) -> Option<&RecordingError> {
        self.window_failure.as_ref().or_else(|| self.history.get().err())
    }

    /// Where the timeline came from (waiting for the decode; `None` if it failed).
    pub fn origin(&self) -> Option<&Origin> {
        self.decoded().map(|d| &d.origin)
    }

    /// Whether the timeline is being stored next to the recording.
    pub fn storing(&self) -> bool {
        self.decoded().is_some_and(|d| d.storing.is_some())
    }

    /// Waits for the timeline being stored next to the recording, if it is: where it was
    /// stored, or why not. `None` if nothing is being stored.
    pub fn stored(&mut self) -> Option<Result<std::path::PathBuf, CacheError>> {
        let handle = self.decoded_mut()?.storing.take()?;
        Some(
            handle
                .join()
                .unwrap_or_else(|_| Err(CacheError::Io(std::io::Error::other("the storing thread panicked")))),
        )
    }

    /// What an incomplete recording opened with `partial` is missing.
    pub fn incomplete(&self) -> Option<&RecordingError> {
        self.decoded()?.incomplete.as_ref()
    }

    /// The recording.
    pub fn recording(&self) -> &Recording {
        &self.recording
    }

    /// The address space of its images.
    pub fn space(&self) -> &AddressSpace {
        &self.space
    }

    /// Number of positions (0 if decoding the history failed).
    pub fn len(&self) -> u64 {
        self.timeline().len()
    }

    /// Whether the history is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The last position.
    pub fn last(&self) -> u64 {
        self.len().saturating_sub(1)
    }

    /// The current position.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Moves to a position (clamped to the history). Position 0 needs no history.
    pub fn set_position(&mut self, position: u64) {
        self.position = match position {
            0 => 0,
            p => p.min(self.last()),
        };
    }

    /// The history's positions and their instructions (none if decoding it failed).
    pub fn timeline(&self) -> &Timeline {
        self.decoded().map_or(&NO_TIMELINE, |d| &d.timeline)
    }

    /// The address of the instruction at a position.
    pub fn ip_at(&self, position: u64) -> Option<u64> {
        if position == 0 && self.first_ip.is_some() && !self.ready() {
            return self.first_ip;
        }
        if let Some(ip) = (self.ip_early(position))
            .or_else(|| self.ip_from_prefix(position))
            .or_else(|| self.ip_from_window(position))
        {
            return Some(ip);
        }
        self.timeline().ip_at(position)
    }

    /// The current program counter.
    pub fn pc(&self) -> u64 {
        self.ip_at(self.position).unwrap_or(0)
    }

    /// Errors the decoder reported while reconstructing the history.
    pub fn errors(&self) -> impl Iterator<Item = &FlowEvent> {
        errors(self.timeline())
    }

    /// Where the program spun in a loop the trace cannot count (a hang): the history shows
    /// one pass of it; each event says how many instructions ran there beyond it, if known.
    pub fn spins(&self) -> impl Iterator<Item = &FlowEvent> {
        spins(self.timeline())
    }

    /// How many positions retired (none if decoding the history failed).
    fn retired(&self) -> u64 {
        self.decoded().map_or(0, |d| d.retired)
    }

    /// Waits until the state layer's answers are final everywhere (see [`Values::prepare`]):
    /// on a long history they are worked out in the background, and until then some values
    /// that will be known are shown as unknown. `progress(done, total)` counts positions.
    pub fn prepare(&mut self, progress: impl FnMut(u64, u64)) {
        if let Some(d) = self.decoded_mut() {
            d.values.prepare(progress);
        }
    }

    /// Works out the values at the current position so that what is read there next is
    /// final, waiting as long as that takes unless `interrupted` (polled every few
    /// milliseconds) says to stop; whether they are final. A stop calls it before it is
    /// reported (see [`Values::settle`]). Position 0 before the history is decoded is the
    /// start snapshot's, final at once.
    pub fn settle(&mut self, interrupted: &mut dyn FnMut() -> bool) -> bool {
        let p = self.position;
        if (p == 0 && !self.ready()) || self.known_early().is_some() {
            return true;
        }
        if let Some(settled) = self.settle_prefix(interrupted) {
            return settled;
        }
        if let Some(settled) = self.settle_window(interrupted) {
            return settled;
        }
        let Some(d) = self.decoded_mut() else {
            return true;
        };
        d.values.settle(p, interrupted)
    }

    /// Waits at most `timeout` for the state layer's answers to be final everywhere (see
    /// [`Self::prepare`]); whether they are (true without a history: nothing is to come).
    pub fn wait_values(&mut self, timeout: Duration) -> bool {
        self.decoded_mut().map_or(true, |d| d.values.wait_complete(timeout))
    }

    /// How long a question about values may wait for the state layer's background work
    /// rather than answer from less (see [`Values::set_patience`]).
    pub fn set_patience(&mut self, patience: Duration) {
        match self.history.now() {
            Some(_) => {
                if let Ok(d) = self.history.get_mut() {
                    d.values.set_patience(patience);
                }
            }
            None => self.patience = Some(patience),
        }
    }

    /// How many exact states the values come from (the start, the anchors, the end), for a
    /// recording with anchors; `None` without (the chains), or before the history is there.
    pub fn exact_states(&self) -> Option<usize> {
        let d = self.history.now()?.ok()?;
        d.values.anchored().then(|| d.values.exact_positions().len())
    }

    /// How the state layer did so far.
    pub fn values_stats(&self) -> state::ValuesStats {
        self.decoded().map(|d| d.values.stats()).unwrap_or_default()
    }

    /// Positions the state layer's background passes walked so far, and in all: what
    /// [`Self::values_stats`] says, without counting the memory held.
    pub fn values_walked(&self) -> (u64, u64) {
        self.decoded().map(|d| d.values.walked()).unwrap_or_default()
    }

    /// The index of written addresses the watchpoints use: its bytes, and the stretches it
    /// covers of how many (`None` without anchors, or before the history is there).
    pub fn write_index_size(&self) -> Option<(usize, usize, usize)> {
        self.decoded()?.values.write_index_size()
    }

    /// The state layer (`None` if decoding the history failed).
    pub fn values(&mut self) -> Option<&mut Values> {
        self.decoded_mut().map(|d| &mut d.values)
    }

    /// Both passes' states at the current position (computed once per position); at
    /// position 0 while the history is decoded, what the start snapshot says.
    fn known(&mut self) -> Option<&Known> {
        let p = self.position;
        if p == 0 && self.at_start.is_some() && !self.ready() {
            return self.at_start.as_ref();
        }
        if self.known_early().is_some() {
            return self.known_early();
        }
        if self.known_from_prefix().is_some() {
            return self.known_from_prefix();
        }
        if self.known_from_window().is_some() {
            return self.known_from_window();
        }
        self.at_start = None;
        self.decoded_mut()?;
        let values = &mut self.history.get_mut().ok()?.values;
        values.poll();
        let g = values.generation();
        if self.known.as_ref().map(|(q, h, _)| (*q, *h)) != Some((p, g)) {
            // `at` takes what the chains delivered first: the answer is that generation's.
            let known = values.at(p);
            let g = values.generation();
            self.known = known.map(|k| (p, g, k));
        }
        self.known.as_ref().map(|(_, _, k)| k)
    }

    /// A register's value at the current position, if known (`rip` always is; `eflags` and
    /// the names of [`Reg`] otherwise).
    pub fn register(&mut self, name: &str) -> Option<u64> {
        if name == "rip" {
            return Some(self.pc());
        }
        let known = self.known()?;
        let value = match name {
            "eflags" => known.eflags(),
            name => known.register(Reg::from_name(name)?),
        };
        value.unwrap_or_else(|_| {
            self.note_conflicts();
            None
        })
    }

    /// Vector register `name` (xmm0–31, ymm0–31, zmm0–31) at the current position: its bytes
    /// in memory order if all are known, else `Some(None)`; `None` for a name that is not a
    /// vector register.
    pub fn vector_by_name(&mut self, name: &str) -> Option<Option<Vec<u8>>> {
        let (i, len) = vector_name(name)?;
        Some(self.vector_register(i)[..len].iter().copied().collect())
    }

    /// Vector register `i` (0–31) at the current position, byte by byte (zmm's 64 bytes, the
    /// low 32 being ymm and the low 16 xmm); a byte the passes disagree on is unknown and
    /// counted as a conflict.
    pub fn vector_register(&mut self, i: usize) -> [Option<u8>; 64] {
        let Some(known) = self.known() else {
            return [None; 64];
        };
        known.vector(i).unwrap_or_else(|_| {
            self.note_conflicts();
            [None; 64]
        })
    }

    /// Opmask register `i` (0–7) at the current position, if every bit is known.
    pub fn opmask(&mut self, i: usize) -> Option<u64> {
        let known = self.known()?;
        known.opmask(i).unwrap_or_else(|_| {
            self.note_conflicts();
            None
        })
    }

    /// MXCSR at the current position, if every bit is known.
    pub fn mxcsr(&mut self) -> Option<u32> {
        let known = self.known()?;
        known.mxcsr().unwrap_or_else(|_| {
            self.note_conflicts();
            None
        })
    }

    /// Why a register is unknown at the current position to the forward and the backward
    /// pass (`None` for a pass that knows it); `None` for a name that is not tracked.
    pub fn why_register(&mut self, name: &str) -> Option<(Option<Why>, Option<Why>)> {
        if let Some((i, len)) = vector_name(name) {
            return Some(self.known()?.why_vector(i, len));
        }
        let r = Reg::from_name(name)?;
        Some(self.known()?.why_register(r))
    }

    /// Why the byte at `addr` is unknown at the current position to each pass.
    pub fn why_memory(&mut self, addr: u64) -> Option<(Option<Why>, Option<Why>)> {
        Some(self.known()?.why_memory(addr))
    }

    /// The known bytes at `addr` at the current position, up to the first unknown one and at
    /// most `max_len`: a debugger's memory read. Read-only image bytes are known without
    /// asking the state layer (reading code costs nothing at any position).
    pub fn read_memory_prefix(&mut self, addr: u64, max_len: usize) -> Vec<u8> {
        if let Some(bytes) = self.space.read_only_bytes_at(addr) {
            if bytes.len() >= max_len {
                return bytes[..max_len].to_vec();
            }
        }
        let Some(known) = self.known() else {
            return Vec::new();
        };
        let prefix = known.memory_prefix(addr, max_len);
        if prefix.conflict {
            self.note_conflicts();
        }
        prefix.bytes
    }

    /// `len` bytes at `addr` at the current position, if all of them are known.
    pub fn read_memory(&mut self, addr: u64, len: usize) -> Option<Vec<u8>> {
        if let Some(bytes) = self.space.read_only_bytes_at(addr) {
            if bytes.len() >= len {
                return Some(bytes[..len].to_vec());
            }
        }
        self.known()?.memory(addr, len).unwrap_or_else(|_| {
            self.note_conflicts();
            None
        })
    }

    /// Counts a conflict a caller of [`Known`] saw.
    fn note_conflicts(&mut self) {
        if let Some(d) = self.decoded_mut() {
            d.values.note_conflicts(1);
        }
    }
}

/// Which vector register a name is, and how many of its bytes it means: xmmN 16, ymmN 32,
/// zmmN 64 (N 0–31).
fn vector_name(name: &str) -> Option<(usize, usize)> {
    let (len, n) = [("xmm", 16), ("ymm", 32), ("zmm", 64)]
        .iter()
        .find_map(|&(prefix, len)| name.strip_prefix(prefix).map(|n| (len, n)))?;
    let i: usize = n.parse().ok().filter(|&i| i < 32 && !n.starts_with('+'))?;
    Some((i, len))
}

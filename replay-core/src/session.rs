//! A replay session over a recording: the history as positions, a current position, and the
//! moves reverse debugging needs (step, continue to the next or previous breakpoint hit).
//!
//! Position `i` is the state before instruction `i` of the history executes. For a program that
//! exited, the last position is its last instruction (the exit system call, about to run); for
//! one killed by a fault there is one more position, at the faulting instruction, which never
//! retired.
//!
//! Values are shown only where they are right: `rip` always; the other registers and memory as
//! the state layer ([`crate::state`]) knows them. Everything else is unknown (DESIGN.md:
//! unknown is acceptable, wrong is not).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::flow::{EventKind, FlowEvent};
use crate::image::AddressSpace;
use crate::recording::{EndState, Recording, RecordingError};
use crate::state::{self, Known, Reg, State, Values, Why};
use crate::timeline::cache::{self, CacheError, Origin, Policy};
use crate::timeline::{parallel, Hit, Timeline};

/// Why a move stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// One step done.
    Step,
    /// A breakpoint address is about to execute.
    Breakpoint,
    /// At the first position, going backwards.
    Begin,
    /// At the last position of a program that exited, going forwards.
    End,
    /// At the faulting instruction of a program a signal killed.
    Signal(i32),
    /// Interrupted (Ctrl-C) before reaching anything.
    Interrupted,
}

/// Registers by name at one position.
pub type Registers = BTreeMap<String, u64>;

/// A replay session.
pub struct Session {
    recording: Recording,
    space: AddressSpace,
    /// The instruction at each position: those that retired, then the faulting one if a
    /// fault ended the run. Shared with the state layer.
    timeline: Arc<Timeline>,
    /// How many of the positions retired.
    retired: u64,
    /// The instruction that faulted and the signal, for a run a fault ended.
    fault: Option<(u64, i32)>,
    position: u64,
    values: Values,
    /// The state at the position asked last (gdb asks many questions at one stop), and the
    /// state layer's generation it was computed at.
    known: Option<(u64, u64, Known)>,
    /// Why the recording is incomplete, when opened with `partial`.
    incomplete: Option<RecordingError>,
    /// Where the timeline came from: decoded, or read back from the recording's directory.
    origin: Origin,
    /// The timeline being stored next to the recording, if it is.
    storing: Option<std::thread::JoinHandle<Result<std::path::PathBuf, CacheError>>>,
}

/// A state with a snapshot's registers and memory.
fn snapshot_state(registers: &BTreeMap<String, String>, files: &[(u64, &[u8])], memory: &[(u64, Vec<u8>)]) -> State {
    let mut st = State::unknown();
    state::set_named(&mut st, registers);
    // The files' bytes first: the snapshot holds what the program changed (RELRO).
    for (start, bytes) in files {
        st.mem.write(*start, bytes);
    }
    for (start, bytes) in memory {
        st.mem.write(*start, bytes);
    }
    st
}

/// The state layer's inputs from a recording and its decoded history (every position, the
/// faulting instruction last when `fault`). The end snapshot is used only when the
/// history is `complete`: one cut short does not reach the state the snapshot describes.
fn values_inputs(
    recording: &Recording,
    space: &AddressSpace,
    history: Arc<Timeline>,
    fault: bool,
    complete: bool,
) -> Result<state::Inputs, RecordingError> {
    let retired = history.len() - u64::from(fault);
    let events = history.events();
    let hard = events
        .iter()
        .filter(|e| !matches!(e.kind, EventKind::Enabled { .. } | EventKind::Disabled { .. }))
        // A fault ends the history: its event only says the last instruction did not run.
        .filter(|e| !(fault && e.position == retired))
        .map(|e| e.position)
        .collect();
    let soft = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Enabled { .. } | EventKind::Disabled { .. }))
        // Nor does tracing's stop for it (the qemu backend's TIP.PGD at the faulting
        // instruction): nothing ran between the last retired instruction and the fault.
        .filter(|e| !(fault && e.position == retired))
        .map(|e| e.position)
        .collect();
    let maps = recording.maps()?;
    // Read-only file mappings present at the start hold their file's bytes (the snapshot
    // holds the writable ones), beyond what the images' segments say.
    let files: Vec<(u64, &[u8])> = maps
        .initial
        .iter()
        .filter(|m| !m.perms.contains('w') && m.perms.ends_with('p'))
        .filter_map(|m| {
            let bytes = space.file_mapping_bytes(m.path.as_deref()?, m.end - m.start, m.offset)?;
            Some((m.start, bytes))
        })
        .collect();
    let map_changes = maps
        .changes
        .iter()
        .map(|c| (c.position, state::maps::effect(c)))
        .collect();
    let m = &recording.manifest;
    let start_memory = recording.snapshot(false)?;
    let ended = complete && matches!(m.end, EndState::Exited { .. } | EndState::Signaled { .. });
    let end = match ended {
        true => {
            let end = State {
                cpu: cpu(&m.cpu),
                ..snapshot_state(&m.registers_end, &[], &recording.snapshot(true)?)
            };
            Some(end)
        }
        false => None,
    };
    Ok(state::Inputs {
        hard_barriers: hard,
        soft_barriers: soft,
        map_changes,
        syscalls: recording.syscalls()?,
        results: recording.results()?,
        signals: recording.signals()?,
        cpuid: recording.cpuid()?,
        start: State {
            cpu: cpu(&m.cpu),
            ..snapshot_state(&m.registers_start, &files, &start_memory)
        },
        end,
        fault,
        history,
    })
}

/// The CPU behaviours the state layer needs, from the manifest.
fn cpu(c: &crate::recording::CpuInfo) -> state::Cpu {
    state::Cpu {
        xcr0: c.xcr0,
        syscall_keeps_registers: c.syscall_keeps_registers,
        lzcnt: c.lzcnt,
        bmi1: c.bmi1,
        logic_clears_af: c.logic_clears_af,
        xsave_all_in_use: c.xsave_all_in_use,
    }
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
    /// `policy` says ([`cache`]).
    pub fn open_cached(
        recording: Recording,
        partial: bool,
        policy: Policy,
        progress: &mut (dyn FnMut(u64) + Send),
    ) -> Result<Self, RecordingError> {
        let space = recording.address_space()?;
        let trace = recording.trace()?;
        let gaps = recording.gaps();
        let input = recording.decode_input(&trace, &space, &gaps);
        let (mut timeline, origin, pending) = cache::obtain(&recording.dir, &trace, policy, || {
            parallel::build(&input, parallel::Split::all_cores(), progress).timeline
        });
        let ran = timeline.len() + timeline.events().iter().map(FlowEvent::unshown).sum::<u64>();
        let spun = timeline.events().iter().any(FlowEvent::unshown_unknown);
        let incomplete = match recording.check_complete(trace.len(), ran, spun) {
            Ok(()) => None,
            Err(e) if partial => Some(e),
            Err(e) => return Err(e),
        };
        let retired = timeline.len();
        let m = &recording.manifest;
        // The faulting instruction follows the last retired one only if nothing is missing.
        let fault = match &m.end {
            EndState::Signaled {
                signal, ip: Some(ip), ..
            } if incomplete.is_none() => u64::from_str_radix(ip.trim_start_matches("0x"), 16)
                .ok()
                .map(|ip| (ip, *signal)),
            _ => None,
        };
        if let Some((ip, _)) = fault {
            timeline.push_ip(ip);
        }
        let timeline = Arc::new(timeline);
        let storing = pending.store(timeline.clone());
        let complete = incomplete.is_none();
        let inputs = values_inputs(&recording, &space, timeline.clone(), fault.is_some(), complete)?;
        Ok(Self {
            values: Values::new(space.clone(), inputs),
            known: None,
            recording,
            space,
            timeline,
            retired,
            fault,
            position: 0,
            incomplete,
            origin,
            storing,
        })
    }

    /// Where the timeline came from.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// Whether the timeline is being stored next to the recording.
    pub fn storing(&self) -> bool {
        self.storing.is_some()
    }

    /// Waits for the timeline being stored next to the recording, if it is: where it was
    /// stored, or why not. `None` if nothing is being stored.
    pub fn stored(&mut self) -> Option<Result<std::path::PathBuf, CacheError>> {
        let handle = self.storing.take()?;
        Some(
            handle
                .join()
                .unwrap_or_else(|_| Err(CacheError::Io(std::io::Error::other("the storing thread panicked")))),
        )
    }

    /// What an incomplete recording opened with `partial` is missing.
    pub fn incomplete(&self) -> Option<&RecordingError> {
        self.incomplete.as_ref()
    }

    /// The recording.
    pub fn recording(&self) -> &Recording {
        &self.recording
    }

    /// The address space of its images.
    pub fn space(&self) -> &AddressSpace {
        &self.space
    }

    /// Number of positions.
    pub fn len(&self) -> u64 {
        self.timeline.len()
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

    /// Moves to a position (clamped to the history).
    pub fn set_position(&mut self, position: u64) {
        self.position = position.min(self.last());
    }

    /// The history's positions and their instructions.
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// The address of the instruction at a position.
    pub fn ip_at(&self, position: u64) -> Option<u64> {
        self.timeline.ip_at(position)
    }

    /// The current program counter.
    pub fn pc(&self) -> u64 {
        self.ip_at(self.position).unwrap_or(0)
    }

    /// Errors the decoder reported while reconstructing the history.
    pub fn errors(&self) -> impl Iterator<Item = &FlowEvent> {
        self.timeline
            .events()
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Error { .. }))
    }

    /// Where the program spun in a loop the trace cannot count (a hang): the history shows
    /// one pass of it; each event says how many instructions ran there beyond it, if known.
    pub fn spins(&self) -> impl Iterator<Item = &FlowEvent> {
        self.timeline
            .events()
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Spins { .. }))
    }

    /// How arriving at `position` going forwards is reported.
    fn arrived(&self, position: u64) -> Option<Stop> {
        match self.fault {
            Some((_, signal)) if position == self.retired => Some(Stop::Signal(signal)),
            _ => None,
        }
    }

    /// One instruction forwards.
    pub fn step_forward(&mut self) -> Stop {
        if self.position >= self.last() {
            return self.arrived(self.position).unwrap_or(Stop::End);
        }
        self.position += 1;
        self.arrived(self.position).unwrap_or(Stop::Step)
    }

    /// One instruction backwards.
    pub fn step_backward(&mut self) -> Stop {
        if self.position == 0 {
            return Stop::Begin;
        }
        self.position -= 1;
        Stop::Step
    }

    /// Forwards to the next position whose instruction is a breakpoint, or to the end.
    /// `interrupted` is polled now and then.
    pub fn continue_forward(&mut self, breakpoints: &HashSet<u64>, interrupted: impl FnMut() -> bool) -> Stop {
        match self
            .timeline
            .next_hit(self.position + 1, self.retired, breakpoints, interrupted)
        {
            Hit::At(p) => {
                self.position = p;
                Stop::Breakpoint
            }
            Hit::Interrupted(p) => {
                self.position = p.min(self.last());
                Stop::Interrupted
            }
            Hit::None => {
                self.position = self.last();
                self.arrived(self.position).unwrap_or(Stop::End)
            }
        }
    }

    /// Backwards to the previous position whose instruction is a breakpoint, or to position 0.
    pub fn continue_backward(&mut self, breakpoints: &HashSet<u64>, interrupted: impl FnMut() -> bool) -> Stop {
        let from = self.position.min(self.retired);
        match self.timeline.previous_hit(from, 0, breakpoints, interrupted) {
            Hit::At(p) => {
                self.position = p;
                Stop::Breakpoint
            }
            Hit::Interrupted(p) => {
                self.position = p;
                Stop::Interrupted
            }
            Hit::None => {
                self.position = 0;
                Stop::Begin
            }
        }
    }

    /// Waits until the state layer's answers are final everywhere (see [`Values::prepare`]):
    /// on a long history they are worked out in the background, and until then some values
    /// that will be known are shown as unknown. `progress(done, total)` counts positions.
    pub fn prepare(&mut self, progress: impl FnMut(u64, u64)) {
        self.values.prepare(progress);
    }

    /// How long a question about values may wait for the state layer's background work
    /// rather than answer from less (see [`Values::set_patience`]).
    pub fn set_patience(&mut self, patience: std::time::Duration) {
        self.values.set_patience(patience);
    }

    /// How the state layer did so far.
    pub fn values_stats(&self) -> state::ValuesStats {
        self.values.stats()
    }

    /// The state layer.
    pub fn values(&mut self) -> &mut Values {
        &mut self.values
    }

    /// Both passes' states at the current position (computed once per position).
    fn known(&mut self) -> Option<&Known> {
        let p = self.position;
        let g = self.values.generation();
        if self.known.as_ref().map(|(q, h, _)| (*q, *h)) != Some((p, g)) {
            // `at` takes what the chains delivered first: the answer is that generation's.
            let known = self.values.at(p);
            let g = self.values.generation();
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
            self.values.note_conflicts(1);
            None
        })
    }

    /// Vector register `i` (0–31) at the current position, byte by byte (zmm's 64 bytes, the
    /// low 32 being ymm and the low 16 xmm); a byte the passes disagree on is unknown and
    /// counted as a conflict.
    pub fn vector_register(&mut self, i: usize) -> [Option<u8>; 64] {
        let Some(known) = self.known() else {
            return [None; 64];
        };
        known.vector(i).unwrap_or_else(|_| {
            self.values.note_conflicts(1);
            [None; 64]
        })
    }

    /// Opmask register `i` (0–7) at the current position, if every bit is known.
    pub fn opmask(&mut self, i: usize) -> Option<u64> {
        let known = self.known()?;
        known.opmask(i).unwrap_or_else(|_| {
            self.values.note_conflicts(1);
            None
        })
    }

    /// MXCSR at the current position, if every bit is known.
    pub fn mxcsr(&mut self) -> Option<u32> {
        let known = self.known()?;
        known.mxcsr().unwrap_or_else(|_| {
            self.values.note_conflicts(1);
            None
        })
    }

    /// Why a register is unknown at the current position to the forward and the backward
    /// pass (`None` for a pass that knows it); `None` for a name that is not tracked.
    pub fn why_register(&mut self, name: &str) -> Option<(Option<Why>, Option<Why>)> {
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
            self.values.note_conflicts(1);
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
            self.values.note_conflicts(1);
            None
        })
    }
}

//! A replay session over a recording: the history as positions, a current position, and the
//! moves reverse debugging needs (step, continue to the next or previous breakpoint hit).
//!
//! Position `i` is the state before instruction `i` of the history executes. For a program that
//! exited, the last position is its last instruction (the exit system call, about to run); for
//! one killed by a fault there is one more position, at the faulting instruction, which never
//! retired.
//!
//! Values are shown only where they are right: `rip` always; the other registers at the first
//! position (recorded when tracing started) and at the last (recorded at the end); memory from
//! the read-only parts of the images everywhere, and from the writable-memory snapshots at the
//! first and last positions. Everything else is unknown (DESIGN.md: unknown is acceptable, wrong
//! is not).

use std::collections::{BTreeMap, HashSet};

use crate::flow::{decode_insn, EventKind, FlowDecoder, FlowEvent};
use crate::image::AddressSpace;
use crate::recording::{files, EndState, MemoryRegion, Recording, RecordingError};
use crate::timeline::Timeline;

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

/// Memory regions of a snapshot: (start, bytes).
type Snapshot = Vec<(u64, Vec<u8>)>;

/// A replay session.
pub struct Session {
    recording: Recording,
    space: AddressSpace,
    ips: Vec<u64>,
    /// The instruction that faulted and the signal, for a run a fault ended.
    fault: Option<(u64, i32)>,
    position: u64,
    events: Vec<FlowEvent>,
    start_regs: Registers,
    end_regs: Registers,
    start_memory: Snapshot,
    end_memory: Snapshot,
}

fn parse_regs(map: &BTreeMap<String, String>) -> Registers {
    map.iter()
        .filter_map(|(k, v)| Some((k.clone(), u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()?)))
        .collect()
}

fn load_snapshot(rec: &Recording, file: &str, regions: &[MemoryRegion]) -> Snapshot {
    let Ok(bytes) = std::fs::read(rec.dir.join(file)) else {
        return Vec::new();
    };
    regions
        .iter()
        .filter_map(|r| {
            let len = (r.mapping.end - r.mapping.start) as usize;
            let from = r.file_offset as usize;
            Some((r.mapping.start, bytes.get(from..from + len)?.to_vec()))
        })
        .collect()
}

fn read_snapshot(snapshot: &Snapshot, addr: u64, len: usize) -> Option<Vec<u8>> {
    let (start, bytes) = snapshot.iter().find(|(s, b)| addr >= *s && addr - s < b.len() as u64)?;
    let from = (addr - start) as usize;
    bytes.get(from..from + len).map(<[u8]>::to_vec)
}

impl Session {
    /// Decodes a recording and starts at position 0.
    pub fn open(recording: Recording) -> Result<Self, RecordingError> {
        let space = recording.address_space()?;
        let trace = recording.trace()?;
        let mut timeline = Timeline::new();
        FlowDecoder::new(&trace, recording.flow_config(), &space).decode(&mut timeline);
        // Every position's instruction: each run is sequential from its first address. A
        // run cut short by an undecodable instruction ends there (the decoder reported it).
        let mut ips = Vec::with_capacity(timeline.len() as usize);
        let mut next: rustc_hash::FxHashMap<u64, u64> = Default::default();
        for (_, first, count) in timeline.runs() {
            let mut ip = first;
            for _ in 0..count {
                ips.push(ip);
                let n = match next.get(&ip) {
                    Some(&n) => n,
                    None => match decode_insn(&space, ip) {
                        Ok(insn) => *next.entry(ip).or_insert(insn.next_ip()),
                        Err(_) => break,
                    },
                };
                ip = n;
            }
        }
        let m = &recording.manifest;
        let fault = match &m.end {
            EndState::Signaled {
                signal, ip: Some(ip), ..
            } => u64::from_str_radix(ip.trim_start_matches("0x"), 16)
                .ok()
                .map(|ip| (ip, *signal)),
            _ => None,
        };
        let index = recording.memory_index().unwrap_or_default();
        let start_memory = load_snapshot(&recording, files::MEMORY_START, &index.start);
        let end_memory = load_snapshot(&recording, files::MEMORY_END, &index.end);
        Ok(Self {
            start_regs: parse_regs(&m.registers_start),
            end_regs: parse_regs(&m.registers_end),
            events: timeline.events().to_vec(),
            recording,
            space,
            ips,
            fault,
            position: 0,
            start_memory,
            end_memory,
        })
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
        self.ips.len() as u64 + u64::from(self.fault.is_some())
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

    /// The address of the instruction at a position.
    pub fn ip_at(&self, position: u64) -> Option<u64> {
        match self.ips.get(position as usize) {
            Some(&ip) => Some(ip),
            None if position == self.ips.len() as u64 => self.fault.map(|(ip, _)| ip),
            None => None,
        }
    }

    /// The current program counter.
    pub fn pc(&self) -> u64 {
        self.ip_at(self.position).unwrap_or(0)
    }

    /// Errors the decoder reported while reconstructing the history.
    pub fn errors(&self) -> impl Iterator<Item = &FlowEvent> {
        self.events.iter().filter(|e| matches!(e.kind, EventKind::Error { .. }))
    }

    /// How arriving at `position` going forwards is reported.
    fn arrived(&self, position: u64) -> Option<Stop> {
        match self.fault {
            Some((_, signal)) if position == self.ips.len() as u64 => Some(Stop::Signal(signal)),
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
    pub fn continue_forward(&mut self, breakpoints: &HashSet<u64>, mut interrupted: impl FnMut() -> bool) -> Stop {
        let mut p = self.position + 1;
        while p < self.ips.len() as u64 {
            if breakpoints.contains(&self.ips[p as usize]) {
                self.position = p;
                return Stop::Breakpoint;
            }
            if p % 0x1_0000 == 0 && interrupted() {
                self.position = p;
                return Stop::Interrupted;
            }
            p += 1;
        }
        self.position = self.last();
        self.arrived(self.position).unwrap_or(Stop::End)
    }

    /// Backwards to the previous position whose instruction is a breakpoint, or to position 0.
    pub fn continue_backward(&mut self, breakpoints: &HashSet<u64>, mut interrupted: impl FnMut() -> bool) -> Stop {
        let mut p = self.position.min(self.ips.len() as u64);
        while p > 0 {
            p -= 1;
            if breakpoints.contains(&self.ips[p as usize]) {
                self.position = p;
                return Stop::Breakpoint;
            }
            if p % 0x1_0000 == 0 && interrupted() {
                self.position = p;
                return Stop::Interrupted;
            }
        }
        self.position = 0;
        Stop::Begin
    }

    /// A register's value at the current position, if known (`rip` always is).
    pub fn register(&self, name: &str) -> Option<u64> {
        if name == "rip" {
            return Some(self.pc());
        }
        if self.position == 0 {
            return self.start_regs.get(name).copied();
        }
        // The end registers are those of the last position of a run that exited or faulted.
        let at_end = self.position == self.last()
            && matches!(
                self.recording.manifest.end,
                EndState::Exited { .. } | EndState::Signaled { .. }
            );
        if at_end {
            return self.end_regs.get(name).copied();
        }
        None
    }

    /// `len` bytes at `addr` at the current position, if all of them are known.
    pub fn read_memory(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        if let Some(bytes) = self.space.read_only_bytes_at(addr) {
            if bytes.len() >= len {
                return Some(bytes[..len].to_vec());
            }
        }
        if self.position == 0 {
            if let Some(bytes) = read_snapshot(&self.start_memory, addr, len) {
                return Some(bytes);
            }
        }
        if self.position == self.last() && self.register("rsp").is_some() {
            return read_snapshot(&self.end_memory, addr, len);
        }
        None
    }
}

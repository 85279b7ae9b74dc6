//! What the values engine is built from ([`Inputs`]), and the part of it every walk reads
//! ([`shared`]).

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::maps::MapEffect;
use super::walker::Shared;
use super::State;
use crate::image::AddressSpace;
use crate::recording::cpuid::CpuidLeaf;
use crate::recording::{InsnResult, SignalEntry};
use crate::syscall::SyscallRecord;
use crate::timeline::Timeline;

/// What the engine is built from.
#[derive(Debug, Default)]
pub struct Inputs {
    /// The address at each position (the last may be an instruction that faulted).
    pub history: Arc<Timeline>,
    /// Positions `q` such that something the trace does not show happened between `q - 1`
    /// and `q`: an interrupt, a gap, an error.
    pub hard_barriers: Vec<u64>,
    /// Positions where tracing stopped or resumed: a system call if the instruction before is
    /// one, else untraced code ran.
    pub soft_barriers: Vec<u64>,
    /// Memory-map changes, by the position at which each took effect.
    pub map_changes: Vec<(u64, MapEffect)>,
    /// System call records by position.
    pub syscalls: Vec<SyscallRecord>,
    /// What instructions the trace cannot tell returned (cpuid, rdtsc …), by position.
    pub results: Vec<InsnResult>,
    /// Signal handlers' entries: their registers and frames, by position.
    pub signals: Vec<SignalEntry>,
    /// What CPUID returns on the recording's CPU model (qemu backend), where no result is
    /// logged per execution.
    pub cpuid: Vec<CpuidLeaf>,
    /// The state at position 0.
    pub start: State,
    /// The state at the last position, if the recording has it.
    pub end: Option<State>,
    /// Exact states the recording holds between the start and the end (its anchors), by
    /// position, in order: the values then come from the exact states on either side of a
    /// position ([`super::anchored`]), not from the chains.
    pub anchors: Vec<(u64, State)>,
    /// Whether the last position is an instruction that faulted: the end state's registers
    /// are then those the kernel saved, with RF set by the fault's delivery (SDM vol. 3,
    /// 18.3.1.1), which is what gdb shows natively there.
    pub fault: bool,
}

/// What every walk reads, taken from `inputs` (the start, end and anchor states stay): the
/// history, the barriers in order, and the recording's logs by position (map changes at one
/// position merged into one effect).
pub(super) fn shared(space: AddressSpace, inputs: &mut Inputs) -> Shared {
    let mut hard = std::mem::take(&mut inputs.hard_barriers);
    let mut soft = std::mem::take(&mut inputs.soft_barriers);
    hard.sort_unstable();
    soft.sort_unstable();
    let map_changes =
        std::mem::take(&mut inputs.map_changes)
            .into_iter()
            .fold(FxHashMap::default(), |mut m, (p, e)| {
                let entry: &mut MapEffect = m.entry(p).or_default();
                entry.forget.extend(e.forget);
                entry.zero.extend(e.zero);
                entry.files.extend(e.files);
                if e.readonly.is_some() {
                    entry.readonly = e.readonly;
                }
                m
            });
    let by_position = |v: Vec<SyscallRecord>| v.into_iter().map(|r| (r.position, r)).collect();
    Shared {
        space,
        history: std::mem::take(&mut inputs.history),
        hard,
        soft,
        map_changes,
        syscalls: by_position(std::mem::take(&mut inputs.syscalls)),
        results: std::mem::take(&mut inputs.results)
            .into_iter()
            .map(|r| (r.position, r))
            .collect(),
        resumes: resumes(&inputs.signals),
        signals: std::mem::take(&mut inputs.signals)
            .into_iter()
            .map(|r| (r.position, r))
            .collect(),
        cpuid: std::mem::take(&mut inputs.cpuid),
        fault: inputs.fault,
        special: Vec::new(),
        insns: Vec::new(),
        compiled: Vec::new(),
    }
}

/// For each switch between threads (by its position), the registers the outgoing thread
/// has where it runs next: its next switch's entry in (or its entry where the recording
/// ends). Nothing of that thread ran in between (a system call it left at retires after
/// that entry; the kernel changes no register of a thread that waits), so they are its
/// registers after its last instruction before the switch. (A thread that ended has none.)
fn resumes(signals: &[SignalEntry]) -> FxHashMap<u64, SignalEntry> {
    let mut order: Vec<&SignalEntry> = signals.iter().filter(|e| e.switch.is_some()).collect();
    order.sort_by_key(|e| e.position);
    let mut next_in: FxHashMap<i64, &SignalEntry> = FxHashMap::default();
    let mut out = FxHashMap::default();
    for e in order.into_iter().rev() {
        let Some(s) = e.switch else { continue };
        if s.from != s.to {
            if let Some(resumed) = next_in.get(&s.from) {
                out.insert(e.position, (*resumed).clone());
            }
        }
        next_in.insert(s.to, e);
    }
    out
}

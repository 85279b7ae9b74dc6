//! Opening a recording for a session, in two parts: what the state layer needs from the
//! recording's files, read before anything is served so that a bad file is refused at once
//! ([`prepare`]); and the decode of the trace into the history with the state layer over it
//! ([`decode`]), the long part, which a session may leave to a thread of its own while it
//! answers at position 0 ([`super::Session::open_background`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::flow::{EventKind, FlowEvent};
use crate::image::AddressSpace;
use crate::recording::code_ran::CodeRan;
use crate::recording::{files, EndState, Recording, RecordingError};
use crate::state::vector::named::Named;
use crate::state::{self, State, Values};
use crate::timeline::cache::{self, CacheError, Origin, Policy};
use crate::timeline::{parallel, Timeline};

/// What the state layer needs from the recording's files besides the history.
#[derive(Clone)]
pub(super) struct Prepared {
    pub(super) start: State,
    /// The end snapshot's state, used (and a failure to read it reported) only if the
    /// history turns out complete: an incomplete recording may lack it.
    pub(super) end: Result<Option<State>, RecordingError>,
    pub(super) map_changes: Vec<(u64, state::maps::MapEffect)>,
    pub(super) syscalls: Vec<crate::syscall::SyscallRecord>,
    pub(super) results: Vec<crate::recording::InsnResult>,
    pub(super) signals: Vec<crate::recording::SignalEntry>,
    pub(super) cpuid: Vec<crate::recording::cpuid::CpuidLeaf>,
    /// The recording's anchors (their registers those it can vouch for) and the map they
    /// need, made into states with the history (reading their pages takes a while).
    pub(super) anchors: Option<(crate::recording::anchors::Anchors, crate::recording::Maps)>,
}

impl Prepared {
    /// What the state layer knows at position 0 before the history exists.
    pub(super) fn known_at_start(&self, space: &AddressSpace) -> state::Known {
        Values::known_at_start(space.clone(), &self.start, &self.syscalls)
    }
}

/// The history and the state layer over it.
pub(super) struct Decoded {
    /// The instruction at each position: those that retired, then the faulting one if a
    /// fault ended the run. Shared with the state layer.
    pub(super) timeline: Arc<Timeline>,
    /// How many of the positions retired.
    pub(super) retired: u64,
    /// The instruction that faulted and the signal, for a run a fault ended.
    pub(super) fault: Option<(u64, i32)>,
    pub(super) values: Values,
    /// Why the recording is incomplete, when opened with `partial`.
    pub(super) incomplete: Option<RecordingError>,
    /// Where the timeline came from: decoded, or read back from the recording's directory.
    pub(super) origin: Origin,
    /// The timeline being stored next to the recording, if it is.
    pub(super) storing: Option<std::thread::JoinHandle<Result<std::path::PathBuf, CacheError>>>,
    /// The system calls the recording logged, as (position of the `syscall` instruction,
    /// number), in order: those whose address is the history's there (`catch syscall`).
    pub(super) syscalls: Vec<(u64, u64)>,
    /// The position of a `syscall` instruction that ends the history unlogged: the call that
    /// ended the program (`exit_group`), which never returned to be logged.
    pub(super) final_syscall: Option<u64>,
    /// The positions of signal handlers' first instructions, in order: a call after which a
    /// handler runs returns into it, so its return is no position of the history.
    pub(super) handler_entries: Vec<u64>,
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

/// Reads what the state layer needs from the recording's files.
pub(super) fn prepare(recording: &Recording, space: &AddressSpace) -> Result<Prepared, RecordingError> {
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
    let syscalls = recording.syscalls()?;
    // What no store writes, from the start and after each change; nothing with a call that
    // changes protections without a change logged.
    let (mut readonly_start, mut readonly) = state::readonly::after_each(&maps.initial, &maps.changes);
    if syscalls.iter().any(|r| state::readonly::unlogged(r.nr)) {
        readonly_start = state::readonly::ReadOnly::from([]);
        readonly
            .iter_mut()
            .for_each(|r| *r = state::readonly::ReadOnly::from([]));
    }
    let map_changes = maps
        .changes
        .iter()
        .zip(readonly)
        .map(|(c, r)| {
            let mut e = state::maps::effect(c);
            e.readonly = Some(r);
            (c.position, e)
        })
        .collect();
    let m = &recording.manifest;
    let cpuid = recording.cpuid()?;
    let cpu = cpu(&m.cpu, &cpuid);
    let trusted = |map: &BTreeMap<String, String>| trusted_registers(map, &m.backend, cpu);
    let start_memory = recording.snapshot(false)?;
    let end = match m.end {
        EndState::Exited { .. } | EndState::Signaled { .. } | EndState::Exec { .. } => {
            recording.snapshot(true).map(|memory| {
                Some(State {
                    cpu,
                    ..snapshot_state(&trusted(&m.registers_end), &[], &memory)
                })
            })
        }
        _ => Ok(None),
    };
    let mut signals = recording.signals()?;
    for s in &mut signals {
        s.registers = trusted(&s.registers);
    }
    let mut start = State {
        cpu,
        ..snapshot_state(&trusted(&m.registers_start), &files, &start_memory)
    };
    start.mem.set_readonly(readonly_start);
    let anchors = recording.anchors()?.map(|mut a| {
        a.list.iter_mut().for_each(|a| a.registers = trusted(&a.registers));
        (a, maps.clone())
    });
    Ok(Prepared {
        start,
        end,
        map_changes,
        syscalls,
        results: recording.results()?,
        signals,
        cpuid,
        anchors,
    })
}

/// The state layer's inputs: the files' part and the decoded history (every position, the
/// faulting instruction last when `fault`). The end snapshot is used only when the history
/// is `complete`: one cut short does not reach the state the snapshot describes.
fn inputs(
    prepared: Prepared,
    space: &AddressSpace,
    history: Arc<Timeline>,
    fault: bool,
    complete: bool,
) -> Result<state::Inputs, RecordingError> {
    let (hard, soft) = barriers(&history, fault);
    // Anchors only in a whole history: their positions count every instruction.
    let anchors = match (&prepared.anchors, complete) {
        (Some((anchors, maps)), true) => {
            super::anchor_states::anchor_states(anchors, maps, &prepared.start, &prepared.map_changes, space)?
        }
        _ => Vec::new(),
    };
    Ok(state::Inputs {
        anchors,
        end: match complete {
            true => prepared.end?,
            false => None,
        },
        hard_barriers: hard,
        soft_barriers: soft,
        map_changes: prepared.map_changes,
        syscalls: prepared.syscalls,
        results: prepared.results,
        signals: prepared.signals,
        cpuid: prepared.cpuid,
        start: prepared.start,
        fault,
        history,
    })
}

/// The positions of the history's events that stop the passes (hard: a gap, an error) and
/// those that only stop tracing (soft), leaving out a fault's own at the end of `history`.
pub(super) fn barriers(history: &Timeline, fault: bool) -> (Vec<u64>, Vec<u64>) {
    let retired = history.len() - u64::from(fault);
    let events = history.events();
    let soft_kind = |e: &FlowEvent| matches!(e.kind, EventKind::Enabled { .. } | EventKind::Disabled { .. });
    let hard = events
        .iter()
        .filter(|e| !soft_kind(e))
        // A fault ends the history: its event only says the last instruction did not run.
        .filter(|e| !(fault && e.position == retired))
        .map(|e| e.position)
        .collect();
    let soft = events
        .iter()
        .filter(|e| soft_kind(e))
        // Nor does tracing's stop for it (the qemu backend's TIP.PGD at the faulting
        // instruction): nothing ran between the last retired instruction and the fault.
        .filter(|e| !(fault && e.position == retired))
        .map(|e| e.position)
        .collect();
    (hard, soft)
}

/// A recording's register map without what it cannot vouch for: a recorder that read the
/// kernel's XSAVE area before the recording kept its CPU's layout took Intel's offsets for
/// the AVX-512 registers, which AMD's Zen 4 places elsewhere, so on a CPU that is not
/// Intel's those registers (zmm0–31 as a whole, k0–7) are left out, unknown, rather than
/// read from the wrong bytes. QEMU's registers come from its gdbstub, not from such an area.
fn trusted_registers(map: &BTreeMap<String, String>, backend: &str, cpu: state::Cpu) -> BTreeMap<String, String> {
    let unsure = cpu.xsave.is_none() && backend != "qemu";
    map.iter()
        .filter(|(name, _)| {
            let avx512 = name.starts_with("zmm") || matches!(Named::parse(name), Some(Named::Opmask(_)));
            !(unsure && avx512)
        })
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect()
}

/// The CPU behaviours the state layer needs, from the manifest and the CPU model's CPUID
/// table (qemu backend). The XSAVE layout of a recording made before it was recorded is
/// Intel's on an Intel CPU (every Intel processor enumerates the same) and unknown elsewhere.
fn cpu(c: &crate::recording::CpuInfo, cpuid: &[crate::recording::cpuid::CpuidLeaf]) -> state::Cpu {
    let xsave = c
        .xsave_layout
        .or_else(|| crate::recording::XsaveLayout::from_table(cpuid))
        .or_else(|| (c.vendor == "GenuineIntel").then(crate::recording::XsaveLayout::intel));
    state::Cpu {
        xsave,
        xcr0: c.xcr0,
        syscall_keeps_registers: c.syscall_keeps_registers,
        lzcnt: c.lzcnt,
        bmi1: c.bmi1,
        logic_clears_af: c.logic_clears_af,
        xsave_all_in_use: c.xsave_all_in_use,
    }
}

/// What [`decode`] works from.
pub(super) struct Work {
    pub(super) recording: Recording,
    pub(super) space: AddressSpace,
    pub(super) trace: Arc<Vec<u8>>,
    /// Shared with the session, which decodes stretches of the history alone
    /// ([`super::window`]).
    pub(super) prepared: Arc<Prepared>,
    pub(super) partial: bool,
    pub(super) policy: Policy,
    /// The code each stretch ran, if the recording lists it: checked against the history.
    pub(super) code: Option<Arc<CodeRan>>,
    /// The flag the questions of the history's beginning set while they walk, for the
    /// whole history's fill to wait as for its own ([`super::prefix`]).
    pub(super) pause: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Set while a stop's values are worked out from a part decoded alone (the beginning, a
    /// window) or a window is decoded: the decode waits, the stop comes first (on two cores,
    /// a walk beside the decode took three times as long).
    pub(super) decode_pause: Arc<std::sync::atomic::AtomicBool>,
}

/// Decodes the trace (or reads the timeline stored next to the recording) and starts the
/// state layer over it. An incomplete recording is refused unless `partial`.
pub(super) fn decode(work: Work, progress: &mut (dyn FnMut(u64) + Send)) -> Result<Decoded, RecordingError> {
    let Work {
        recording,
        space,
        trace,
        prepared,
        partial,
        policy,
        code,
        pause,
        decode_pause,
    } = work;
    let gaps = recording.gaps();
    let input = recording.decode_input(&trace, &space, &gaps);
    let sealed = recording.trace_hashes(trace.len());
    let (mut timeline, origin, pending) = cache::obtain(&recording.dir, &trace, sealed, policy, || {
        parallel::build_pausing(&input, parallel::Split::all_cores(), progress, &decode_pause).timeline
    });
    let ran = timeline.len() + timeline.events().iter().map(FlowEvent::unshown).sum::<u64>();
    let spun = timeline.events().iter().any(FlowEvent::unshown_unknown);
    let incomplete = match recording.check_complete(trace.len(), ran, spun) {
        Ok(()) => None,
        Err(e) if partial => Some(e),
        Err(e) => return Err(e),
    };
    if let Some(code) = code.as_ref().filter(|_| incomplete.is_none()) {
        let invalid = |message: String| RecordingError::Invalid {
            path: recording.dir.join(files::CODE_RAN).display().to_string(),
            message,
        };
        // Counted as the recorder counts: passes of a spin at the end included.
        if code.covers() != ran {
            return Err(invalid(format!(
                "it covers {} positions where the history has {ran}",
                code.covers()
            )));
        }
        // A history read back was checked against this very list before it was stored (it
        // is stored only then): its key covers the list's identity, and the seal its bytes.
        let checked = matches!(origin, Origin::Read(_)) && recording.sealed();
        let outside = if checked { None } else { timeline.code_outside(code) };
        if let Some((position, ip)) = outside {
            return Err(invalid(format!(
                "position {position} runs the instruction at {ip:#x}, whose page the list leaves out of its stretch: the list does not say where code ran"
            )));
        }
    }
    let retired = timeline.len();
    // The faulting instruction follows the last retired one only if nothing is missing.
    let fault = match &recording.manifest.end {
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
    let mut syscalls: Vec<(u64, u64)> = prepared
        .syscalls
        .iter()
        .filter(|r| r.position < retired && timeline.ip_at(r.position) == Some(r.ip))
        .map(|r| (r.position, r.nr))
        .collect();
    syscalls.sort_unstable();
    let final_syscall = (timeline.len().checked_sub(1))
        .filter(|&p| fault.is_none() && syscalls.last().map_or(true, |&(q, _)| q != p))
        .filter(|&p| {
            let ip = timeline.ip_at(p);
            ip.and_then(|ip| space.read_only_bytes_at(ip))
                .is_some_and(|b| b.starts_with(&[0x0f, 0x05]))
        });
    let mut handler_entries: Vec<u64> = prepared.signals.iter().map(|e| e.position).collect();
    handler_entries.sort_unstable();
    let inputs = inputs(
        Arc::unwrap_or_clone(prepared),
        &space,
        timeline.clone(),
        fault.is_some(),
        complete,
    )?;
    let mut values = Values::held(space, inputs);
    if let Some(flag) = pause {
        values.share_pause(flag);
    }
    values.release();
    Ok(Decoded {
        timeline,
        retired,
        fault,
        values,
        incomplete,
        origin,
        storing,
        syscalls,
        final_syscall,
        handler_entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{CpuInfo, XsaveLayout};

    #[test]
    fn avx512_registers_a_recorder_read_without_its_cpus_layout_are_left_out_off_intel() {
        let map: BTreeMap<String, String> = ["rax", "xmm0", "ymm1", "zmm2", "zmm17", "k1"]
            .iter()
            .map(|n| (n.to_string(), "0x1".to_string()))
            .collect();
        let names = |m: BTreeMap<String, String>| m.into_keys().collect::<Vec<_>>().join(" ");
        let amd = CpuInfo {
            vendor: "AuthenticAMD".into(),
            ..CpuInfo::default()
        };
        let kept = trusted_registers(&map, "step", cpu(&amd, &[]));
        assert_eq!(names(kept), "rax xmm0 ymm1");
        // Recorded with its layout, on Intel's CPUs (whose layout is fixed), or under QEMU.
        let with = CpuInfo {
            xsave_layout: Some(XsaveLayout::intel()),
            ..amd.clone()
        };
        assert_eq!(trusted_registers(&map, "step", cpu(&with, &[])).len(), 6);
        let intel = CpuInfo {
            vendor: "GenuineIntel".into(),
            ..CpuInfo::default()
        };
        assert_eq!(trusted_registers(&map, "step", cpu(&intel, &[])).len(), 6);
        assert_eq!(trusted_registers(&map, "qemu", cpu(&amd, &[])).len(), 6);
    }
}

//! `rtit record --backend msr`: everything put together on a Linux RTIT machine.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use rtit_replay_core::recording::{EndState, Mapping, Maps, SignalEntry};
use rtit_replay_core::regs::{ctl, events, EventId};
use rtit_replay_core::syscall::SyscallRecord;

use super::collect::WrapMode;
use super::linux::{pin, CpuLock, HugePage};
use super::session::{self, SessionOptions};
use super::target::{PtraceTarget, Stop};
use crate::model::RtitConfig;
use crate::outcome::{FromTrace, Module, Outcome};
use crate::step::StartAt;

/// What to record, and how.
pub struct MsrOptions {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Leave ASLR on.
    pub aslr: bool,
    /// Where tracing starts.
    pub start: StartAt,
    /// The configuration (CR3_MATCH is found).
    pub config: RtitConfig,
    /// The logical processor to trace on.
    pub cpu: usize,
    /// Flight recorder or periodic drain.
    pub wrap: WrapMode,
    /// Time between drains.
    pub slice: Duration,
    /// A kernel module whose code to trace (OS=1, IP filter on its text).
    pub module: Option<Module>,
    /// The IP filter ranges for the module (its `.text`, and `.init.text` if asked).
    pub module_ranges: Vec<(u64, u64)>,
    /// Where lock files go (`/run`).
    pub lock_dir: PathBuf,
    /// Set on SIGINT/SIGTERM.
    pub interrupted: crate::interrupt::Interrupt,
}

/// Records with the hardware. Every failure is one line naming what is wrong.
pub fn record(mut opts: MsrOptions) -> Result<Outcome, String> {
    let msrs = super::detect::detect(opts.cpu)?;
    let _lock = CpuLock::take(&opts.lock_dir, opts.cpu)?;
    let mut region = HugePage::new()?;
    if let Some(module) = &opts.module {
        // OS code of the module only: IP filter ranges (§2.4.3), RANGE0 and RANGE1.
        if opts.module_ranges.len() > 2 {
            return Err(format!("module {}: RTIT has two IP ranges", module.name));
        }
        opts.config.ctl |= ctl::OS;
        for (n, &(a, b)) in opts.module_ranges.iter().enumerate() {
            opts.config.lip[n] = a;
            opts.config.lip[n + 2] = b;
        }
        let filter = if opts.module_ranges.len() == 2 {
            EventId::Either
        } else {
            EventId::Range0
        };
        opts.config.events = events(filter, EventId::AlwaysOff);
    }
    let mut target = PtraceTarget::spawn(
        &opts.program,
        &opts.args,
        opts.aslr,
        opts.cpu,
        &opts.start,
        &opts.interrupted,
    )
    .map_err(|e| e.to_string())?;
    // Under an IP filter, user code outside it runs untraced.
    target.filtered = opts.config.events & 0b111 != EventId::AlwaysOn.bits();
    let xcr0 = target.xcr0();
    // The drain loop runs where the target runs (§3.3.1).
    pin(nix::unistd::Pid::from_raw(0), opts.cpu)?;
    let session = SessionOptions {
        config: opts.config,
        wrap: opts.wrap,
        slice: opts.slice,
        interrupted: opts.interrupted.clone(),
    };
    let mut traced = session::record(msrs, &mut region, &mut target, &session).map_err(|e| e.to_string())?;
    if let EndState::Unsupported { afterwards, .. } = &mut traced.end {
        // Tracing is off: the program runs on to its end (issue 43).
        *afterwards = target.run_on(&opts.interrupted).map(Box::new);
    }
    let mut start = target.start.clone().unwrap_or_default();
    let end = target.end.clone().unwrap_or_default();
    let placed = place(start.maps.clone(), &target.stops, &traced.marks);
    if traced.gaps.first().is_some_and(|g| g.offset == 0) {
        // The history starts after lost bytes: the state where it starts is not the state
        // rtit read when tracing started.
        start.registers.clear();
        start.memory = Default::default();
    }
    Ok(Outcome {
        // The hardware counts nothing: the writer decodes the trace for the count, which is
        // then exact by construction. Tracing stops while the target is off the CPU (after
        // the FUP.PGD of its switch away, which flushes the TNT bits), so nothing is left in
        // RTIT_TNT_BUFF to record.
        trace_end: None,
        children: Vec::new(),
        warnings: target.warnings.clone(),
        trace: traced.trace.into(),
        // The writer counts them by decoding (`from_trace`).
        instructions: 0,
        truth: None,
        memory_start: start.memory,
        memory_end: end.memory,
        maps: placed.maps,
        images: target.images.clone(),
        registers_start: start.registers,
        registers_end: end.registers,
        start_ip: traced.start_ip,
        cr3: traced.cr3.unwrap_or(0),
        end: traced.end,
        config: traced.config,
        modules: opts.module.into_iter().collect(),
        gaps: traced.gaps,
        syscalls: placed.syscalls,
        results: Vec::new(),
        syscalls_file: None,
        anchor_files: None,
        code_file: None,
        sync_file: None,
        signals: placed.signals,
        cpuid: Vec::new(),
        xcr0,
        from_trace: Some(FromTrace {
            change_offsets: placed.offsets,
            syscall_offsets: placed.syscall_offsets,
            signal_offsets: placed.signal_offsets,
        }),
        // The caller adds the kernel's sideband (`super::kernel`).
        kernel_text: None,
    })
}

/// The sideband stops placed in the trace kept.
#[derive(Debug, Default, PartialEq, Eq)]
struct Placed {
    maps: Maps,
    /// The trace offset of each of `maps.changes`.
    offsets: Vec<u64>,
    syscalls: Vec<SyscallRecord>,
    syscall_offsets: Vec<u64>,
    signals: Vec<SignalEntry>,
    signal_offsets: Vec<u64>,
}

/// Places each stop's sideband at the trace offset of its stop. A map change before the
/// first byte kept (a flight recorder's lost beginning) is part of the map the history
/// starts with; a system call or a signal there is not in the history.
fn place(initial: Vec<Mapping>, stops: &[Stop], marks: &[Option<u64>]) -> Placed {
    let mut placed = Placed {
        maps: Maps {
            initial,
            changes: Vec::new(),
        },
        ..Placed::default()
    };
    for (stop, mark) in stops.iter().zip(marks) {
        match (stop, mark) {
            (Stop::Syscall { record, change }, Some(offset)) => {
                placed.syscalls.push((**record).clone());
                placed.syscall_offsets.push(*offset);
                if let Some(c) = change {
                    placed.maps.changes.push(c.change.clone());
                    placed.offsets.push(*offset);
                }
            }
            (Stop::Syscall { change: Some(c), .. }, None) => placed.maps.initial = c.after.clone(),
            (Stop::Signal(entry), Some(offset)) => {
                placed.signals.push((**entry).clone());
                placed.signal_offsets.push(*offset);
            }
            _ => {}
        }
    }
    placed
}

#[cfg(test)]
mod tests {
    use rtit_replay_core::recording::MapChange;
    use rtit_replay_core::syscall::MemoryWrite;

    use super::super::target::MapStop;
    use super::*;

    fn mapping(start: u64) -> Mapping {
        Mapping {
            start,
            end: start + 0x1000,
            perms: "rw-p".into(),
            offset: 0,
            path: None,
        }
    }

    fn record(nr: u64) -> Box<SyscallRecord> {
        Box::new(SyscallRecord {
            position: 0,
            ip: 0x1000 + nr,
            nr,
            before: Default::default(),
            after: Default::default(),
            writes: Vec::new(),
            complete: true,
            unlogged: Vec::new(),
        })
    }

    fn map_stop(start: u64, before: &[Mapping]) -> MapStop {
        let mut after = before.to_vec();
        after.push(mapping(start));
        MapStop {
            change: MapChange {
                position: 0,
                syscall: "mmap".into(),
                added: vec![mapping(start)],
                removed: Vec::new(),
                mapped_start: None,
                mapped_end: None,
            },
            after,
        }
    }

    fn mmap(start: u64, before: &[Mapping]) -> (Stop, Vec<Mapping>) {
        let m = map_stop(start, before);
        let after = m.after.clone();
        (
            Stop::Syscall {
                record: record(9),
                change: Some(m),
            },
            after,
        )
    }

    #[test]
    fn changes_before_the_kept_trace_become_the_initial_map() {
        let (first, a1) = mmap(0x1000, &[]);
        let (second, a2) = mmap(0x2000, &a1);
        let (third, _) = mmap(0x3000, &a2);
        let read = Stop::Syscall {
            record: record(0),
            change: None,
        };
        let signal = Stop::Signal(Box::new(SignalEntry {
            position: 0,
            ip: 0x5000,
            registers: Default::default(),
            frame: MemoryWrite::new(0x7000, &[1]),
            only_kernel: true,
            switch: None,
        }));
        let stops = [first, read.clone(), second, signal.clone(), read, third];
        let placed = place(Vec::new(), &stops, &[None, None, None, None, Some(33), Some(40)]);
        assert_eq!(placed.maps.initial, a2, "the map after the last change not kept");
        assert_eq!(placed.maps.changes.len(), 1);
        assert_eq!(placed.offsets, vec![40]);
        assert_eq!(
            placed.syscall_offsets,
            vec![33, 40],
            "the calls kept: the read and the mmap"
        );
        assert_eq!(placed.syscalls.iter().map(|r| r.nr).collect::<Vec<_>>(), [0, 9]);
        assert!(placed.signals.is_empty(), "before the trace kept");
        let all = place(
            Vec::new(),
            &stops,
            &[Some(0), Some(5), Some(9), Some(20), Some(33), Some(40)],
        );
        assert!(all.maps.initial.is_empty());
        assert_eq!(all.offsets, vec![0, 9, 40]);
        assert_eq!(all.maps.changes.len(), 3);
        assert_eq!(all.syscall_offsets, vec![0, 5, 9, 33, 40]);
        assert_eq!(all.signal_offsets, vec![20]);
    }
}

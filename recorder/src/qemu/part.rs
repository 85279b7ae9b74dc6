//! One program's recording under QEMU: the wait for its end (QEMU's, or an execve the plugin
//! followed, after which QEMU goes on with the next program), and the plugin's report turned
//! into an [`Outcome`].

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use rtit_replay_core::recording::{truth, EndState, MemoryRegion, SignalEntry, TraceEndRecord};

use super::engine::Checked;
use super::error::{Phase, QemuError};
use super::gdbstub::StartPoint;
use super::report::{files, PluginEnd, Report};
use super::stop::StopPipe;
use crate::model::RtitConfig;
use crate::outcome::{Outcome, RegisterMap, Truth};
use crate::sideband::{Images, Snapshot};
use crate::step::StartAt;
use crate::trace_bytes::{ScratchDir, TraceBytes};

pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> QemuError + '_ {
    move |source| QemuError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// What [`Session::part`] calls while QEMU runs: after the first second, every half second, the
/// plugin's position (read from QEMU's memory, where `counters.json` says) and the size of
/// the trace it has written so far, handed to `progress`.
fn progress_tick<'a>(dir: &'a Path, pid: u32, progress: &'a mut Option<Box<dyn FnMut(u64, u64)>>) -> impl FnMut() + 'a {
    let started = std::time::Instant::now();
    let mut last = started;
    let mut counters: Option<super::report::Counters> = None;
    move || {
        let Some(report) = progress.as_mut() else { return };
        let now = std::time::Instant::now();
        if now - started < Duration::from_secs(1) || now - last < Duration::from_millis(500) {
            return;
        }
        last = now;
        if counters.is_none() {
            counters = std::fs::read(dir.join(files::COUNTERS))
                .ok()
                .and_then(|t| serde_json::from_slice(&t).ok());
        }
        let Some(c) = counters else { return };
        let position = super::gdbstub::guest::word(nix::unistd::Pid::from_raw(pid as i32), c.position);
        let bytes = std::fs::metadata(dir.join(files::TRACE)).map_or(0, |m| m.len());
        if let Some(at) = position.filter(|&p| p != u64::MAX) {
            report(at, bytes);
        }
    }
}

/// A program's recording, and the next program's to make if it ran execve (issue 43).
pub struct Part {
    /// This program's recording.
    pub outcome: Outcome,
    /// The program its execve ran, which QEMU runs now, waiting for rtit at its first
    /// instruction.
    pub next: Option<Next>,
}

/// A program that execve started under QEMU again (`super::relaunch`), not recorded yet.
pub struct Next {
    session: Session,
    dir: PathBuf,
    /// Its file (a script's interpreter).
    program: PathBuf,
    /// Its command line.
    pub argv: Vec<OsString>,
    /// Where its recording starts.
    start: StartAt,
}

impl Next {
    /// Records it, from its first instruction, or from `--start`'s symbol where it defines
    /// it (`super::relaunch::next_args`).
    pub fn record(self) -> Result<Part, QemuError> {
        let Self {
            session,
            dir,
            program,
            start,
            ..
        } = self;
        let mut phase = Phase::Connecting;
        let scratch = ScratchDir::adopt(dir.clone());
        let interrupted = session.interrupted.clone();
        let result = session.part(scratch, &start, &program, &mut phase);
        result.map_err(|e| interrupted.explain(e, || phase.during(&start)))
    }
}

/// What every program of a run shares: QEMU's process (the same through every execve), the
/// pipe that asks the plugin to stop, QEMU's CPUID table, and how to record.
pub(super) struct Session {
    pub(super) child: std::process::Child,
    pub(super) pipe: StopPipe,
    pub(super) cpuid: Option<super::cpuid::Probe>,
    pub(super) table: Option<Result<Vec<rtit_replay_core::recording::cpuid::CpuidLeaf>, String>>,
    pub(super) progress: Option<Box<dyn FnMut(u64, u64)>>,
    pub(super) interrupted: crate::interrupt::Interrupt,
    pub(super) config: RtitConfig,
    pub(super) cr3: u64,
    pub(super) truth: bool,
    pub(super) check: bool,
    pub(super) anchors: Option<super::gdbstub::AnchorEvery>,
}

impl Session {
    /// Records the program QEMU runs now, `program`, into `scratch`, from `start`, until it
    /// ends or runs another through execve.
    pub(super) fn part(
        mut self,
        scratch: ScratchDir,
        start: &StartAt,
        program: &Path,
        phase: &mut Phase,
    ) -> Result<Part, QemuError> {
        let dir = scratch.path().to_path_buf();
        let dir = dir.as_path();
        let config = self.config;
        let cr3 = self.cr3;
        let socket = super::relaunch::socket(dir);
        let plan = super::gdbstub::Plan {
            sample: self.truth,
            sample_entry: matches!(start, StartAt::Entry),
            start: match start {
                StartAt::Entry => None,
                StartAt::Symbol(name) => Some(StartPoint::Symbol {
                    program: program.to_path_buf(),
                    name: name.clone(),
                }),
                StartAt::Address(a) => Some(StartPoint::Address(*a)),
            },
            // Under an IP filter user code outside it runs untraced.
            only_kernel: config.events & 0b111 == rtit_replay_core::regs::EventId::AlwaysOn.bits(),
            anchors: self.anchors.map(|every| super::gdbstub::AnchorPlan {
                every,
                dir: dir.to_path_buf(),
            }),
        };
        let child = &mut self.child;
        let watch = match super::gdbstub::Watch::start(&socket, dir, child.id(), plan, &self.interrupted) {
            Ok(w) => w,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e.into());
            }
        };
        *phase = Phase::Starting;
        let mut tick = progress_tick(dir, child.id(), &mut self.progress);
        // The part ends with QEMU, or where the plugin says it ran execve and QEMU goes on.
        let execed = || {
            let report = std::fs::read(dir.join(files::REPORT)).ok();
            let report = report.and_then(|t| serde_json::from_slice::<Report>(&t).ok());
            report.is_some_and(|r| matches!(r.end, PluginEnd::Exec { .. }))
        };
        let status = self.pipe.wait(child, &self.interrupted, super::stop::GRACE, &mut || {
            tick();
            execed()
        })?;
        drop(tick);
        let watched = watch.finish();
        let report = read_report(dir, status);
        if report.as_ref().is_ok_and(|r| r.start_ip.is_some()) {
            *phase = Phase::Recording;
        }
        let watched = watched?;
        let samples = watched.samples;
        let report = report?;
        if self.check {
            match &report.check {
                Some(Checked { mismatch: Some(m), .. }) => return Err(QemuError::FastPathDiffers(m.clone())),
                Some(_) => {}
                None => return Err(QemuError::NotChecked(dir.display().to_string())),
            }
        }
        // After a signal, `record` says so instead ("running the program to main").
        let at = match start {
            StartAt::Entry => "the entry point".to_string(),
            StartAt::Symbol(s) => s.clone(),
            StartAt::Address(a) => format!("{a:#x}"),
        };
        let start_ip = match (report.start_ip, &report.end) {
            (Some(ip), _) => ip,
            (None, PluginEnd::Stopped { reason }) => {
                let then = end_state(&report.end, status, &self.interrupted);
                let then = match then {
                    EndState::Unsupported {
                        afterwards: Some(a), ..
                    } => a.as_afterwards(),
                    _ => "its end is unknown".to_string(),
                };
                let reason = reason
                    .trim_end_matches(" before tracing started; not supported")
                    .to_string();
                return Err(QemuError::StoppedBeforeStart { at, reason, then });
            }
            (None, _) => return Err(QemuError::StartNotReached(at)),
        };
        let read = |name: &str| std::fs::read(dir.join(name)).map_err(io(Path::new(name)));
        let trace_path = dir.join(files::TRACE);
        let len = std::fs::metadata(&trace_path)
            .map_err(io(Path::new(files::TRACE)))?
            .len();
        let mut warnings = Vec::new();
        // The same QEMU runs every program of the run: its table is probed once.
        if let Some(probe) = self.cpuid.take() {
            self.table = Some(probe.table());
        }
        let cpuid = match self.table.clone().unwrap_or_else(|| Err("no CPUID probe".into())) {
            Ok(table) => table,
            Err(e) => {
                warnings.push(format!("{e}: CPUID's results stay unknown in replay"));
                Vec::new()
            }
        };
        let truth = self.truth.then(|| -> Result<Truth, QemuError> {
            let bytes = read(files::TRUTH)?;
            let ips = truth::decode(&bytes).map_err(|problem| QemuError::BadReport {
                path: dir.join(files::TRUTH).display().to_string(),
                problem,
            })?;
            let taken = samples.len();
            let samples = placed(samples, &ips);
            if samples.len() < taken {
                warnings.push(format!(
                    "{} of {taken} register samples were left out: the trace has another instruction at their position",
                    taken - samples.len()
                ));
            }
            Ok(Truth { ips, samples })
        });
        let truth = truth.transpose()?;
        let snapshot = |name: &str, regions: &[MemoryRegion], truncated: bool| -> Result<Snapshot, QemuError> {
            let bytes = read(name)?;
            let mut snap = Snapshot {
                truncated,
                ..Snapshot::default()
            };
            for r in regions {
                if r.zero {
                    snap.zero.push(r.mapping.clone());
                    continue;
                }
                let len = (r.mapping.end - r.mapping.start) as usize;
                let from = r.file_offset as usize;
                let chunk = bytes.get(from..from + len).ok_or_else(|| QemuError::BadReport {
                    path: dir.join(name).display().to_string(),
                    problem: format!("region at {:#x} runs past the file's end", r.mapping.start),
                })?;
                snap.regions.push((r.mapping.clone(), chunk.to_vec()));
            }
            Ok(snap)
        };
        let memory_start = snapshot(files::MEMORY_START, &report.memory_start, report.memory_start_truncated)?;
        let memory_end = snapshot(files::MEMORY_END, &report.memory_end, report.memory_end_truncated)?;
        let mut images = Images::default();
        if let Some(at) = report.vdso {
            let path = dir.join(files::VDSO);
            images.set_vdso(at, std::fs::read(&path).map_err(io(&path))?);
        }
        for (path, load) in &report.images {
            images.add(path, *load);
        }
        let end = end_state(&report.end, status, &self.interrupted);
        let registers_start = match watched.start {
            None => report.registers_start,
            Some(Ok(regs)) if regs.get("rip") == Some(&format!("{start_ip:#x}")) => regs,
            Some(Ok(regs)) => {
                warnings.push(format!(
                "QEMU's gdbstub stopped at rip {} but tracing started at {start_ip:#x}: the registers there are unknown",
                regs.get("rip").map_or("?", String::as_str)
            ));
                report.registers_start
            }
            Some(Err(why)) => {
                warnings.push(format!("{why}: the registers where tracing starts are unknown"));
                report.registers_start
            }
        };
        // A fatal signal's stop is at the faulting instruction, the end of the history: what
        // the gdbstub read there are the end's registers, where the plugin knows rip alone.
        let hex = |r: &RegisterMap| {
            r.get("rip")
                .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        };
        let registers_end = match (watched.unhandled, hex(&report.registers_end)) {
            (Some(regs), Some(fault)) if hex(&regs) == Some(fault) => match &report.end {
                PluginEnd::Died { fault_ip: Some(_) } => with_fault_rf(regs),
                _ => regs,
            },
            _ => report.registers_end.clone(),
        };
        let mut signals = watched.signals;
        exact_positions(&mut signals, &watched.told, &report.deliveries);
        // The switches between threads, among the handler entries by position (a switch
        // before a handler's entry at the same position: the thread runs, then the signal
        // comes).
        if !report.switches.is_empty() {
            signals.extend(report.switches.iter().cloned());
            signals.sort_by_key(|e| (e.position, e.switch.is_none()));
        }
        // Anchors, where the plugin tracked the written pages (its notes say why not).
        warnings.extend(
            report
                .notes
                .iter()
                .filter(|n| n.starts_with("no anchors") || n.starts_with("anchors end"))
                .cloned(),
        );
        // Long enough to leave a stretch of hundreds of millions of instructions without one.
        if watched.anchors_put_off >= Duration::from_millis(200) {
            warnings.push(format!(
                "anchors were put off for {:.1} s of the run, while a thread of the program waited for its turn inside QEMU (QEMU 10.0 stops every thread to take one): a first look into those stretches waits for the background pass",
                watched.anchors_put_off.as_secs_f64()
            ));
        }
        let anchor_files = match watched.anchors {
            Some(ended) => {
                if let Some(why) = ended {
                    warnings.push(format!(
                        "anchors stop before the end ({why}): values after the last come from the passes alone"
                    ));
                }
                let names = [
                    rtit_replay_core::recording::files::ANCHORS,
                    rtit_replay_core::recording::files::ANCHOR_PAGES,
                ];
                Some(names.map(|n| dir.join(n)))
            }
            None => None,
        };
        let next = match &report.end {
            PluginEnd::Exec { file, argv, start, .. } => Some((
                PathBuf::from(file),
                argv.iter().map(OsString::from).collect(),
                start.clone().map_or(StartAt::Entry, StartAt::Symbol),
            )),
            _ => None,
        };
        let outcome = Outcome {
            trace_end: report.tnt_buff.map(|tnt_buff| TraceEndRecord { tnt_buff }),
            children: report.children,
            warnings,
            syscalls: report.syscalls,
            syscalls_file: Some(dir.join(files::SYSCALLS)).filter(|p| p.is_file()),
            anchor_files,
            code_file: Some(dir.join(files::CODE_RAN)).filter(|p| p.is_file()),
            sync_file: Some(dir.join(files::SYNC_POINTS)).filter(|p| p.is_file()),
            results: read_results(&dir.join(files::RESULTS))?,
            signals,
            cpuid,
            xcr0: None,
            modules: Vec::new(),
            gaps: Vec::new(),
            from_trace: None,
            kernel_text: None,
            trace: TraceBytes::File {
                path: trace_path,
                len,
                scratch,
            },
            instructions: report.instructions,
            truth,
            memory_start,
            memory_end,
            maps: report.maps,
            images,
            registers_start,
            registers_end,
            start_ip,
            cr3,
            end,
            config,
        };
        let next = next.map(|(program, argv, start)| Next {
            dir: dir.join(super::relaunch::NEXT),
            session: self,
            program,
            argv,
            start,
        });
        Ok(Part { outcome, next })
    }
}

/// What the plugin logged of RDTSC, RDTSCP and RDPID (no file: nothing).
fn read_results(path: &Path) -> Result<Vec<rtit_replay_core::recording::InsnResult>, QemuError> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(Vec::new());
    };
    text.lines()
        .map(|line| {
            serde_json::from_str(line).map_err(|e| QemuError::BadReport {
                path: path.display().to_string(),
                problem: e.to_string(),
            })
        })
        .collect()
}

/// The plugin's report, once QEMU has ended (with `status`).
fn read_report(dir: &Path, status: Option<std::process::ExitStatus>) -> Result<Report, QemuError> {
    let path = dir.join(files::REPORT);
    let text = std::fs::read(&path).map_err(|_| QemuError::NoReport {
        status: status.map_or_else(|| "still running".to_string(), |s| s.to_string()),
        dir: dir.display().to_string(),
    })?;
    serde_json::from_slice(&text).map_err(|e| QemuError::BadReport {
        path: path.display().to_string(),
        problem: e.to_string(),
    })
}

/// The samples whose `rip` is the trace's instruction at their position. A stop between
/// two iterations of a REP string instruction, or in a block the trace leaves out, has a
/// position that is not the sampled instruction's.
fn placed(samples: Vec<(u64, RegisterMap)>, ips: &[u64]) -> Vec<(u64, RegisterMap)> {
    samples
        .into_iter()
        .filter(|(at, regs)| {
            let rip = regs
                .get("rip")
                .and_then(|r| u64::from_str_radix(r.trim_start_matches("0x"), 16).ok());
            rip.is_some() && ips.get(*at as usize).copied() == rip
        })
        .collect()
}

/// How the run ended, from the plugin's view and QEMU's exit status.
fn end_state(
    end: &PluginEnd,
    status: Option<std::process::ExitStatus>,
    interrupted: &crate::interrupt::Interrupt,
) -> EndState {
    match end {
        // QEMU goes on, on the program execve ran (`super::relaunch`).
        PluginEnd::Exec { program, .. } => EndState::Exec {
            program: program.clone(),
            next: None,
        },
        // The program ran on unrecorded after the plugin stopped (a signal to rtit then went
        // to it): QEMU's status is the program's.
        PluginEnd::Stopped { reason } => EndState::Unsupported {
            reason: reason.clone(),
            afterwards: match (status.and_then(|s| s.code()), status.and_then(|s| s.signal())) {
                (Some(code), _) => Some(Box::new(EndState::Exited { code })),
                (None, Some(signal)) => Some(Box::new(EndState::Signaled {
                    signal,
                    name: signal_name(signal),
                    address: None,
                    ip: None,
                })),
                (None, None) => None,
            },
        },
        _ if interrupted.is_set() => interrupted.end_state(),
        PluginEnd::Exited { code } => EndState::Exited { code: *code },
        PluginEnd::Interrupted { signal } => {
            let i = crate::interrupt::Interrupt::new();
            i.raise(*signal);
            i.end_state()
        }
        PluginEnd::Died { fault_ip } => {
            let signal = status.and_then(|s| s.signal()).unwrap_or(0);
            EndState::Signaled {
                signal,
                name: signal_name(signal),
                address: None,
                ip: fault_ip.map(|ip| format!("{ip:#x}")),
            }
        }
    }
}

/// The registers at a fault as the kernel saved them: with RFLAGS.RF, which the processor
/// sets in the flags it saves for every fault but an instruction breakpoint (SDM vol. 3,
/// 18.3.1.1) and which native gdb shows there (0x10283 where QEMU's CPU, which keeps no RF,
/// says 0x283).
fn with_fault_rf(mut regs: RegisterMap) -> RegisterMap {
    const RF: u64 = 1 << 16;
    if let Some(v) = regs
        .get("eflags")
        .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
    {
        regs.insert("eflags".to_string(), format!("{:#x}", v | RF));
    }
    regs
}

/// `SIGSEGV` for 11.
fn signal_name(signal: i32) -> String {
    Signal::try_from(signal).map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_string())
}

/// Puts the handler entries the engine was told of (`told`: their indices in `signals`, in
/// order) at the positions it found (`deliveries`, in the same order): `rtit record` counts
/// from outside, and where a fault stopped the interrupted block it cannot tell whether the
/// faulting instruction, which started, retired (it did not: the handler's entry came one
/// instruction earlier than counted). Entries it did not place keep rtit's count.
fn exact_positions(signals: &mut [SignalEntry], told: &[usize], deliveries: &[Option<u64>]) {
    for (&at, found) in told.iter().zip(deliveries) {
        if let (Some(entry), Some(position)) = (signals.get_mut(at), *found) {
            entry.position = position;
        }
    }
}

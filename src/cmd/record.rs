//! `rtit record`: run a program and record its control flow into a recording directory.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use rtit_recorder::interrupt::Interrupt;
use rtit_recorder::model::{ModelOptions, RtitConfig};
use rtit_recorder::msr::kernel;
use rtit_recorder::qemu::{self, gdbstub::AnchorEvery, launch::QemuOptions};
use rtit_recorder::step::{self, StartAt, StepOptions};
use rtit_recorder::writer::{self, Meta};
use rtit_replay_core::recording::{default_root, ChildProcess, EndState};
use rtit_replay_core::regs::{ctl, events, EventId};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

mod parts;

/// Trace backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// Pick the best available: qemu when `qemu-x86_64` and the plugin are there, else step.
    Auto,
    /// ptrace single-stepping through the RTIT unit model: exact, slow, works everywhere.
    Step,
    /// QEMU user mode with rtit's plugin driving the RTIT unit model: fast; the program runs
    /// on QEMU's CPU model.
    Qemu,
    /// The RTIT hardware of an Atom Silvermont/Airmont core, through the Linux MSR device
    /// (root): full speed, and kernel modules with `--module`.
    Msr,
}

/// What to do when the trace outgrows the output region (msr backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Wrap {
    /// Pause tracing every `--drain-ms` and copy the region out; a wrap in between is a gap.
    Drain,
    /// Keep only the last region-full (2 MiB), like perf's snapshot mode.
    Flight,
}

/// The backend `auto` means here, and the line that says so: which backend, in a word, and
/// why only where it matters (the slow step backend because QEMU is missing) or was asked
/// for (`verbose`).
fn choose(backend: Backend, named_qemu: Option<&Path>, verbose: bool) -> (Backend, String) {
    let hardware = "this CPU has no RTIT (it needs an Atom Silvermont/Airmont core)";
    let (qemu, step) = ("the qemu backend", "the step backend");
    // Why the step backend, and what it costs, when the user did not ask for it.
    let slow = "the step backend (ptrace single-stepping, about 16,000 instructions a second)";
    match backend {
        Backend::Step => (Backend::Step, step.into()),
        Backend::Qemu => {
            // The backend says what is missing if this fails.
            let _ = crate::plugin::ensure();
            match qemu::find::find_qemu(named_qemu) {
                Ok(q) if verbose => (Backend::Qemu, format!("{qemu}: {}", qemu::find::described(&q))),
                _ => (Backend::Qemu, qemu.into()),
            }
        }
        Backend::Msr => (Backend::Msr, "the msr backend (the RTIT hardware)".into()),
        // A QEMU named (`--qemu`, `$RTIT_QEMU`): the qemu backend, which says what is wrong
        // with it, if anything.
        Backend::Auto
            if named_qemu.is_some() || std::env::var_os(qemu::find::QEMU_ENV).is_some_and(|v| !v.is_empty()) =>
        {
            choose(Backend::Qemu, named_qemu, verbose)
        }
        Backend::Auto => match (qemu::find::find_qemu(named_qemu), crate::plugin::ensure()) {
            (Ok(q), Ok(_)) if verbose => {
                let skipped: Vec<String> = qemu::find::passed_over()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                let mut skipped = match skipped.is_empty() {
                    true => String::new(),
                    false => format!(" ({} on PATH cannot)", skipped.join(", ")),
                };
                // (A QEMU named with `--qemu` or `$RTIT_QEMU` took the arm above.)
                let older: Vec<String> = qemu::find::older_on_path(&q)
                    .iter()
                    .map(|p| qemu::find::described(p))
                    .collect();
                if !older.is_empty() {
                    skipped += &format!(" and is newer than {} on PATH", older.join(", "));
                }
                (
                    Backend::Qemu,
                    format!(
                        "{qemu}: {hardware}, and {} loads plugins{skipped}",
                        qemu::find::described(&q)
                    ),
                )
            }
            (Ok(_), Ok(_)) => (Backend::Qemu, qemu.into()),
            (Err(why), _) => (Backend::Step, format!("{slow}: {why}")),
            (Ok(_), Err(why)) => (Backend::Step, format!("{slow}: {why}")),
        },
    }
}

/// Arguments of `rtit record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The recording directory (default: a new one under ~/.local/share/rtit, or $RTIT_DIR,
    /// with a `latest` link to it).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The trace backend.
    #[arg(long, value_enum, default_value = "auto")]
    backend: Backend,
    /// qemu backend: take an anchor (every register and the pages written since the last)
    /// every this many instructions, so that replay knows the state there at once; 0: none.
    /// Needs Linux 6.7 or newer (asynchronous userfaultfd write-protection). Default: 2^22
    /// on QEMU 9.0 and later, whose plugin stops the program for one in about a millisecond,
    /// spaced out up to 2^25 where their pages outgrow three quarters of the trace (a given N
    /// is kept as it is); 2^25 on QEMU 7.2 and 8.x, where each costs QEMU its translated
    /// code (its gdbstub flushes it at every stop: about 20 ms on python3).
    #[arg(long, value_name = "N")]
    anchor_every: Option<u64>,
    /// qemu backend: the `qemu-x86_64` to run (default: $RTIT_QEMU, else the first on PATH
    /// that can load plugins, else the newest `rtit build-qemu` built).
    #[arg(long, value_name = "PATH")]
    qemu: Option<PathBuf>,
    /// Say more: why `auto` chose the backend it did.
    #[arg(short, long)]
    verbose: bool,
    /// Run natively to this symbol of the executable (or hex address), then trace.
    #[arg(long, value_name = "SYMBOL|ADDR")]
    start: Option<String>,
    /// Trace only this IP range (hex START-END, END excluded); up to two.
    #[arg(long, value_name = "START-END")]
    filter: Vec<String>,
    /// Do not compress returns (RTIT_CTL.Cmprs_Ret clear).
    #[arg(long)]
    no_ret_compression: bool,
    /// A PSB every this many bytes of trace: 2048, 4096, 8192 (default) or 16384.
    #[arg(long, value_name = "BYTES", default_value_t = 8192)]
    psb_period: u32,
    /// Cycle-accurate mode (cycle counts after packets).
    #[arg(long)]
    cycle_accurate: bool,
    /// MTC timing packets.
    #[arg(long)]
    mtc: bool,
    /// STS timing packets.
    #[arg(long)]
    sts: bool,
    /// Leave address-space randomisation on (off by default, as rr and gdb do).
    #[arg(long)]
    aslr: bool,
    /// Also write every retired instruction address (truth.bin) and sampled registers.
    #[arg(long)]
    truth: bool,
    /// qemu backend: also run the unit model one instruction at a time beside the plugin's
    /// fast path and fail if their packets differ anywhere (slower; a check).
    #[arg(long)]
    check_fast_path: bool,
    /// msr backend: the logical processor to trace on (the program and rtit are pinned to it).
    #[arg(long, value_name = "N", default_value_t = 0)]
    cpu: usize,
    /// msr backend: what to do when the trace outgrows the 2 MiB output region.
    #[arg(long, value_enum, default_value = "drain")]
    wrap: Wrap,
    /// msr backend: milliseconds between drains of the output region.
    #[arg(long, value_name = "MS", default_value_t = 10)]
    drain_ms: u64,
    /// msr backend: also trace ring 0 (RTIT_CTL.OS).
    #[arg(long)]
    kernel: bool,
    /// A kernel module (or a `.o` loaded the same way) whose code runs in the recording: its
    /// section addresses and file go into the recording, for replay and `add-symbol-file`.
    /// With the msr backend its `.text` is the IP filter and OS tracing is on.
    #[arg(long, value_name = "NAME")]
    module: Option<String>,
    /// Where the module's `NAME/sections/` directory is (read when recording ends).
    #[arg(long, value_name = "DIR", default_value = "/sys/module")]
    module_root: PathBuf,
    /// The module's object file (default: what `modinfo -n NAME` says).
    #[arg(long, value_name = "FILE")]
    module_file: Option<PathBuf>,
    /// msr backend: trace the module's `.init.text` too (a second IP range).
    #[arg(long)]
    init_text: bool,
    /// The kernel's symbol list: a module's external symbols and, with `--kernel`, the
    /// run-time `_text` come from it (root sees the addresses).
    #[arg(long, value_name = "FILE", default_value = rtit_recorder::msr::kernel::KALLSYMS)]
    kallsyms: PathBuf,
    /// msr backend with `--kernel`: the running kernel's vmlinux, copied so replay decodes
    /// kernel code (default: the first of /usr/lib/debug/boot/vmlinux-REL,
    /// /usr/lib/debug/lib/modules/REL/vmlinux, /boot/vmlinux-REL,
    /// /lib/modules/REL/build/vmlinux).
    #[arg(long, value_name = "FILE")]
    vmlinux: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM [ARGS]...")]
    command: Vec<OsString>,
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

fn config(args: &RecordArgs) -> Result<RtitConfig> {
    let mut config = RtitConfig::user_process(0);
    if args.no_ret_compression {
        config.ctl &= !ctl::CMPRS_RET;
    }
    for (flag, bit) in [
        (args.cycle_accurate, ctl::CYCLE_ACC),
        (args.mtc, ctl::MTC_EN),
        (args.sts, ctl::STS_EN),
    ] {
        if flag {
            config.ctl |= bit;
        }
    }
    let mask = match args.psb_period {
        2048 => 0,
        4096 => 1,
        8192 => 2,
        16384 => 3,
        other => bail!("--psb-period {other}: RTIT_PKT_CNT offers 2048, 4096, 8192 or 16384 bytes"),
    };
    config.pkt_cnt = mask << 16;
    if args.filter.len() > 2 {
        bail!("--filter: RTIT has two IP ranges, {} given", args.filter.len());
    }
    for (n, range) in args.filter.iter().enumerate() {
        let (a, b) = range
            .split_once('-')
            .and_then(|(a, b)| Some((hex(a)?, hex(b)?)))
            .filter(|(a, b)| a < b)
            .with_context(|| format!("--filter {range}: expected hex START-END with START < END"))?;
        config.lip[n] = a;
        config.lip[n + 2] = b;
    }
    let filter = match args.filter.len() {
        0 => EventId::AlwaysOn,
        1 => EventId::Range0,
        _ => EventId::Either,
    };
    config.events = events(filter, EventId::AlwaysOff);
    Ok(config)
}

/// One line about the processes the program created (the first few named), which ran
/// unrecorded; `None` if it created none.
fn children_warning(children: &[ChildProcess]) -> Option<String> {
    const NAMED: usize = 3;
    let mut named: Vec<String> = children
        .iter()
        .take(NAMED)
        .map(|c| {
            let pid = c.pid.map(|p| format!(", pid {p}")).unwrap_or_default();
            format!("{} at position {}{pid}", c.syscall, c.position)
        })
        .collect();
    if children.len() > NAMED {
        named.push(format!("and {} more", children.len() - NAMED));
    }
    let (what, they) = match children.len() {
        0 => return None,
        1 => ("a process".to_string(), "it"),
        n => (format!("{n} processes"), "they"),
    };
    Some(format!(
        "the program created {what} ({}); {they} ran unrecorded",
        named.join("; ")
    ))
}

/// Runs `rtit record`; returns the exit status to leave with (the program's, or 128 + the
/// signal that stopped rtit).
pub fn run(args: &RecordArgs) -> Result<u8> {
    let interrupted = catch_signals()?;
    match record(args, &interrupted) {
        Ok(status) => Ok(status),
        Err(err) => match interrupted.signal() {
            None => Err(err),
            Some(signal) => {
                // A signal is why it ended, whatever failed after it: the status says so, and
                // so does the message (the backends name it and what they were doing).
                let text = format!("{err:#}");
                let name = interrupted.name().unwrap_or_default();
                if text.contains(&name) {
                    eprintln!("rtit: error: {text}");
                } else {
                    eprintln!("rtit: error: {text} (rtit record received {name} meanwhile)");
                }
                Ok(128 + signal as u8)
            }
        },
    }
}

/// SIGINT (^C), SIGTERM and SIGHUP stop recording: the backend ends the program, and the
/// recording is written, naming the signal. Another one while stopping goes unheard, so the
/// recording still gets written and names the first. Installed before anything else runs:
/// until then a signal ends rtit as it would any program, with nothing started yet.
fn catch_signals() -> Result<Interrupt> {
    let interrupted = Interrupt::new();
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        let handler = interrupted.clone();
        // SAFETY: the handler does one atomic compare-exchange (`Interrupt::raise`): no
        // allocation, no lock, so it is async-signal-safe.
        #[allow(unsafe_code)]
        unsafe { signal_hook::low_level::register(signal, move || handler.raise(signal)) }
            .with_context(|| format!("cannot handle signal {signal}"))?;
    }
    Ok(interrupted)
}

fn record(args: &RecordArgs, interrupted: &Interrupt) -> Result<u8> {
    let config = config(args)?;
    let Some((program, program_args)) = args.command.split_first() else {
        bail!("no program to record")
    };
    let start = match args.start.as_deref() {
        None => StartAt::Entry,
        Some(s) if s.starts_with("0x") => {
            StartAt::Address(hex(s).with_context(|| format!("--start {s}: not an address"))?)
        }
        Some(s) => StartAt::Symbol(s.to_string()),
    };
    let (root, out) = match &args.out {
        Some(dir) => (None, dir.clone()),
        None => {
            let root = default_root();
            std::fs::create_dir_all(&root).with_context(|| format!("cannot create {}", root.display()))?;
            let dir = writer::default_dir(&root, &program.to_string_lossy());
            (Some(root), dir)
        }
    };
    if out.exists() {
        bail!("{} already exists; choose another --out or remove it", out.display());
    }
    // A program rtit cannot record (a script, a 32-bit one) is refused before anything is
    // said of recording it; the backend checks again and says what to warn about.
    let resolved = step::resolve(Path::new(program))?;
    step::check_executable(&resolved, program_args)?;
    let (backend, why) = choose(args.backend, args.qemu.as_deref(), args.verbose);
    // What cannot run is said before "recording with": a --qemu for another backend, or a
    // QEMU that cannot load plugins.
    if args.qemu.is_some() && backend != Backend::Qemu {
        bail!(
            "--qemu names the qemu backend's QEMU; the {} backend runs none",
            format!("{backend:?}").to_lowercase()
        );
    }
    if backend == Backend::Qemu {
        qemu::find::find_qemu(args.qemu.as_deref())?;
    }
    eprintln!("rtit: recording with {why}");
    let progress: Option<Box<dyn FnMut(u64)>> = std::io::stderr().is_terminal().then(|| {
        let started = Instant::now();
        Box::new(move |n: u64| {
            eprint!(
                "\r{}   ",
                super::progress::step_line(n, started.elapsed().as_secs_f64())
            );
            let _ = std::io::stderr().flush();
        }) as Box<dyn FnMut(u64)>
    });
    let module = || {
        args.module.as_deref().map(|name| {
            rtit_recorder::msr::module::module(name, &args.module_root, args.module_file.as_deref(), &args.kallsyms)
                .map_err(anyhow::Error::msg)
        })
    };
    if args.kernel && backend != Backend::Msr {
        bail!("--kernel needs --backend msr (only the hardware traces ring 0)");
    }
    if backend == Backend::Msr {
        // Not an RTIT machine: say so first, in one line.
        rtit_recorder::msr::detect::check_cpu(&writer::cpu_info()).map_err(anyhow::Error::msg)?;
    }
    // Checked before the run: a recording of kernel code without them would not decode.
    let kernel = if args.kernel {
        let kallsyms = kernel::Kallsyms::read(&args.kallsyms).map_err(anyhow::Error::msg)?;
        let found = kernel::sideband(&kallsyms, args.vmlinux.as_deref()).map_err(anyhow::Error::msg)?;
        if found.vmlinux.is_none() {
            let searched: Vec<String> = found.searched.iter().map(|p| p.display().to_string()).collect();
            eprintln!(
                "rtit: no vmlinux ({} do not exist): kernel code outside modules will not decode; give one with --vmlinux",
                searched.join(", ")
            );
        }
        Some(found)
    } else {
        None
    };
    let (mut outcome, next) = match backend {
        Backend::Msr => {
            let module = module().transpose()?;
            let mut sections = vec![".text"];
            if args.init_text {
                sections.push(".init.text");
            }
            let module_ranges = match &module {
                Some(m) => rtit_recorder::msr::module::code_ranges(m, &sections).map_err(anyhow::Error::msg)?,
                None => Vec::new(),
            };
            let mut config = config;
            if args.kernel {
                config.ctl |= ctl::OS;
            }
            let opts = rtit_recorder::msr::record::MsrOptions {
                program: PathBuf::from(program),
                args: program_args.to_vec(),
                aslr: args.aslr,
                start,
                config,
                cpu: args.cpu,
                wrap: match args.wrap {
                    Wrap::Drain => rtit_recorder::msr::collect::WrapMode::Drain,
                    Wrap::Flight => rtit_recorder::msr::collect::WrapMode::FlightRecorder,
                },
                slice: std::time::Duration::from_millis(args.drain_ms.max(1)),
                module,
                module_ranges,
                lock_dir: PathBuf::from("/run"),
                interrupted: interrupted.clone(),
            };
            match rtit_recorder::msr::record::record(opts) {
                Ok(outcome) => (outcome, None),
                Err(line) => bail!("{line}"),
            }
        }
        Backend::Qemu => qemu::launch::record(QemuOptions {
            qemu: args.qemu.clone(),
            program: PathBuf::from(program),
            args: program_args.to_vec(),
            start,
            config,
            truth: args.truth,
            check: args.check_fast_path,
            interrupted: interrupted.clone(),
            anchors: match args.anchor_every {
                None => Some(AnchorEvery::Auto),
                Some(0) => None,
                Some(n) => Some(AnchorEvery::Positions(n)),
            },
            progress: std::io::stderr().is_terminal().then(|| {
                let started = Instant::now();
                Box::new(move |n: u64, bytes: u64| {
                    let seconds = started.elapsed().as_secs_f64();
                    eprint!("\r{}   ", super::progress::qemu_line(n, bytes, seconds));
                    let _ = std::io::stderr().flush();
                }) as Box<dyn FnMut(u64, u64)>
            }),
        })
        .map(|part| (part.outcome, part.next.map(parts::Next::Qemu)))?,
        _ if args.check_fast_path => {
            bail!(
                "--check-fast-path checks the qemu backend's plugin; the {} backend has no fast path",
                format!("{backend:?}").to_lowercase()
            )
        }
        _ => step::record(StepOptions {
            program: PathBuf::from(program),
            args: program_args.to_vec(),
            aslr: args.aslr,
            start,
            config,
            model: ModelOptions::default(),
            truth: args.truth,
            interrupted: interrupted.clone(),
            progress,
        })
        .map(|part| (part.outcome, part.next.map(parts::Next::Step)))?,
    };
    if backend != Backend::Msr {
        // The program loaded the object itself: its sections are listed by now.
        outcome.modules.extend(module().transpose()?);
    }
    if let Some(kernel) = kernel {
        outcome.kernel_text = Some(kernel.text);
        if let Some((path, load)) = &kernel.vmlinux {
            outcome.images.add(&path.display().to_string(), *load);
        }
    }
    let meta = Meta {
        command: args.command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        backend: match backend {
            Backend::Qemu => "qemu",
            Backend::Msr => "msr",
            _ => "step",
        }
        .to_string(),
        aslr: args.aslr,
    };
    // A program that ran execve: the next one's recording, and so on (`parts`).
    let recorded = parts::record_all(outcome, next, meta);
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
    let mut manifest = None;
    for (k, (outcome, meta)) in recorded.iter().enumerate() {
        let dir = parts::dir(&out, k);
        let written = writer::write(&dir, outcome, meta)?;
        if k == 0 {
            if let Some(root) = &root {
                writer::set_latest(root, &out)?;
            }
        }
        for warning in &written.warnings {
            eprintln!("rtit: warning: {warning}");
        }
        if let Some(line) = children_warning(&written.children) {
            eprintln!("rtit: warning: {line}");
        }
        eprintln!(
            "rtit: {} instructions, {} bytes of trace in {}",
            written.instructions,
            written.trace_bytes,
            dir.display()
        );
        if let Some((threads, switches)) = rtit_replay_core::recording::threads_and_switches(&outcome.signals) {
            eprintln!("rtit: {threads} threads, recorded one at a time ({switches} switches)");
        }
        if let EndState::Exec { program, .. } = &written.end {
            eprintln!("rtit: the program ran execve of {program}");
        }
        manifest = Some(written);
    }
    drop(recorded);
    // The last program's end is the run's.
    let manifest = manifest.context("no recording was made")?;
    let late = match (&manifest.end, interrupted.name()) {
        (EndState::Interrupted { .. }, _) => {
            eprintln!("rtit: {}; the recording holds what ran until then", manifest.end);
            None
        }
        // The backend had finished: the recording is whole, and the signal still ends rtit.
        (_, Some(name)) => {
            eprintln!("rtit: received {name} after recording had ended; the recording is complete");
            interrupted.signal()
        }
        (_, None) => None,
    };
    if let EndState::Signaled { .. } = manifest.end {
        // What to look at first: `rtit replay`, then `continue`, stops there.
        eprintln!("rtit: the program was {}", manifest.end);
    }
    if args.check_fast_path {
        // A difference would have failed the recording.
        eprintln!("rtit: --check-fast-path: every byte is what the unit model wrote one instruction at a time");
    }
    let status = match &manifest.end {
        EndState::Exited { code } => *code as u8,
        EndState::Signaled { signal, .. } => 128 + *signal as u8,
        EndState::Interrupted { .. } => 128 + interrupted.signal().unwrap_or(SIGINT) as u8,
        // The next program's recording failed (said above).
        EndState::Exec { .. } => 1,
        EndState::Unsupported { .. } => {
            // The recording ends there; the program's own status is what scripts see, as
            // when it is recorded whole (1 if it is not known).
            eprintln!("rtit: recording {}", manifest.end);
            manifest.end.program_status().unwrap_or(1)
        }
    };
    Ok(late.map_or(status, |signal| 128 + signal as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_children_line_names_the_first_few_and_counts_the_rest() {
        assert_eq!(children_warning(&[]), None);
        let child = |position, pid| ChildProcess {
            position,
            syscall: "fork".into(),
            pid,
        };
        assert_eq!(
            children_warning(&[child(12, Some(345))]).as_deref(),
            Some("the program created a process (fork at position 12, pid 345); it ran unrecorded")
        );
        let five: Vec<_> = (1..=5).map(|i| child(i * 10, (i != 2).then_some(i as i64))).collect();
        assert_eq!(
            children_warning(&five).as_deref(),
            Some(
                "the program created 5 processes (fork at position 10, pid 1; fork at position 20; \
                 fork at position 30, pid 3; and 2 more); they ran unrecorded"
            )
        );
    }
}

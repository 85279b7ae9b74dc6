//! The launching side of the qemu backend: finds `qemu-x86_64` and the plugin, runs the
//! program under them, and turns the plugin's report into an [`Outcome`].

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::error::Phase;
pub use super::error::QemuError;
use super::find::{find_plugin, find_qemu};
use super::part::{io, Session};
pub use super::part::{Next, Part};
use super::report::Args;
use super::stop::StopPipe;
use crate::model::RtitConfig;
use crate::step::{check_executable, resolve, StartAt};
use crate::trace_bytes::ScratchDir;

/// What to record and how.
pub struct QemuOptions {
    /// The `qemu-x86_64` to run (`--qemu`); else as `find::find_qemu` finds one.
    pub qemu: Option<PathBuf>,
    /// The program (found on PATH if it has no slash).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Where tracing starts.
    pub start: StartAt,
    /// RTIT configuration (RTIT_CR3_MATCH is set here).
    pub config: RtitConfig,
    /// Keep every retired instruction address.
    pub truth: bool,
    /// Check the plugin's fast path against the unit model one instruction at a time.
    pub check: bool,
    /// Told now and then, once recording has gone on for a second, how many instructions
    /// the trace holds and how many bytes it has (a progress line).
    pub progress: Option<Box<dyn FnMut(u64, u64)>>,
    /// Set by a signal handler when recording was interrupted.
    pub interrupted: crate::interrupt::Interrupt,
    /// Take an anchor every this many positions (a whole state: registers and the pages
    /// written since the one before), where the kernel lets the plugin track written pages.
    pub anchors: Option<super::gdbstub::AnchorEvery>,
}

/// Records a program under QEMU with the plugin. After SIGINT, SIGTERM or SIGHUP (in
/// `opts.interrupted`), the outcome is a recording marked interrupted, or an error naming the
/// signal and what rtit was doing, with QEMU ended and the scratch directory removed.
pub fn record(mut opts: QemuOptions) -> Result<Part, QemuError> {
    let mut phase = Phase::Launching;
    let result = launch(&mut opts, &mut phase);
    result.map_err(|e| opts.interrupted.explain(e, || phase.during(&opts.start)))
}

fn launch(opts: &mut QemuOptions, phase: &mut Phase) -> Result<Part, QemuError> {
    let qemu = find_qemu(opts.qemu.as_deref())?;
    let plugin = find_plugin().ok_or(QemuError::NoPlugin)?;
    let program = resolve(&opts.program)?;
    let warnings = check_executable(&program, &opts.args)?;
    // `--start SYMBOL` applies to every program of the run that defines it: a script's
    // interpreter that does not is recorded whole (as the plugin records it), if it runs
    // another program.
    let elsewhere = match &opts.start {
        StartAt::Symbol(name) => crate::exec::start_elsewhere(&program, &opts.args, name)
            .map_err(|_| QemuError::StartNotDefined {
                at: name.clone(),
                program: program.display().to_string(),
            })?
            .map(|interpreter| (name.clone(), interpreter)),
        _ => None,
    };
    // A script runs as the kernel runs it: its interpreter, with its path and arguments.
    let mut argv = vec![program.clone().into_os_string()];
    argv.extend(opts.args.iter().cloned());
    let cwd = std::env::current_dir().unwrap_or_default();
    let run = crate::exec::interpreters(&program, &argv, &cwd).map_err(|problem| crate::step::StepError::Program {
        program: program.display().to_string(),
        problem,
    })?;
    let program = crate::exec::absolute(&run.file, &cwd);
    // What runs killed before left (their drop never ran); then this run's.
    let tmp = std::env::temp_dir();
    super::scratch::remove_left_by_ended_runs(&tmp);
    let dir = super::scratch::path(&tmp, std::process::id());
    let scratch = ScratchDir::create(dir.clone()).map_err(io(&dir))?;
    let first = if elsewhere.is_some() {
        StartAt::Entry
    } else {
        opts.start.clone()
    };
    let session = spawn(&qemu, &plugin, &program, &run.argv[1..], opts, scratch.path(), phase)?;
    *phase = Phase::Connecting;
    // The trace file stays in the scratch directory, which the outcome owns from here: the
    // writer moves it into the recording.
    let mut part = session.part(scratch, &first, &program, phase)?;
    // The program's warnings first, then the recording's (they were dropped).
    part.outcome.warnings.splice(0..0, warnings);
    if let Some((name, interpreter)) = elsewhere {
        let named = interpreter.display().to_string();
        if part.next.is_none() {
            return Err(QemuError::StartNotDefined {
                at: name,
                program: named,
            });
        }
        part.outcome.warnings.push(crate::exec::start_warning(&name, &named));
    }
    Ok(part)
}

/// Starts QEMU on `program` with `args` under the plugin, recording into `dir`.
fn spawn(
    qemu: &Path,
    plugin: &Path,
    program: &Path,
    args: &[OsString],
    opts: &mut QemuOptions,
    dir: &Path,
    phase: &Phase,
) -> Result<Session, QemuError> {
    let cr3 = (u64::from(std::process::id()) << 12) & ((1 << 36) - 1);
    let pipe = StopPipe::new()?;
    let config = RtitConfig {
        cr3_match: cr3,
        ..opts.config
    };
    let plugin_args = Args {
        out: dir.display().to_string(),
        ctl: config.ctl,
        events: config.events,
        pkt_cnt: config.pkt_cnt,
        cr3,
        lip: config.lip,
        start: match &opts.start {
            StartAt::Entry => None,
            StartAt::Symbol(s) => Some(s.clone()),
            StartAt::Address(a) => Some(format!("{a:#x}")),
        },
        exe: Some(std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf())),
        truth: opts.truth,
        argc: args.len() as u64 + 1,
        stop: Some(pipe.fd()),
        check: opts.check,
        anchors: opts.anchors.is_some(),
        plugin: Some(plugin.to_path_buf()),
    };
    // QEMU's gdbstub waits on a socket before the first instruction: rtit reads there the
    // registers the plugin cannot read, where tracing starts, at signal handlers' entries,
    // and samples for `--truth` (see `super::gdbstub`).
    let theirs = std::env::var_os("LD_PRELOAD");
    let (qemu_args, preload) = super::relaunch::arguments(plugin, &plugin_args, None, program, args, theirs.as_deref());
    let mut cmd = Command::new(qemu);
    cmd.args(qemu_args).env("LD_PRELOAD", preload);
    // QEMU writes a core file of the guest into the working directory when it dies of a
    // signal, unless the core size limit is 0. QEMU stays in rtit's process group, so an
    // interactive program keeps the terminal.
    let stop_fd = pipe.fd();
    #[allow(unsafe_code)]
    // SAFETY: setrlimit and fcntl are async-signal-safe and touch no state of the parent.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0)
                .map_err(std::io::Error::from)?;
            StopPipe::inherit(stop_fd)
        });
    }
    // QEMU dies with rtit, even of SIGKILL. This thread waits for it (`pipe.wait`), so it
    // outlives QEMU, as the tie needs.
    crate::tether::die_with_this_thread(&mut cmd);
    // A signal already: QEMU would only be started to be stopped.
    opts.interrupted.check(|| phase.during(&opts.start))?;
    let child = cmd.spawn().map_err(io(qemu))?;
    // QEMU's CPUID table, found while the program runs. In a process group of its own, so
    // that a Ctrl-C at the terminal does not end it.
    let cpuid = Some(super::cpuid::Probe::start(qemu, dir));
    Ok(Session {
        child,
        pipe,
        cpuid,
        table: None,
        progress: opts.progress.take(),
        interrupted: opts.interrupted.clone(),
        config,
        cr3,
        truth: opts.truth,
        check: opts.check,
        anchors: opts.anchors,
    })
}

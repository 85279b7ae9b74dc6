//! Following `execve` under ptrace (issue 43): the kernel runs the new program in the same
//! process, and its exec event (PTRACE_O_TRACEEXEC) stops it at the new program's first
//! instruction. The recording of the program that called execve ends with the call, as at
//! `exit_group`; the new program's recording starts there ([`Next::record`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};

use super::tracee::{Regs, Tracee};
use super::{StartAt, StepError, StepOptions};
use crate::exec::{absolute, classify, read_call, Target};
use crate::outcome::Outcome;

/// One program's recording, and the next program's to make if it ran execve.
pub struct Part {
    /// This program's recording.
    pub outcome: Outcome,
    /// The program it ran, stopped at its first instruction.
    pub next: Option<Next>,
}

/// A program that execve started, not recorded yet.
pub struct Next {
    tracee: Tracee,
    opts: StepOptions,
    /// Its command line, as the kernel gave it.
    pub argv: Vec<OsString>,
}

impl Next {
    pub(super) fn new(tracee: Tracee, opts: StepOptions, argv: Vec<OsString>) -> Self {
        Self { tracee, opts, argv }
    }

    /// Records it, from its first instruction, or from `--start`'s symbol where it defines it.
    pub fn record(self) -> Result<Part, StepError> {
        let Self { mut tracee, opts, .. } = self;
        tracee.after_exec()?;
        let regs = tracee.regs()?;
        // The single step that ran the `syscall` is not over: its trap comes at the new
        // program's first instruction, before it runs (the trap flag's trap follows the
        // instruction it stepped). Taken here, it would otherwise retire that instruction
        // twice.
        let pid = tracee.pid;
        ptrace::step(pid, None).map_err(|e| StepError::Ptrace(format!("PTRACE_SINGLESTEP: {e}")))?;
        match waitpid(pid, Some(WaitPidFlag::__WALL)) {
            Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) if tracee.regs()?.rip == regs.rip => {}
            other => {
                return Err(StepError::Ptrace(format!(
                    "after execve, the trap of the step that ran it was expected at {:#x}, before the new program's first instruction; got {other:?}",
                    regs.rip
                )))
            }
        }
        // `--start SYMBOL` applies to every program that defines it; an address, to the first.
        let start = match &opts.start {
            StartAt::Symbol(name) if crate::exec::defines(&exe(&tracee), name) => opts.start.clone(),
            _ => StartAt::Entry,
        };
        let regs = match start {
            StartAt::Entry => regs,
            _ => super::run_to(&tracee, &start, super::tracee::OPTIONS, &opts.interrupted)?,
        };
        super::record_from(tracee, regs, opts, Vec::new())
    }
}

/// The program `tracee` runs, as the kernel names it.
fn exe(tracee: &Tracee) -> PathBuf {
    std::fs::read_link(format!("/proc/{}/exe", tracee.pid)).unwrap_or_default()
}

/// What the execve or execveat (`nr`) the tracee is about to make with registers `regs`
/// runs, and the file it names (absolute).
pub(super) fn target(tracee: &Tracee, nr: u64, regs: &Regs) -> (Target, Option<PathBuf>) {
    let args = [regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9];
    let call = match read_call(nr, args, |at, buf| tracee.read(at, buf)) {
        Ok(call) => call,
        Err(target) => return (target, None),
    };
    let cwd = std::fs::read_link(format!("/proc/{}/cwd", tracee.pid)).unwrap_or_else(|_| PathBuf::from("/"));
    let path = absolute(&call.path, &cwd);
    (classify(Path::new(&call.path), &call.argv, &cwd), Some(path))
}

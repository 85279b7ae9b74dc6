//! Running the program natively to where tracing starts (`--start`), for the step and msr
//! backends. A thread created on the way is noticed (PTRACE_O_TRACECLONE): the recording
//! could not tell that thread's writes from the traced one's, and an untraced thread that
//! reached the breakpoint would die of its SIGTRAP, so the program is let run on unrecorded
//! instead, and the start is refused, naming why (issue 43).

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::tracee::{Regs, Tracee};
use super::{sideband, StartAt, StepError};
use crate::interrupt::Interrupt;

/// Runs to `at` natively with a breakpoint; returns the registers there. `options` are the
/// ptrace options the backend set (PTRACE_O_TRACECLONE is added on the way). A signal to rtit
/// meanwhile (`interrupted`) kills the program: nothing was traced yet.
pub(crate) fn run_to(
    tracee: &Tracee,
    at: &StartAt,
    options: ptrace::Options,
    interrupted: &Interrupt,
) -> Result<Regs, StepError> {
    let addr = match at {
        StartAt::Entry => return tracee.regs(),
        StartAt::Address(a) => *a,
        StartAt::Symbol(name) => sideband::symbol_address(tracee, name)?,
    };
    let label = match at {
        StartAt::Symbol(s) => s.clone(),
        _ => format!("{addr:#x}"),
    };
    let mut original = [0u8; 1];
    if tracee.read(addr, &mut original) != 1 {
        return Err(StepError::Start {
            at: label,
            problem: format!("{addr:#x} is not mapped"),
        });
    }
    ptrace::setoptions(tracee.pid, options | ptrace::Options::PTRACE_O_TRACECLONE)
        .map_err(|e| StepError::Ptrace(format!("PTRACE_SETOPTIONS: {e}")))?;
    tracee.write(addr, &[0xcc])?;
    let mut signal = None;
    loop {
        ptrace::cont(tracee.pid, signal.take()).map_err(|e| StepError::Ptrace(format!("PTRACE_CONT: {e}")))?;
        match tracee.wait_unless(interrupted, || format!("running the program to {label}"))? {
            WaitStatus::Stopped(_, Signal::SIGTRAP) => {
                let mut regs = tracee.regs()?;
                if regs.rip == addr + 1 {
                    tracee.write(addr, &original)?;
                    regs.rip = addr;
                    tracee.set_regs(regs)?;
                    return Ok(regs);
                }
                signal = Some(Signal::SIGTRAP);
            }
            WaitStatus::PtraceEvent(_, _, event) if event == ptrace::Event::PTRACE_EVENT_CLONE as i32 => {
                // (A fork's clone, with SIGCHLD as its exit signal, makes no such event
                // without PTRACE_O_TRACEFORK: this is a thread.)
                let thread = ptrace::getevent(tracee.pid)
                    .map(|tid| Pid::from_raw(tid as i32))
                    .map_err(|e| StepError::Ptrace(format!("PTRACE_GETEVENTMSG: {e}")))?;
                tracee.write(addr, &original)?;
                // The new thread starts traced, stopped: let it go too.
                let _ = waitpid(thread, Some(WaitPidFlag::__WALL));
                let _ = ptrace::detach(thread, None);
                let end = super::run_on(tracee.pid, interrupted);
                let then = end.map_or_else(|| "its end is unknown".to_string(), |e| e.as_afterwards());
                return Err(StepError::Start {
                    at: label,
                    problem: format!(
                        "the program created a thread before reaching it (a thread that ran untraced \
                         cannot be followed from there: record from an earlier point, such as main); \
                         it ran on unrecorded and {then}"
                    ),
                });
            }
            WaitStatus::PtraceEvent(_, _, _) => {}
            WaitStatus::Stopped(_, sig) => signal = Some(sig),
            other => {
                return Err(StepError::Start {
                    at: label,
                    problem: format!("the program ended before reaching it ({other:?})"),
                })
            }
        }
    }
}

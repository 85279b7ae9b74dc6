//! A program whose recording stopped at something rtit cannot follow yet (a thread, execve)
//! runs on to its own end, unrecorded, with its output intact (issue 43: a refused program is
//! not harmed): it is let go from ptrace where it stands, and its end is waited for.

use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use rtit_replay_core::recording::EndState;

use crate::interrupt::Interrupt;

/// How long the program has to end after rtit passed it the signal that asked rtit to stop,
/// before it is killed.
const GRACE: Duration = Duration::from_secs(5);

/// Lets program `pid` (stopped under ptrace, with no signal pending) run on untraced, and
/// waits for its end; `None` if it cannot be told. A signal that asks rtit to stop meanwhile
/// is passed on to the program, as a wrapper passes it on; the program is killed if it has
/// not ended [`GRACE`] later.
pub fn run_on(pid: Pid, interrupted: &Interrupt) -> Option<EndState> {
    ptrace::detach(pid, None).ok()?;
    let mut passed: Option<Instant> = None;
    loop {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => return Some(EndState::Exited { code }),
            Ok(WaitStatus::Signaled(_, signal, _)) => {
                return Some(EndState::Signaled {
                    signal: signal as i32,
                    name: signal.as_str().to_string(),
                    address: None,
                    ip: None,
                })
            }
            Ok(_) => {}
            Err(_) => return None,
        }
        match (passed, interrupted.signal().and_then(|s| Signal::try_from(s).ok())) {
            (None, Some(signal)) => {
                let _ = kill(pid, signal);
                passed = Some(Instant::now());
            }
            (Some(when), _) if when.elapsed() > GRACE => {
                let _ = kill(pid, Signal::SIGKILL);
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

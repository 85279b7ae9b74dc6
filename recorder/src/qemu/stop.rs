//! Ending a qemu recording on a signal: `rtit record` handles SIGINT, SIGTERM and SIGHUP
//! itself (they only set a flag), and QEMU never hears of them, so it asks the plugin through
//! a pipe. The plugin ends the recording where the program is, even inside a blocking system
//! call, and ends QEMU; if it does not within [`GRACE`], rtit kills QEMU and says so.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};

use super::report::HIGH_FD;
use crate::interrupt::Interrupt;

/// How long the plugin has, after being asked, to write the recording and end QEMU.
pub const GRACE: Duration = Duration::from_secs(5);

/// How often rtit looks at QEMU and at the signal flag while it waits: QEMU's end is seen
/// a millisecond after it on average (every 10 ms, 5 ms of a 0.5 s recording went by
/// before rtit saw it, issue 20), for some 500 wake-ups a second.
const POLL: Duration = Duration::from_millis(2);

/// A failure to stop QEMU.
#[derive(Debug, thiserror::Error)]
pub enum StopError {
    /// The pipe or the wait failed.
    #[error("the pipe to the QEMU plugin: {0}")]
    Io(#[from] std::io::Error),
    /// The plugin did not end the recording in time.
    #[error("the QEMU plugin did not end the recording within {seconds} s of {signal}; rtit killed qemu-x86_64, so there is no recording")]
    Killed {
        /// The signal rtit received (`SIGTERM`).
        signal: String,
        /// The grace it had.
        seconds: f64,
    },
}

/// The pipe on which rtit asks the plugin to stop. The read end sits at a high descriptor
/// number ([`HIGH_FD`] or above), so the program's own descriptors are numbered as without
/// rtit; only QEMU inherits it.
pub struct StopPipe {
    /// Closed here once QEMU has it.
    read: Option<OwnedFd>,
    write: OwnedFd,
}

impl StopPipe {
    /// A new pipe; both ends close on exec until [`Self::inherit`] opens the read end to QEMU.
    pub fn new() -> Result<Self, StopError> {
        let (low, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
        let fd = fcntl(low.as_raw_fd(), FcntlArg::F_DUPFD_CLOEXEC(HIGH_FD)).map_err(std::io::Error::from)?;
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        #[allow(unsafe_code)]
        let read = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        Ok(Self {
            read: Some(read),
            write,
        })
    }

    /// The descriptor number QEMU finds the read end at (`stop=` of the plugin).
    pub fn fd(&self) -> RawFd {
        self.read.as_ref().map_or(-1, |r| r.as_raw_fd())
    }

    /// Between fork and exec of QEMU: keeps the read end open across exec. Only a plain
    /// `fcntl`, so it is async-signal-safe.
    pub fn inherit(fd: RawFd) -> std::io::Result<()> {
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty()))
            .map(drop)
            .map_err(std::io::Error::from)
    }

    /// Waits for QEMU to end, calling `tick` every few milliseconds meanwhile (a progress
    /// line; it returns true when the recording under way ended while QEMU goes on, on the
    /// program an execve ran: then `None`). When `interrupted` is raised, writes the signal's
    /// number to the plugin once (a second signal asks nothing more, so the recording under
    /// way is not lost), and kills QEMU if it is still running `grace` later ([`GRACE`]).
    pub fn wait(
        &mut self,
        child: &mut Child,
        interrupted: &Interrupt,
        grace: Duration,
        tick: &mut dyn FnMut() -> bool,
    ) -> Result<Option<ExitStatus>, StopError> {
        drop(self.read.take());
        let mut asked: Option<(Instant, i32)> = None;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(Some(status));
            }
            if tick() {
                return Ok(None);
            }
            match (asked, interrupted.signal()) {
                (None, Some(signal)) => {
                    // A plugin that has gone already closed its end: EPIPE, nothing to do.
                    let byte = u8::try_from(signal).unwrap_or(u8::MAX);
                    let _ = nix::unistd::write(self.write.as_fd(), &[byte]);
                    asked = Some((Instant::now(), signal));
                }
                (Some((when, signal)), _) if when.elapsed() > grace => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(StopError::Killed {
                        signal: nix::sys::signal::Signal::try_from(signal)
                            .map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_string()),
                        seconds: grace.as_secs_f64(),
                    });
                }
                _ => {}
            }
            std::thread::sleep(POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::process::{Command, Stdio};

    use super::*;

    fn spawn(pipe: &StopPipe, script: &str) -> Child {
        let fd = pipe.fd();
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script.replace("FD", &fd.to_string()));
        cmd.stdout(Stdio::piped());
        // SAFETY: only the async-signal-safe fcntl of `inherit` runs between fork and exec.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(move || StopPipe::inherit(fd));
        }
        cmd.spawn().expect("sh")
    }

    /// The child finds the read end at the number the plugin is given, above the program's
    /// descriptors, and reads the signal's number from it.
    #[test]
    fn the_signal_number_reaches_the_child_at_a_high_descriptor() {
        let mut pipe = StopPipe::new().expect("pipe");
        assert!(pipe.fd() >= HIGH_FD);
        let mut child = spawn(&pipe, "exec od -An -tu1 -N1 /proc/self/fd/FD");
        let interrupted = Interrupt::new();
        interrupted.raise(15);
        let status = pipe
            .wait(&mut child, &interrupted, Duration::from_secs(30), &mut || false)
            .expect("the child ends by itself")
            .expect("QEMU's end, not an execve's");
        assert!(status.success(), "{status}");
        let mut out = String::new();
        child
            .stdout
            .take()
            .expect("stdout")
            .read_to_string(&mut out)
            .expect("read");
        assert_eq!(out.trim(), "15");
    }

    /// A child that does not answer is killed once the grace is over, and rtit says so.
    #[test]
    fn a_child_that_does_not_stop_is_killed_after_the_grace() {
        let mut pipe = StopPipe::new().expect("pipe");
        let mut child = spawn(&pipe, "exec sleep 100");
        let interrupted = Interrupt::new();
        interrupted.raise(2);
        let err = pipe
            .wait(&mut child, &interrupted, Duration::from_millis(200), &mut || false)
            .expect_err("it never stops by itself");
        assert!(
            matches!(&err, StopError::Killed { signal, .. } if signal == "SIGINT"),
            "{err}"
        );
        let status = child.try_wait().expect("wait").expect("it was reaped");
        assert_eq!(status.signal(), Some(9), "killed");
    }

    /// Without a signal, waiting is plain waiting; nothing is written to the pipe.
    #[test]
    fn without_a_signal_the_child_runs_to_its_end() {
        let mut pipe = StopPipe::new().expect("pipe");
        let mut child = spawn(&pipe, "exit 7");
        let status = pipe
            .wait(&mut child, &Interrupt::new(), Duration::from_millis(1), &mut || false)
            .expect("ends");
        assert_eq!(status.map(|s| s.code()), Some(Some(7)));
    }

    /// A part that ends while the process goes on (an execve the plugin followed): the wait
    /// returns without a status, and the process is waited for again later.
    #[test]
    fn a_tick_that_says_the_part_ended_returns_with_the_child_running() {
        let mut pipe = StopPipe::new().expect("pipe");
        let mut child = spawn(&pipe, "sleep 0.3; exit 3");
        let mut ticks = 0;
        let status = pipe
            .wait(&mut child, &Interrupt::new(), Duration::from_millis(1), &mut || {
                ticks += 1;
                ticks == 3
            })
            .expect("waited");
        assert_eq!(status, None, "returned at the third tick");
        let status = pipe
            .wait(&mut child, &Interrupt::new(), Duration::from_millis(1), &mut || false)
            .expect("ends");
        assert_eq!(status.map(|s| s.code()), Some(Some(3)));
    }
}

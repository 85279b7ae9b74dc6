//! The processes `rtit record` starts die with it. A SIGKILL to rtit (`kill -9`, the OOM
//! killer, a CI job's timeout) runs no destructor and no handler, so nothing rtit does on its
//! way out can end them: `qemu-x86_64` would run the program to its end, writing its trace
//! into a scratch directory that nobody removes. The kernel ends them instead: between fork
//! and exec, each child asks for SIGKILL when its parent goes (`PR_SET_PDEATHSIG`, which
//! survives the exec of an ordinary program).
//!
//! The kernel sends it when the *thread* that forked the child exits, even if the process
//! lives on: a child must be started from a thread that outlives it (rtit's main thread, or
//! a thread that waits for the child before it ends).

use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// Makes the child that `cmd` starts die of SIGKILL when the calling thread exits (with the
/// process, or alone: see the module's note). Adds to the `pre_exec` steps `cmd` has.
pub fn die_with_this_thread(cmd: &mut Command) -> &mut Command {
    let parent = nix::unistd::getpid();
    // SAFETY: `tie` makes two plain system calls (prctl, getppid) and allocates nothing, so
    // it is async-signal-safe, as code between fork and exec must be.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || tie(parent))
    }
}

/// In the child, before exec: asks for SIGKILL at the parent's death. A parent that died
/// between fork and this call will send nothing (the child has been handed to another
/// process already, so `getppid` differs): the child gives up instead of running unowned.
fn tie(parent: Pid) -> std::io::Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    if nix::unistd::getppid() != parent {
        return Err(nix::errno::Errno::ESRCH.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};

    use super::*;

    /// A child started from a thread that then ends is killed at once, although the process
    /// that started it lives on (and reaps it here): the kernel's rule this module follows.
    /// An untied `sleep 30` would still be asleep.
    #[test]
    fn a_child_dies_when_the_thread_that_started_it_ends() {
        let mut child = std::thread::spawn(|| {
            die_with_this_thread(Command::new("sleep").arg("30"))
                .spawn()
                .expect("sleep")
        })
        .join()
        .expect("the starting thread");
        let bound = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > bound {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the child outlived the thread that started it");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "{status}");
    }

    /// While the starting thread lives, the child runs as it would untied.
    #[test]
    fn a_child_of_a_living_thread_runs_to_its_end() {
        let status = die_with_this_thread(Command::new("sh").args(["-c", "exit 3"]))
            .status()
            .expect("sh");
        assert_eq!(status.code(), Some(3));
    }
}

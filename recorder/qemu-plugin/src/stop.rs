//! The stop thread: blocks on the pipe `rtit record` writes a signal's number to when it is
//! asked to stop (see `rtit_recorder::qemu::stop`), then ends the recording and QEMU. The
//! vCPU does it at its next block, where what ran is exact; when the program sits in a system
//! call there is no next block, so this thread does it, under the plugin's lock, which keeps
//! the vCPU out of every callback meanwhile.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::published::STOP;

/// How long the vCPU has to reach a block before this thread ends the recording itself
/// (within `rtit_recorder::qemu::stop::GRACE`, after which rtit kills QEMU).
const VCPU_GRACE: Duration = Duration::from_secs(2);

/// How often the thread looks whether the program is in a system call meanwhile.
const POLL: Duration = Duration::from_millis(5);

/// Starts the thread on descriptor `fd`. Called at install, before the plugin notes QEMU's
/// own memory map, so that the thread's stack is not taken for the program's memory.
pub fn start(fd: RawFd) -> Result<(), String> {
    // SAFETY: `fd` is the pipe rtit opened for QEMU and nothing else in QEMU owns it.
    let pipe = unsafe { OwnedFd::from_raw_fd(fd) };
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))
        .map_err(|e| format!("stop={fd}: {e}"))?;
    crate::shared::spawn_quiet("rtit-stop", 64 << 10, move || wait(pipe))
}

fn wait(pipe: OwnedFd) {
    let mut byte = [0u8; 1];
    loop {
        match nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&pipe), &mut byte) {
            Ok(1) => break,
            Err(nix::errno::Errno::EINTR) => {}
            // rtit is gone (end of file) or the pipe is broken: nobody to stop for.
            _ => return,
        }
    }
    let signal = i32::from(byte[0]).max(1);
    STOP.store(signal, Ordering::Relaxed);
    crate::published::close(crate::published::STOPPING);
    let deadline = Instant::now() + VCPU_GRACE;
    loop {
        {
            let mut guard = crate::shared::lock();
            let Some(plugin) = guard.as_mut() else {
                // The program ended meanwhile and the plugin finished; or the recording
                // stopped before what it cannot follow and the program runs on unrecorded:
                // the signal is the program's then, as a wrapper passes it on.
                if crate::published::inert() {
                    // SAFETY: kill with plain integer arguments, to this process.
                    unsafe { nix::libc::syscall(nix::libc::SYS_kill, std::process::id(), signal) };
                }
                return;
            };
            if plugin.in_syscall() || !plugin.tracing() || Instant::now() >= deadline {
                // What ran until now, then the end.
                plugin.take_blocks(usize::MAX);
                plugin.interrupt_now(signal);
            }
        }
        std::thread::sleep(POLL);
    }
}

//! What runs of rtit killed by SIGKILL leave behind (no exit path of theirs ran): directories
//! named with their process id (the qemu backend's scratch, the writer's unfinished
//! recording). A later run removes those whose process is gone.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::unistd::Pid;

/// Removes from `dir` the directories whose name `pid_of` reads a process id from and whose
/// process has ended: a directory (not a link to one), this user's, and no process with that
/// id. A process id in use again keeps its directory until that process is gone too;
/// anything else in `dir` stays. Returns what was removed.
pub fn remove_ended(dir: &Path, pid_of: impl Fn(&str) -> Option<Pid>) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let me = nix::unistd::geteuid().as_raw();
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(&pid_of) else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if meta.is_dir() && meta.uid() == me && !running(pid) && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed
}

/// A process id written as rtit writes one (no sign, no leading zero), all of `digits`.
pub fn pid_after(digits: &str) -> Option<Pid> {
    let pid: i32 = digits.parse().ok()?;
    (pid > 0 && pid.to_string() == digits).then(|| Pid::from_raw(pid))
}

/// Whether a process `pid` exists (another user's counts: the kernel says EPERM for it).
fn running(pid: Pid) -> bool {
    nix::sys::signal::kill(pid, None) != Err(Errno::ESRCH)
}

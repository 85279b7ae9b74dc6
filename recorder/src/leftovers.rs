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

/// Whether a process `pid` runs (another user's counts: the kernel says EPERM for it). A
/// zombie has ended: a killed rtit whose parent has not reaped it yet is one.
fn running(pid: Pid) -> bool {
    if nix::sys::signal::kill(pid, None) == Err(Errno::ESRCH) {
        return false;
    }
    // The state follows the command's name, in parentheses that may hold anything.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
    !matches!(state, Some('Z' | 'X'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_has_ended_and_a_live_process_runs() {
        let mut child = std::process::Command::new("true").spawn().expect("true");
        let pid = Pid::from_raw(child.id() as i32);
        // Not reaped yet: a zombie once it has exited.
        while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z")) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!running(pid), "a zombie");
        child.wait().expect("reap");
        assert!(!running(pid), "gone");
        assert!(running(nix::unistd::getpid()));
    }
}

//! The qemu backend's scratch directory, `$TMPDIR/rtit-qemu-PID`: the plugin writes the trace
//! and its logs there while the program runs (155 MB for a 4 s program), and the writer moves
//! the trace into the recording. rtit removes it on every way out it sees (a
//! [`crate::trace_bytes::ScratchDir`] is removed when dropped); SIGKILL is the one it cannot
//! see, so each run first removes what killed runs left: the directories of that name whose
//! process is gone.

use std::path::{Path, PathBuf};

use nix::unistd::Pid;

const PREFIX: &str = "rtit-qemu-";

/// The scratch directory of the run with process id `pid`, under `tmp`.
pub fn path(tmp: &Path, pid: u32) -> PathBuf {
    tmp.join(format!("{PREFIX}{pid}"))
}

/// Removes from `tmp` the scratch directories of runs that have ended: named exactly as
/// [`path`] names them, a directory (not a link to one), this user's, and no process with
/// that id ([`crate::leftovers`]). Returns what was removed.
pub fn remove_left_by_ended_runs(tmp: &Path) -> Vec<PathBuf> {
    crate::leftovers::remove_ended(tmp, run_pid)
}

/// The process id in a scratch directory's name, written as rtit writes it (no sign, no
/// leading zero), or `None` for any other name.
fn run_pid(name: &str) -> Option<Pid> {
    crate::leftovers::pid_after(name.strip_prefix(PREFIX)?)
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// The id of a process that has ended (and been reaped).
    fn ended() -> u32 {
        let mut child = Command::new("true").spawn().expect("true");
        child.wait().expect("wait");
        child.id()
    }

    #[test]
    fn only_the_directories_of_ended_runs_are_removed() {
        let tmp = std::env::temp_dir().join(format!("rtit-scratch-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).expect("tmp");
        let (dead, linked, file, theirs) = (ended(), ended(), ended(), ended());
        let killed = path(&tmp, dead);
        std::fs::create_dir(&killed).expect("dir");
        std::fs::write(killed.join("trace.rtit"), b"left over").expect("a file in it");
        let living = path(&tmp, std::process::id());
        std::fs::create_dir(&living).expect("dir");
        let elsewhere = tmp.join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("dir");
        std::os::unix::fs::symlink(&elsewhere, path(&tmp, linked)).expect("link");
        std::fs::write(path(&tmp, file), b"").expect("a file of the name");
        let others = [
            format!("rtit-qemu-0{dead}"),
            format!("rtit-qemu-{dead}x"),
            format!("other-{dead}"),
        ];
        for name in &others {
            std::fs::create_dir(tmp.join(name)).expect("dir");
        }
        let root = nix::unistd::geteuid().is_root();
        if root {
            std::fs::create_dir(path(&tmp, theirs)).expect("dir");
            let nobody = nix::unistd::Uid::from_raw(65534);
            nix::unistd::chown(&path(&tmp, theirs), Some(nobody), None).expect("chown");
        }

        assert_eq!(remove_left_by_ended_runs(&tmp), vec![killed.clone()]);
        assert!(!killed.exists());
        assert!(living.is_dir(), "a running process's");
        assert!(
            elsewhere.is_dir() && path(&tmp, linked).is_symlink(),
            "a link is not followed"
        );
        assert!(path(&tmp, file).is_file());
        for name in &others {
            assert!(tmp.join(name).is_dir(), "{name} is not a name rtit gives");
        }
        if root {
            assert!(path(&tmp, theirs).is_dir(), "another user's");
        }
        std::fs::remove_dir_all(&tmp).expect("clean up");
    }

    #[test]
    fn a_missing_directory_removes_nothing() {
        assert!(remove_left_by_ended_runs(Path::new("/no/such/rtit/tmp")).is_empty());
    }
}

//! The `/proc` files gdb reads of the process, made from the recording as it stands at the
//! current position: `/proc/PID/maps` (and `/proc/PID/task/TID/maps`), which gdb reads when it
//! connects (it warned "unable to open /proc file '/proc/1/task/1/maps'" at every replay) and
//! for `info proc mappings`, and `/proc/PID/cmdline` with the links `exe` and `cwd` for
//! `info proc`. Anything else under `/proc` does not exist.

use rtit_replay_core::recording::{Mapping, Maps};

/// A `/proc` file gdb may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcFile {
    /// The memory map.
    Maps,
    /// The command line.
    Cmdline,
    /// The link to the executable.
    Exe,
    /// The link to the working directory.
    Cwd,
}

impl ProcFile {
    /// Which one `path` names, if any: `/proc/N/maps`, `/proc/N/task/N/maps`,
    /// `/proc/N/cmdline` (N decimal digits).
    pub fn parse(path: &str) -> Option<Self> {
        let rest = path.strip_prefix("/proc/")?;
        let (pid, rest) = rest.split_once('/')?;
        let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !number(pid) {
            return None;
        }
        let rest = match rest.strip_prefix("task/").and_then(|r| r.split_once('/')) {
            Some((tid, file)) if number(tid) => file,
            Some(_) => return None,
            None => rest,
        };
        match rest {
            "maps" => Some(Self::Maps),
            "cmdline" => Some(Self::Cmdline),
            "exe" => Some(Self::Exe),
            "cwd" => Some(Self::Cwd),
            _ => None,
        }
    }
}

/// The memory map at `position` as Linux prints it: the map when tracing started with every
/// change that took effect by then (no device or inode: the recording has none).
pub fn maps_text(maps: &Maps, position: u64) -> String {
    let mut now: Vec<&Mapping> = maps.initial.iter().collect();
    for change in maps.changes.iter().take_while(|c| c.position <= position) {
        now.retain(|m| !change.removed.contains(m));
        now.extend(&change.added);
    }
    now.sort_by_key(|m| m.start);
    let mut text = String::new();
    for m in now {
        let head = format!("{:x}-{:x} {} {:08x} 00:00 0", m.start, m.end, m.perms, m.offset);
        match &m.path {
            // Linux pads the name to the 74th column.
            Some(path) => text += &format!("{head:<72} {path}\n"),
            None => text += &format!("{head}\n"),
        }
    }
    text
}

/// The command line as Linux gives it: each argument followed by a NUL.
pub fn cmdline_bytes(command: &[String]) -> Vec<u8> {
    command.iter().flat_map(|a| a.bytes().chain([0])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtit_replay_core::recording::MapChange;

    fn mapping(start: u64, end: u64, perms: &str, path: Option<&str>) -> Mapping {
        Mapping {
            start,
            end,
            perms: perms.into(),
            offset: 0,
            path: path.map(Into::into),
        }
    }

    #[test]
    fn paths_name_the_files_gdb_asks_for() {
        assert_eq!(ProcFile::parse("/proc/1/task/1/maps"), Some(ProcFile::Maps));
        assert_eq!(ProcFile::parse("/proc/42/maps"), Some(ProcFile::Maps));
        assert_eq!(ProcFile::parse("/proc/42/cmdline"), Some(ProcFile::Cmdline));
        assert_eq!(ProcFile::parse("/proc/1/exe"), Some(ProcFile::Exe));
        assert_eq!(ProcFile::parse("/proc/1/cwd"), Some(ProcFile::Cwd));
        for other in [
            "/proc/self/maps",
            "/proc/1/task/x/maps",
            "/proc/1/environ",
            "/etc/passwd",
            "/proc//maps",
        ] {
            assert_eq!(ProcFile::parse(other), None, "{other}");
        }
    }

    #[test]
    fn the_map_at_a_position_has_the_changes_made_by_then() {
        let exe = mapping(0x40_0000, 0x40_1000, "r-xp", Some("/usr/bin/cat"));
        let heap = mapping(0x50_0000, 0x52_1000, "rw-p", Some("[heap]"));
        let anon = mapping(0x7f00_0000_0000, 0x7f00_0000_2000, "rw-p", None);
        let maps = Maps {
            initial: vec![heap.clone(), exe.clone()],
            changes: vec![MapChange {
                position: 100,
                syscall: "mmap".into(),
                added: vec![anon],
                removed: vec![heap],
                mapped_start: None,
                mapped_end: None,
            }],
        };
        let before = maps_text(&maps, 99);
        assert_eq!(before.lines().count(), 2);
        assert!(before.starts_with("400000-401000 r-xp 00000000 00:00 0 "), "{before}");
        assert!(before.lines().next().is_some_and(|l| l.ends_with(" /usr/bin/cat")));
        assert!(before.contains("[heap]"));
        let after = maps_text(&maps, 100);
        assert!(!after.contains("[heap]"), "{after}");
        assert!(
            after.ends_with("7f0000000000-7f0000002000 rw-p 00000000 00:00 0\n"),
            "{after}"
        );
        assert_eq!(cmdline_bytes(&["cat".into(), "-n".into()]), b"cat\0-n\0");
    }
}

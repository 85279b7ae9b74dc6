//! Sideband shared by the backends: the images to copy, memory snapshots, changes of the
//! memory map, and the system calls that change it.

use std::collections::{BTreeMap, BTreeSet};

use rtit_replay_core::recording::{MapChange, Mapping};

/// System call numbers (x86-64) the backends watch.
pub mod nr {
    /// mmap.
    pub const MMAP: u64 = 9;
    /// mprotect.
    pub const MPROTECT: u64 = 10;
    /// munmap.
    pub const MUNMAP: u64 = 11;
    /// brk.
    pub const BRK: u64 = 12;
    /// rt_sigreturn.
    pub const RT_SIGRETURN: u64 = 15;
    /// mremap.
    pub const MREMAP: u64 = 25;
    /// clone.
    pub const CLONE: u64 = 56;
    /// fork.
    pub const FORK: u64 = 57;
    /// vfork.
    pub const VFORK: u64 = 58;
    /// execve.
    pub const EXECVE: u64 = 59;
    /// exit.
    pub const EXIT: u64 = 60;
    /// exit_group.
    pub const EXIT_GROUP: u64 = 231;
    /// execveat.
    pub const EXECVEAT: u64 = 322;
    /// clone3.
    pub const CLONE3: u64 = 435;
    /// The clone flag that makes a thread rather than a process.
    pub const CLONE_THREAD: u64 = 0x10000;

    /// Whether the call changes the memory map.
    pub const fn changes_map(nr: u64) -> bool {
        matches!(nr, MMAP | MPROTECT | MUNMAP | BRK | MREMAP)
    }

    /// The call's name if it creates a process (not a thread): fork, vfork, or clone and
    /// clone3 without CLONE_THREAD (`clone_flags`: clone's first argument, or the flags
    /// clone3's argument structure starts with).
    pub const fn creates_process(nr: u64, clone_flags: u64) -> Option<&'static str> {
        match nr {
            FORK => Some("fork"),
            VFORK => Some("vfork"),
            CLONE if clone_flags & CLONE_THREAD == 0 => Some("clone"),
            CLONE3 if clone_flags & CLONE_THREAD == 0 => Some("clone3"),
            _ => None,
        }
    }
}

/// The images the traced code may run from: every file mapped executable, with the address
/// its offset-0 mapping starts at, and the vDSO's bytes.
#[derive(Debug, Default, Clone)]
pub struct Images {
    /// Load address (start of the offset-0 mapping) by path.
    load: BTreeMap<String, u64>,
    /// Paths mapped executable.
    executable: BTreeSet<String>,
    /// The vDSO: its address and bytes.
    pub vdso: Option<(u64, Vec<u8>)>,
}

impl Images {
    /// Takes new mappings into account.
    pub fn note(&mut self, maps: &[Mapping]) {
        for m in maps {
            let Some(path) = m.path.as_deref().filter(|p| p.starts_with('/')) else {
                continue;
            };
            if m.offset == 0 {
                let start = self.load.entry(path.to_string()).or_insert(m.start);
                *start = (*start).min(m.start);
            }
            if m.perms.contains('x') {
                self.executable.insert(path.to_string());
            }
        }
    }

    /// The ELF files to copy, with their load addresses.
    pub fn files(&self) -> impl Iterator<Item = (&str, u64)> {
        self.executable
            .iter()
            .filter_map(|p| self.load.get(p).map(|&a| (p.as_str(), a)))
    }
}

impl Images {
    /// Adds an executable image loaded at `load`.
    pub fn add(&mut self, path: &str, load: u64) {
        self.load.insert(path.to_string(), load);
        self.executable.insert(path.to_string());
    }

    /// Records the vDSO's address and bytes.
    pub fn set_vdso(&mut self, address: u64, bytes: Vec<u8>) {
        self.vdso = Some((address, bytes));
    }
}

/// At most this many bytes of memory per snapshot: the stack first, then the other writable
/// mappings in address order, each cut short when the bound is reached.
pub const SNAPSHOT_BOUND: usize = 16 << 20;

/// Writable memory at one moment: (mapping, its bytes, possibly cut short).
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// The regions read.
    pub regions: Vec<(Mapping, Vec<u8>)>,
    /// Whether the bound cut something off.
    pub truncated: bool,
}

/// Reads the writable mappings of `maps` with `read` (which returns how many bytes it could
/// read at an address), the stack first, up to [`SNAPSHOT_BOUND`] bytes.
pub fn snapshot_with(maps: &[Mapping], mut read: impl FnMut(u64, &mut [u8]) -> usize) -> Snapshot {
    // Writable mappings, and RELRO: the read-only part of a file's data that the dynamic
    // loader relocated and then protected (an `r--p` mapping right before the same file's
    // `rw-p` one); its bytes differ from the file's.
    let relro = |i: usize| {
        let (m, next) = (&maps[i], maps.get(i + 1));
        m.perms == "r--p"
            && m.path.is_some()
            && next.is_some_and(|n| n.path == m.path && n.start == m.end && n.perms.contains('w'))
    };
    let mut writable: Vec<&Mapping> = (0..maps.len())
        .filter(|&i| maps[i].perms.contains('w') || relro(i))
        .map(|i| &maps[i])
        .collect();
    writable.sort_by_key(|m| (m.path.as_deref() != Some("[stack]"), m.start));
    let mut snap = Snapshot::default();
    let mut left = SNAPSHOT_BOUND;
    for m in writable {
        let size = (m.end - m.start) as usize;
        // The stack's live part is at its top: keep the top when cutting it short.
        let take = size.min(left);
        if take < size {
            snap.truncated = true;
        }
        if take == 0 {
            continue;
        }
        let from = if m.path.as_deref() == Some("[stack]") {
            m.end - take as u64
        } else {
            m.start
        };
        let mut bytes = vec![0u8; take];
        let n = read(from, &mut bytes);
        bytes.truncate(n);
        left -= n;
        let mut region = m.clone();
        region.start = from;
        region.end = from + n as u64;
        snap.regions.push((region, bytes));
    }
    snap
}

/// The system call's name, for the map-change record.
fn syscall_name(syscall: u64) -> &'static str {
    match syscall {
        nr::MMAP => "mmap",
        nr::MPROTECT => "mprotect",
        nr::MUNMAP => "munmap",
        nr::BRK => "brk",
        nr::MREMAP => "mremap",
        _ => "?",
    }
}

/// At most this many bytes of one file mapping are logged.
const MAPPED_FILE_BOUND: u64 = 16 << 20;

/// MAP_ANONYMOUS.
const MAP_ANONYMOUS: u64 = 0x20;

/// What a successful `mmap(_, len, _, flags, fd, _)` that returned `addr` mapped when the
/// file (`fd`'s target `path`) is not an ELF image: the dynamic loader's cache, locale
/// archives, data files. ELF files are copied as images and replay reads their mappings from
/// the copies; these bytes go into the call's log. `read` reads the program's memory.
pub fn mapped_file(
    path: &std::path::Path,
    addr: u64,
    len: u64,
    flags: u64,
    read: impl FnOnce(u64, &mut [u8]) -> usize,
) -> Option<rtit_replay_core::syscall::MemoryWrite> {
    if (addr as i64) < 0 || flags & MAP_ANONYMOUS != 0 || len == 0 || len > MAPPED_FILE_BOUND {
        return None;
    }
    let mut magic = [0u8; 4];
    use std::io::Read;
    let is_elf = std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| &magic == b"\x7fELF");
    if is_elf {
        return None;
    }
    // Past the file's last page the mapping faults: what can be read is what is there.
    let mut bytes = vec![0u8; len as usize];
    let n = read(addr, &mut bytes);
    Some(rtit_replay_core::syscall::MemoryWrite::new(addr, &bytes[..n]))
}

/// What changed between two maps, if anything.
pub fn diff(old: &[Mapping], new: &[Mapping], position: u64, syscall: u64) -> Option<MapChange> {
    let added: Vec<Mapping> = new.iter().filter(|m| !old.contains(m)).cloned().collect();
    let removed: Vec<Mapping> = old.iter().filter(|m| !new.contains(m)).cloned().collect();
    (!added.is_empty() || !removed.is_empty()).then(|| MapChange {
        position,
        syscall: syscall_name(syscall).to_string(),
        added,
        removed,
    })
}

/// Parses a line of `/proc/PID/maps`.
pub fn parse_map_line(line: &str) -> Option<Mapping> {
    let mut parts = line.split_whitespace();
    let range = parts.next()?;
    let perms = parts.next()?.to_string();
    let offset = u64::from_str_radix(parts.next()?, 16).ok()?;
    let _dev = parts.next()?;
    let _inode = parts.next()?;
    let path = parts.collect::<Vec<_>>().join(" ");
    let (start, end) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms,
        offset,
        path: (!path.is_empty()).then_some(path),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: u64, perms: &str, offset: u64, path: &str) -> Mapping {
        Mapping {
            start,
            end: start + 0x1000,
            perms: perms.to_string(),
            offset,
            path: Some(path.to_string()),
        }
    }

    #[test]
    fn images_are_executable_files_at_their_offset_0_mapping() {
        let mut images = Images::default();
        images.note(&[
            m(0x40_0000, "r--p", 0, "/bin/a"),
            m(0x40_1000, "r-xp", 0x1000, "/bin/a"),
            m(0x7000_0000, "r--p", 0, "/lib/data.bin"),
            m(0x7fff_f000, "rw-p", 0, "[stack]"),
        ]);
        assert_eq!(images.files().collect::<Vec<_>>(), [("/bin/a", 0x40_0000)]);
    }

    #[test]
    fn map_lines_parse() {
        let m = parse_map_line("7ffff7fc3000-7ffff7fc7000 r--p 00000000 00:00 0                          [vvar]")
            .expect("parses");
        assert_eq!(
            (m.start, m.end, m.perms.as_str(), m.path.as_deref()),
            (0x7fff_f7fc_3000, 0x7fff_f7fc_7000, "r--p", Some("[vvar]"))
        );
        let m = parse_map_line("00400000-00401000 r-xp 00001000 fe:01 1234 /tmp/a b").expect("parses");
        assert_eq!((m.offset, m.path.as_deref()), (0x1000, Some("/tmp/a b")));
        assert_eq!(parse_map_line("garbage"), None);
    }

    #[test]
    fn map_changes_list_what_came_and_went() {
        let a = m(0x1000, "r--p", 0, "/x");
        let b = m(0x2000, "rw-p", 0, "/y");
        let b2 = m(0x2000, "r--p", 0, "/y");
        let change = diff(&[a.clone(), b.clone()], &[a.clone(), b2.clone()], 7, nr::MPROTECT).expect("a change");
        assert_eq!((change.position, change.syscall.as_str()), (7, "mprotect"));
        assert_eq!((change.added, change.removed), (vec![b2], vec![b]));
        let same = std::slice::from_ref(&a);
        assert!(diff(same, same, 1, nr::BRK).is_none());
    }
}

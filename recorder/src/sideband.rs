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
    /// sched_yield.
    pub const SCHED_YIELD: u64 = 24;
    /// set_tid_address: where the kernel clears the thread's id when it ends.
    pub const SET_TID_ADDRESS: u64 = 218;
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

/// Bytes read at a time when taking a snapshot.
const CHUNK: usize = 1 << 20;
/// The unit of zero elision: a page of zeros is listed, not stored.
const PAGE: usize = 4096;

/// Writable memory at one moment: every writable mapping whole, its pages of zeros listed
/// rather than stored (a program's `.bss` and untouched heap).
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// The regions read, with their bytes.
    pub regions: Vec<(Mapping, Vec<u8>)>,
    /// The regions read that hold only zeros.
    pub zero: Vec<Mapping>,
    /// Whether part of a mapping could not be read (recordings made with a bound on the
    /// snapshot's size also set it when the bound cut a mapping short).
    pub truncated: bool,
}

impl Snapshot {
    /// Adds `bytes` read at `at` from `mapping`: runs of whole zero pages as zero regions,
    /// the rest as regions with bytes (consecutive runs of the same kind merged).
    fn add(&mut self, mapping: &Mapping, at: u64, bytes: &[u8]) {
        let mut from = 0;
        while from < bytes.len() {
            let zero = |i: usize| bytes[i..(i + PAGE).min(bytes.len())].iter().all(|&b| b == 0);
            let kind = zero(from);
            let mut to = from;
            while to < bytes.len() && zero(to) == kind {
                to = (to + PAGE).min(bytes.len());
            }
            let mut region = mapping.clone();
            region.start = at + from as u64;
            region.end = at + to as u64;
            if kind {
                match self.zero.last_mut() {
                    Some(last) if last.end == region.start && last.path == region.path => last.end = region.end,
                    _ => self.zero.push(region),
                }
            } else {
                match self.regions.last_mut() {
                    Some((last, data)) if last.end == region.start && last.path == region.path => {
                        last.end = region.end;
                        data.extend_from_slice(&bytes[from..to]);
                    }
                    _ => self.regions.push((region, bytes[from..to].to_vec())),
                }
            }
            from = to;
        }
    }

    /// Bytes stored (zero pages not counted).
    pub fn stored(&self) -> u64 {
        self.regions.iter().map(|(_, b)| b.len() as u64).sum()
    }
}

/// Reads the writable mappings of `maps` with `read` (which returns how many bytes it could
/// read at an address), every byte of them: the state layer knows memory from the start only
/// where the snapshot holds it.
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
    let mut snap = Snapshot::default();
    let mut buf = vec![0u8; CHUNK];
    for m in (0..maps.len())
        .filter(|&i| maps[i].perms.contains('w') || relro(i))
        .map(|i| &maps[i])
    {
        let mut at = m.start;
        while at < m.end {
            let want = ((m.end - at) as usize).min(CHUNK);
            let n = read(at, &mut buf[..want]);
            snap.add(m, at, &buf[..n]);
            if n < want {
                snap.truncated = true;
                break;
            }
            at += n as u64;
        }
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
pub fn diff(
    old: &[Mapping],
    new: &[Mapping],
    position: u64,
    syscall: u64,
    mapped: Option<(u64, u64)>,
) -> Option<MapChange> {
    let added: Vec<Mapping> = new.iter().filter(|m| !old.contains(m)).cloned().collect();
    let removed: Vec<Mapping> = old.iter().filter(|m| !new.contains(m)).cloned().collect();
    (!added.is_empty() || !removed.is_empty()).then(|| MapChange {
        position,
        syscall: syscall_name(syscall).to_string(),
        added,
        removed,
        mapped_start: mapped.map(|m| m.0),
        mapped_end: mapped.map(|m| m.1),
    })
}

/// The range an `mmap` of `len` bytes that returned `ret` mapped (whole pages), if `syscall`
/// is one that succeeded.
pub fn mapped(syscall: u64, len: u64, ret: u64) -> Option<(u64, u64)> {
    (syscall == nr::MMAP && ret < 0u64.wrapping_sub(4095) && len > 0)
        .then(|| (ret, ret.saturating_add(len.next_multiple_of(4096))))
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
        let change = diff(&[a.clone(), b.clone()], &[a.clone(), b2.clone()], 7, nr::MPROTECT, None).expect("a change");
        assert_eq!((change.position, change.syscall.as_str()), (7, "mprotect"));
        assert_eq!((change.added, change.removed), (vec![b2], vec![b]));
        let same = std::slice::from_ref(&a);
        assert!(diff(same, same, 1, nr::BRK, None).is_none());
    }

    #[test]
    fn snapshots_take_every_writable_byte_and_list_zero_pages() {
        // 3 MiB of heap (more than a read chunk): zeros but for a byte in its second page
        // and the last page; the stack partly unreadable.
        let heap = Mapping {
            start: 0x10_0000,
            end: 0x10_0000 + (3 << 20),
            perms: "rw-p".into(),
            offset: 0,
            path: None,
        };
        let stack = Mapping {
            start: 0x7fff_0000,
            end: 0x7fff_4000,
            perms: "rw-p".into(),
            offset: 0,
            path: Some("[stack]".into()),
        };
        let text = m(0x40_0000, "r-xp", 0, "/bin/a");
        let snap = snapshot_with(&[text, heap.clone(), stack.clone()], |a, buf| {
            if a >= stack.start {
                // Only the first page of the stack is readable.
                let n = buf.len().min((stack.start + 0x1000).saturating_sub(a) as usize);
                buf[..n].fill(7);
                return n;
            }
            buf.fill(0);
            for (i, b) in buf.iter_mut().enumerate() {
                let at = a + i as u64;
                if at == heap.start + 0x1234 || at >= heap.end - 0x1000 {
                    *b = 1;
                }
            }
            buf.len()
        });
        let spans = |v: &[Mapping]| v.iter().map(|r| (r.start, r.end)).collect::<Vec<_>>();
        let data: Vec<(u64, u64)> = snap.regions.iter().map(|(r, _)| (r.start, r.end)).collect();
        assert_eq!(
            data,
            [
                (heap.start + 0x1000, heap.start + 0x2000),
                (heap.end - 0x1000, heap.end),
                (stack.start, stack.start + 0x1000)
            ]
        );
        assert_eq!(snap.regions[0].1[0x234], 1);
        assert_eq!(
            spans(&snap.zero),
            [
                (heap.start, heap.start + 0x1000),
                (heap.start + 0x2000, heap.end - 0x1000)
            ],
            "zero pages merged across read chunks"
        );
        assert!(snap.truncated, "the stack could not be read whole");
        assert_eq!(snap.stored(), 3 * 0x1000);
    }
}

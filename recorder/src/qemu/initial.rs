//! The guest's map when it starts, read from the host's `/proc/self/maps` (guest addresses
//! are host addresses under QEMU user mode on an x86-64 host, guest_base 0): the mappings
//! that appeared since the plugin was installed, below QEMU's own, with the protections the
//! ELF segments give them (the host maps guest code without `x`) and the stack named.

use object::elf::{FileHeader64, PT_LOAD};
use object::read::elf::{FileHeader, ProgramHeader};
use object::Endianness;
use rtit_replay_core::recording::Mapping;

const PAGE: u64 = 0x1000;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const PF_R: u32 = 4;

/// A PT_LOAD segment as a page-aligned file range: (offset, size, p_flags).
type Segment = (u64, u64, u32);

/// The guest's mappings among the host's: new since `before` (the map at install, which is
/// QEMU's own), below all of those, and not an inaccessible anonymous reservation.
pub fn guest_mappings(now: &[Mapping], before: &[Mapping]) -> Vec<Mapping> {
    let floor = before.iter().map(|m| m.start).min().unwrap_or(u64::MAX);
    now.iter()
        .filter(|m| m.start < floor && !before.contains(m))
        .filter(|m| !(m.path.is_none() && m.perms.starts_with("---")))
        .cloned()
        .collect()
}

/// Splits file mappings by the ELF segments they hold and gives each part the segment's
/// protections. `read` returns a file's bytes.
pub fn with_elf_perms(maps: Vec<Mapping>, read: impl Fn(&str) -> Option<Vec<u8>>) -> Vec<Mapping> {
    let mut out = Vec::new();
    let mut cache: Vec<(String, Option<Vec<Segment>>)> = Vec::new();
    for m in maps {
        let Some(path) = m.path.clone().filter(|p| p.starts_with('/')) else {
            out.push(m);
            continue;
        };
        if !cache.iter().any(|(p, _)| *p == path) {
            let segs = read(&path).and_then(|b| segments(&b));
            cache.push((path.clone(), segs));
        }
        let segs = cache.iter().find(|(p, _)| *p == path).and_then(|(_, s)| s.as_ref());
        let Some(segs) = segs else {
            out.push(m);
            continue;
        };
        // Each segment's pages by file offset: [offset, offset + size) → flags.
        let mut cursor = m.start;
        while cursor < m.end {
            let file_off = m.offset + (cursor - m.start);
            // Where page-rounded segments overlap, the later one is mapped last and wins.
            let seg = segs
                .iter()
                .rev()
                .find(|(off, size, _)| *off <= file_off && file_off < off + size);
            let (end, flags) = match seg {
                Some((off, size, flags)) => {
                    // Up to the segment's end or the next segment's start, whichever is first.
                    let stop = segs
                        .iter()
                        .map(|(o, _, _)| *o)
                        .filter(|&o| o > file_off)
                        .fold(off + size, u64::min);
                    ((cursor + (stop - file_off)).min(m.end), Some(*flags))
                }
                None => {
                    let next = segs.iter().map(|(o, _, _)| *o).filter(|&o| o > file_off).min();
                    (next.map_or(m.end, |o| (cursor + (o - file_off)).min(m.end)), None)
                }
            };
            let perms = flags.map_or_else(
                || m.perms.clone(),
                |f| {
                    let bit = |b: u32, c: char| if f & b != 0 { c } else { '-' };
                    let shared = if m.perms.ends_with('s') { 's' } else { 'p' };
                    [bit(PF_R, 'r'), bit(PF_W, 'w'), bit(PF_X, 'x'), shared]
                        .iter()
                        .collect()
                },
            );
            out.push(Mapping {
                start: cursor,
                end,
                perms,
                offset: file_off,
                path: Some(path.clone()),
            });
            cursor = end;
        }
    }
    out
}

/// PT_LOAD segments as page-aligned file ranges: (offset, size, p_flags).
fn segments(bytes: &[u8]) -> Option<Vec<Segment>> {
    // The file header and the program headers only: `bytes` may be just the file's start
    // ([`elf_headers`]).
    let header = FileHeader64::<Endianness>::parse(bytes).ok()?;
    let endian = header.endian().ok()?;
    let segs = header
        .program_headers(endian, bytes)
        .ok()?
        .iter()
        .filter(|p| p.p_type(endian) == PT_LOAD)
        .map(|p| {
            let (off, size) = (p.p_offset(endian), p.p_filesz(endian));
            let start = off & !(PAGE - 1);
            let end = (off + size.max(1) + PAGE - 1) & !(PAGE - 1);
            (start, end - start, p.p_flags(endian))
        })
        .collect::<Vec<_>>();
    (!segs.is_empty()).then_some(segs)
}

/// The start of the ELF file at `path`, up to the end of its program headers (what
/// [`with_elf_perms`] needs of it): reading python3's whole 7 MB to find them took 4 ms of
/// QEMU's thread at the program's first instruction (issue 20). Bounded at 1 MiB.
pub fn elf_headers(path: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let mut start = Vec::with_capacity(4096);
    file.take(4096).read_to_end(&mut start).ok()?;
    let header = FileHeader64::<Endianness>::parse(&start[..]).ok()?;
    let endian = header.endian().ok()?;
    let end = header.e_phoff(endian) + u64::from(header.e_phnum(endian)) * u64::from(header.e_phentsize(endian));
    if end as usize > start.len() && end <= 1 << 20 {
        let file = std::fs::File::open(path).ok()?;
        start.clear();
        file.take(end).read_to_end(&mut start).ok()?;
    }
    Some(start)
}

/// Names the anonymous writable mapping that holds `rsp` `[stack]`.
pub fn name_stack(maps: &mut [Mapping], rsp: u64) {
    if let Some(m) = maps
        .iter_mut()
        .find(|m| m.start <= rsp && rsp < m.end && m.path.is_none())
    {
        m.path = Some("[stack]".to_string());
    }
}

/// Finds the initial stack pointer: the address of `argc`, followed by `argc` pointers to
/// strings within the same mapping and a null (the layout execve leaves, which QEMU's loader
/// reproduces). `read` reads a mapping's bytes.
pub fn find_initial_rsp(maps: &[Mapping], argc: u64, read: impl Fn(&Mapping) -> Vec<u8>) -> Option<u64> {
    // Anonymous, or named `[stack]` where the map is the program's own view (QEMU's gdbstub).
    let anonymous = |m: &Mapping| m.path.is_none() || m.path.as_deref() == Some("[stack]");
    for m in maps.iter().filter(|m| anonymous(m) && m.perms.starts_with("rw")) {
        let bytes = read(m);
        let word = |i: usize| -> Option<u64> {
            bytes
                .get(i..i + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        };
        let inside = |p: u64| p >= m.start && p < m.start + bytes.len() as u64;
        let mut at = 0;
        while at + 8 <= bytes.len() {
            if word(at) == Some(argc) {
                let ok = (1..=argc as usize).all(|k| word(at + 8 * k).is_some_and(inside))
                    && word(at + 8 * (argc as usize + 1)) == Some(0);
                if ok {
                    return Some(m.start + at as u64);
                }
            }
            at += 8;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: u64, end: u64, perms: &str, path: Option<&str>, offset: u64) -> Mapping {
        Mapping {
            start,
            end,
            perms: perms.to_string(),
            offset,
            path: path.map(str::to_string),
        }
    }

    #[test]
    fn guest_mappings_are_new_and_below_qemu() {
        let before = [m(0x5500_0000_0000, 0x5500_0001_0000, "r-xp", Some("/usr/bin/qemu"), 0)];
        let now = [
            before[0].clone(),
            m(0x40_0000, 0x4a_1000, "r--p", Some("/a"), 0),
            m(0x4000_0000, 0x4000_1000, "---p", None, 0),
            m(0x4000_1000, 0x4080_3000, "rw-p", None, 0),
            m(0x7f00_0000_0000, 0x7f00_0100_0000, "rwxp", None, 0),
        ];
        let got = guest_mappings(&now, &before);
        assert_eq!(got, [now[1].clone(), now[3].clone()]);
    }

    #[test]
    fn file_mappings_take_their_segments_protections() {
        // The test binary itself: its text segment is executable, its first page is not.
        let exe = std::env::current_exe().expect("exe");
        let bytes = std::fs::read(&exe).expect("read");
        let path = exe.display().to_string();
        let segs = segments(&bytes).expect("segments");
        let text = segs.iter().find(|s| s.2 & PF_X != 0).expect("a text segment");
        let whole = m(0x1_0000_0000, 0x1_0000_0000 + text.0 + text.1, "r--p", Some(&path), 0);
        let split = with_elf_perms(vec![whole], |_| Some(bytes.clone()));
        let exec: Vec<_> = split.iter().filter(|p| p.perms.contains('x')).collect();
        assert_eq!(exec.len(), 1, "{split:?}");
        assert!(
            exec[0].offset >= text.0 && exec[0].offset < text.0 + text.1,
            "{split:?}"
        );
        assert!(!split[0].perms.contains('x'));
    }

    /// The start of a file up to its program headers gives the segments the whole file
    /// gives (the test binary and the system's libc), and is much shorter.
    #[test]
    fn an_elf_files_headers_give_its_segments() {
        let exe = std::env::current_exe().expect("exe").display().to_string();
        for path in [exe.as_str(), "/usr/lib/x86_64-linux-gnu/libc.so.6"] {
            let Ok(whole) = std::fs::read(path) else {
                eprintln!("skipped {path}: not here");
                continue;
            };
            let start = elf_headers(path).expect("headers");
            assert!(
                start.len() < whole.len() / 8,
                "{path}: {} of {} bytes",
                start.len(),
                whole.len()
            );
            assert_eq!(segments(&start), segments(&whole), "{path}");
            assert!(segments(&start).is_some_and(|s| s.len() >= 2), "{path}");
        }
        assert!(elf_headers("/proc/self/status").is_none(), "not an ELF file");
    }

    #[test]
    fn the_initial_stack_pointer_is_found_by_argc_and_argv() {
        let stack = m(0x1000, 0x2000, "rw-p", None, 0);
        let mut bytes = vec![0u8; 0x1000];
        let put = |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        put(&mut bytes, 0x100, 2); // a decoy: argc without argv
        put(&mut bytes, 0x800, 2);
        put(&mut bytes, 0x808, 0x1f00);
        put(&mut bytes, 0x810, 0x1f08);
        put(&mut bytes, 0x818, 0);
        let rsp = find_initial_rsp(std::slice::from_ref(&stack), 2, |_| bytes.clone());
        assert_eq!(rsp, Some(0x1800));
        // The program's own view names its stack (QEMU's gdbstub); a file is no stack.
        let named = Mapping {
            path: Some("[stack]".into()),
            ..stack.clone()
        };
        assert_eq!(find_initial_rsp(&[named], 2, |_| bytes.clone()), Some(0x1800));
        let file = Mapping {
            path: Some("/a".into()),
            ..stack
        };
        assert_eq!(find_initial_rsp(&[file], 2, |_| bytes.clone()), None);
    }
}

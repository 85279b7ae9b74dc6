//! The memory a store cannot write at each point of the history: private mappings that are
//! readable and not writable (an image's text and constants, a library's RELRO once the
//! dynamic loader protected it). A store through an unknown address forgets all memory but
//! these: had it hit one, it would have faulted, and a fault is a signal the recording holds.
//! A lazy-binding trampoline subtracts the xsave area's size, which ld.so keeps in RELRO,
//! from rsp: forgetting it after any such store lost rsp for the rest of a sort run.
//!
//! Exact only if the recording logs every change of protections: the maps' changes come
//! from mmap, mprotect, munmap, brk and mremap; a recording with a call that changes them
//! otherwise (pkey_mprotect, shmat, remap_file_pages) or a change that does not fit the map
//! so far keeps nothing from then on. Kernel-owned mappings (`[vvar]`, `[vdso]`) are never
//! kept: the kernel rewrites the first.

use std::sync::Arc;

use crate::recording::{MapChange, Mapping};

/// Ranges (start, length), sorted, that no store writes.
pub type ReadOnly = Arc<[(u64, u64)]>;

/// System calls that change protections or mappings without a map change in the recording.
const UNLOGGED: [u64; 3] = [
    329, // pkey_mprotect
    30,  // shmat
    216, // remap_file_pages
];

/// Whether a system call `nr` makes [`after_each`]'s ranges unsafe.
pub fn unlogged(nr: u64) -> bool {
    UNLOGGED.contains(&nr)
}

fn kept(m: &Mapping) -> bool {
    let p = m.perms.as_bytes();
    p.len() == 4
        && p[0] == b'r'
        && p[1] != b'w'
        && p[3] == b'p'
        && !m.path.as_deref().is_some_and(|s| s.starts_with('['))
}

fn ranges(map: &[Mapping]) -> ReadOnly {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for m in map.iter().filter(|m| kept(m)) {
        match out.last_mut() {
            Some((s, n)) if *s + *n == m.start => *n += m.end - m.start,
            _ => out.push((m.start, m.end - m.start)),
        }
    }
    out.into()
}

/// The ranges at the start (`initial`), and after each of `changes`, in order; empty from
/// the first change that does not fit the map so far.
pub fn after_each(initial: &[Mapping], changes: &[MapChange]) -> (ReadOnly, Vec<ReadOnly>) {
    let mut map: Vec<Mapping> = initial.to_vec();
    map.sort_by_key(|m| m.start);
    let first = ranges(&map);
    let mut fits = true;
    let after = changes
        .iter()
        .map(|c| {
            for r in &c.removed {
                match map
                    .iter()
                    .position(|m| m.start == r.start && m.end == r.end && m.perms == r.perms)
                {
                    Some(i) => {
                        map.remove(i);
                    }
                    None => fits = false,
                }
            }
            map.extend(c.added.iter().cloned());
            map.sort_by_key(|m| m.start);
            let overlapping = map.windows(2).any(|w| w[0].end > w[1].start);
            fits &= !overlapping;
            match fits {
                true => ranges(&map),
                false => ReadOnly::from([]),
            }
        })
        .collect();
    (first, after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: u64, end: u64, perms: &str, path: Option<&str>) -> Mapping {
        Mapping {
            start,
            end,
            perms: perms.into(),
            offset: 0,
            path: path.map(str::to_string),
        }
    }

    fn change(added: Vec<Mapping>, removed: Vec<Mapping>) -> MapChange {
        MapChange {
            position: 1,
            syscall: "mprotect".into(),
            added,
            removed,
            mapped_start: None,
            mapped_end: None,
        }
    }

    /// Text and RELRO once protected are kept; writable, shared, unreadable and kernel
    /// mappings are not; a change that does not fit the map so far keeps nothing after it.
    #[test]
    fn read_only_private_mappings_are_kept_as_the_map_changes() {
        let ld = Some("/lib/ld.so");
        let initial = vec![
            m(0x1000, 0x3000, "r-xp", ld),
            m(0x3000, 0x4000, "rw-p", ld),
            m(0x8000, 0x9000, "r--s", Some("/dev/shm/x")),
            m(0xa000, 0xb000, "---p", None),
            m(0xc000, 0xd000, "r--p", Some("[vvar]")),
        ];
        let relro = change(vec![m(0x3000, 0x4000, "r--p", ld)], vec![m(0x3000, 0x4000, "rw-p", ld)]);
        let writable = change(vec![m(0x1000, 0x3000, "rwxp", ld)], vec![m(0x1000, 0x3000, "r-xp", ld)]);
        let stray = change(vec![], vec![m(0x5000, 0x6000, "rw-p", None)]);
        let again = change(vec![m(0x1000, 0x3000, "r-xp", ld)], vec![m(0x1000, 0x3000, "rwxp", ld)]);
        let (first, after) = after_each(&initial, &[relro, writable, stray, again]);
        assert_eq!(&*first, &[(0x1000, 0x2000)]);
        assert_eq!(&*after[0], &[(0x1000, 0x3000)], "RELRO protected joins the text");
        assert_eq!(&*after[1], &[(0x3000, 0x1000)], "the text made writable is not kept");
        assert!(
            after[2].is_empty() && after[3].is_empty(),
            "nothing after a change that does not fit"
        );
        assert!(unlogged(329) && !unlogged(10));
    }
}

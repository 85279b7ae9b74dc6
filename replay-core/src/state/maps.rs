//! What a memory-map change does to memory's contents: a new anonymous mapping (mmap, the
//! growth of the brk heap) is zero-filled by the kernel; a new file mapping holds the file's
//! bytes (known where the recording holds the file as an image); unmapped bytes are gone; a protection change keeps the bytes.

use crate::recording::{MapChange, Mapping};

/// Anonymous zero-fill is stored as known bytes only up to this size per change.
const ZERO_BOUND: u64 = 1 << 20;

/// A change's effect on memory contents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MapEffect {
    /// Ranges whose bytes become unknown.
    pub forget: Vec<(u64, u64)>,
    /// Ranges whose bytes become zero.
    pub zero: Vec<(u64, u64)>,
    /// New private file mappings: (start, length, path, file offset). Their bytes are the
    /// file's, known where the recording holds the file as an image.
    pub files: Vec<(u64, u64, String, u64)>,
}

impl MapEffect {
    /// Every range it touches (what is unknown before it, going backwards).
    pub fn touched(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.forget.iter().chain(&self.zero).copied()
    }
}

/// `ranges` minus the union of `minus`, as (start, end) pairs.
fn subtract(ranges: &[&Mapping], minus: &[&Mapping]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for m in ranges {
        let mut pieces = vec![(m.start, m.end)];
        for x in minus {
            pieces = pieces
                .into_iter()
                .flat_map(|(s, e)| {
                    let mut v = Vec::new();
                    if x.end <= s || x.start >= e {
                        v.push((s, e));
                    } else {
                        if s < x.start {
                            v.push((s, x.start));
                        }
                        if x.end < e {
                            v.push((x.end, e));
                        }
                    }
                    v
                })
                .collect();
        }
        out.extend(pieces);
    }
    out
}

fn anonymous(m: &Mapping) -> bool {
    m.perms.ends_with('p') && matches!(m.path.as_deref(), None | Some("[heap]") | Some(""))
}

/// The effect of one change (by the system call that made it).
pub fn effect(change: &MapChange) -> MapEffect {
    let added: Vec<&Mapping> = change.added.iter().collect();
    let removed: Vec<&Mapping> = change.removed.iter().collect();
    let len = |r: &(u64, u64)| (r.0, r.1 - r.0);
    let mut e = MapEffect::default();
    let gone = subtract(&removed, &added);
    match change.syscall.as_str() {
        // New contents over the whole mapped range, even where something was mapped before.
        "mmap" => {
            for m in &added {
                let r = (m.start, m.end - m.start);
                if anonymous(m) && r.1 <= ZERO_BOUND {
                    e.zero.push(r);
                } else {
                    e.forget.push(r);
                    if let (Some(path), true) = (&m.path, m.perms.ends_with('p')) {
                        e.files.push((r.0, r.1, path.clone(), m.offset));
                    }
                }
            }
            e.forget.extend(gone.iter().map(len));
        }
        // The heap grows (zero-filled) or shrinks; what stays keeps its bytes.
        "brk" => {
            for r in subtract(&added, &removed) {
                let r = len(&r);
                if r.1 <= ZERO_BOUND {
                    e.zero.push(r);
                } else {
                    e.forget.push(r);
                }
            }
            e.forget.extend(gone.iter().map(len));
        }
        "mprotect" => e.forget.extend(subtract(&removed, &added).iter().map(len)),
        "munmap" => e.forget.extend(gone.iter().map(len)),
        _ => e
            .forget
            .extend(added.iter().chain(&removed).map(|m| (m.start, m.end - m.start))),
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: u64, end: u64, path: Option<&str>) -> Mapping {
        Mapping {
            start,
            end,
            perms: "rw-p".into(),
            offset: 0,
            path: path.map(str::to_string),
        }
    }

    fn change(syscall: &str, added: Vec<Mapping>, removed: Vec<Mapping>) -> MapChange {
        MapChange {
            position: 1,
            syscall: syscall.into(),
            added,
            removed,
        }
    }

    #[test]
    fn heap_growth_is_zero_and_the_old_heap_keeps_its_bytes() {
        let e = effect(&change(
            "brk",
            vec![m(0x1000, 0x5000, Some("[heap]"))],
            vec![m(0x1000, 0x3000, Some("[heap]"))],
        ));
        assert_eq!(e.zero, vec![(0x3000, 0x2000)]);
        assert!(e.forget.is_empty());
        let e = effect(&change("mmap", vec![m(0x9000, 0xa000, Some("/lib/x.so"))], vec![]));
        assert_eq!(e.forget, vec![(0x9000, 0x1000)]);
        let e = effect(&change(
            "mmap",
            vec![m(0x9000, 0xa000, None)],
            vec![m(0x9000, 0xa000, None)],
        ));
        assert_eq!(e.zero, vec![(0x9000, 0x1000)], "MAP_FIXED over a mapping: new zeros");
        let e = effect(&change("munmap", vec![], vec![m(0x9000, 0xa000, None)]));
        assert_eq!(e.forget, vec![(0x9000, 0x1000)]);
        let e = effect(&change(
            "mprotect",
            vec![m(0x9000, 0xa000, None)],
            vec![m(0x9000, 0xa000, None)],
        ));
        assert_eq!(e, MapEffect::default(), "a protection change keeps the bytes");
        let e = effect(&change(
            "mremap",
            vec![m(0x9000, 0xb000, None)],
            vec![m(0x9000, 0xa000, None)],
        ));
        assert_eq!(e.forget.len(), 2);
    }
}

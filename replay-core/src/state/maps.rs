//! What a memory-map change does to memory's contents: a new anonymous mapping (mmap, the
//! growth of the brk heap) is zero-filled by the kernel; a new file mapping holds the file's
//! bytes (known where the recording holds the file as an image); unmapped bytes are gone; a
//! protection change keeps the bytes. An `mmap` next to a mapping like it is merged with it
//! into one: only the range the call mapped is new, the neighbour keeps its bytes.

use crate::recording::{MapChange, Mapping};

/// Anonymous zero-fill is known only up to this size per change: whole pages of it share
/// one page of zeros (`Memory::zero`), a slot (8 bytes) a page, 2 MB for the largest. A
/// larger mapping (an address-space reservation, which runtimes make of terabytes) is
/// forgotten. It was 1 MiB, and sort's 1.1 MiB buffer of
/// lines was forgotten: every value copied from bytes of it sort never wrote was unknown.
const ZERO_BOUND: u64 = 1 << 30;

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
    /// The memory no store writes from this change on ([`super::readonly`]), where known.
    pub readonly: Option<super::readonly::ReadOnly>,
}

impl MapEffect {
    /// Every range it touches (what is unknown before it, going backwards).
    pub fn touched(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.forget.iter().chain(&self.zero).copied()
    }

    /// Makes `mem` what the change leaves (going forwards): forgotten ranges, zeroed ones,
    /// new file mappings with their file's bytes where `space` holds the file, and what no
    /// store writes from here on.
    pub fn apply(&self, mem: &mut super::memory::Memory, space: &crate::image::AddressSpace) {
        self.forget.iter().for_each(|&(a, n)| mem.forget(a, n));
        self.zero.iter().for_each(|&(a, n)| mem.zero(a, n));
        if let Some(r) = &self.readonly {
            mem.set_readonly(r.clone());
        }
        for (start, len, path, offset) in &self.files {
            if let Some(bytes) = space.file_mapping_bytes(path, *len, *offset) {
                mem.write(*start, bytes);
            }
        }
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

/// A private anonymous mapping: the kernel fills it with zeros, whatever its protection. One
/// neither readable nor writable is a reservation made accessible later with `mprotect`
/// (glibc maps a thread's stack so, its guard page apart, and the heaps of its arenas): its
/// bytes read zero then, and a new thread's stack read unknown where it had not written yet.
/// Reservations beyond [`ZERO_BOUND`] (runtimes make them of terabytes) are forgotten.
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
        // New contents over the range the call mapped, even where something was mapped
        // before (MAP_FIXED); a neighbour it merged with keeps its bytes. Without the range
        // (recordings made before it was logged), what was mapped before is unknown after.
        "mmap" => {
            let mapped = match (change.mapped_start, change.mapped_end) {
                (Some(s), Some(end)) if s < end => Some((s, end)),
                _ => None,
            };
            for m in &added {
                let new: Vec<(u64, u64)> = match mapped {
                    Some((s, end)) => {
                        let (s, end) = (s.max(m.start), end.min(m.end));
                        if s < end {
                            vec![(s, end)]
                        } else {
                            Vec::new()
                        }
                    }
                    None => {
                        // Mapped before: merged (kept) or replaced; which, nothing says.
                        for r in &removed {
                            let (s, end) = (m.start.max(r.start), m.end.min(r.end));
                            if s < end {
                                e.forget.push((s, end - s));
                            }
                        }
                        subtract(&[m], &removed)
                    }
                };
                for piece in new {
                    let r = len(&piece);
                    if anonymous(m) && r.1 <= ZERO_BOUND {
                        e.zero.push(r);
                    } else {
                        e.forget.push(r);
                        if let (Some(path), true) = (&m.path, m.perms.ends_with('p')) {
                            e.files.push((r.0, r.1, path.clone(), m.offset + (r.0 - m.start)));
                        }
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
            mapped_start: None,
            mapped_end: None,
        }
    }

    #[test]
    fn an_mmap_merged_with_its_neighbour_leaves_the_neighbours_bytes() {
        // mmap of 0x4000 bytes at 0x5000, merged with the mapping at 0x9000 (python3's arenas):
        // only the range mapped is zero.
        let mut c = change("mmap", vec![m(0x5000, 0x20000, None)], vec![m(0x9000, 0x20000, None)]);
        c.mapped_start = Some(0x5000);
        c.mapped_end = Some(0x9000);
        let e = effect(&c);
        assert_eq!(e.zero, vec![(0x5000, 0x4000)]);
        assert!(e.forget.is_empty(), "{e:?}");
        // Without the range: the new part is zero, the old part unknown (it may have been
        // replaced, MAP_FIXED), never zero.
        c.mapped_start = None;
        let e = effect(&c);
        assert_eq!(e.zero, vec![(0x5000, 0x4000)]);
        assert_eq!(e.forget, vec![(0x9000, 0x17000)]);
        // MAP_FIXED over a mapping, the range given: new zeros.
        let mut c = change("mmap", vec![m(0x9000, 0xa000, None)], vec![m(0x9000, 0xa000, None)]);
        c.mapped_start = Some(0x9000);
        c.mapped_end = Some(0xa000);
        assert_eq!(effect(&c).zero, vec![(0x9000, 0x1000)]);
    }

    /// A large anonymous mapping is zeros too (sort's 1.1 MiB buffer of lines was forgotten
    /// under the old 1 MiB bound), and so is one neither readable nor writable (a thread's
    /// stack before `mprotect` opens it); a reservation beyond the bound is forgotten
    /// (runtimes reserve terabytes).
    #[test]
    fn a_large_anonymous_mapping_is_zero_and_a_reservation_is_not() {
        let e = effect(&change("mmap", vec![m(0x40_0000, 0x51_b000, None)], vec![]));
        assert_eq!(e.zero, vec![(0x40_0000, 0x11_b000)]);
        assert!(e.forget.is_empty(), "{e:?}");
        let mut stack = m(0x7000_0000, 0x7080_1000, None);
        stack.perms = "---p".into();
        let e = effect(&change("mmap", vec![stack], vec![]));
        assert_eq!(e.zero, vec![(0x7000_0000, 0x80_1000)]);
        assert!(e.forget.is_empty(), "{e:?}");
        let mut reserve = m(0x1000_0000, 0x1_1000_0000, None);
        reserve.perms = "---p".into();
        let e = effect(&change("mmap", vec![reserve], vec![]));
        assert!(e.zero.is_empty(), "{e:?}");
        assert_eq!(e.forget, vec![(0x1000_0000, 1 << 32)]);
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
        assert_eq!(
            e.forget,
            vec![(0x9000, 0x1000)],
            "over a mapping, without the range: merged or MAP_FIXED, unknown"
        );
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

//! The guest's memory map, followed through its system calls. Under QEMU user mode the
//! host's `/proc/self/maps` mixes the guest's mappings with QEMU's own and shows guest code
//! without `x` (QEMU never executes it), so the map is kept from the calls' arguments and
//! results instead: mmap, munmap, mprotect, brk and mremap.

use rtit_replay_core::recording::Mapping;

const PAGE: u64 = 0x1000;

/// `PROT_*` bits.
const PROT_READ: u64 = 1;
const PROT_WRITE: u64 = 2;
const PROT_EXEC: u64 = 4;
/// `MAP_SHARED`.
const MAP_SHARED: u64 = 1;

fn page_up(x: u64) -> u64 {
    x.saturating_add(PAGE - 1) & !(PAGE - 1)
}

/// `r-xp` from `PROT_*` bits and sharing.
pub fn perms(prot: u64, shared: bool) -> String {
    let bit = |b: u64, c: char| if prot & b != 0 { c } else { '-' };
    [
        bit(PROT_READ, 'r'),
        bit(PROT_WRITE, 'w'),
        bit(PROT_EXEC, 'x'),
        if shared { 's' } else { 'p' },
    ]
    .iter()
    .collect()
}

/// The guest's mappings, sorted and disjoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuestMaps {
    maps: Vec<Mapping>,
    /// The heap's first page and its current end, once brk has been asked.
    heap: Option<(u64, u64)>,
}

impl GuestMaps {
    /// A map holding `initial` (sorted here).
    pub fn new(mut initial: Vec<Mapping>) -> Self {
        initial.sort_by_key(|m| m.start);
        Self {
            maps: initial,
            heap: None,
        }
    }

    /// The mappings now.
    pub fn current(&self) -> &[Mapping] {
        &self.maps
    }

    /// Removes `[start, end)`, cutting mappings that overlap it.
    fn remove(&mut self, start: u64, end: u64) {
        let mut out = Vec::with_capacity(self.maps.len() + 1);
        for m in self.maps.drain(..) {
            if m.end <= start || m.start >= end {
                out.push(m);
                continue;
            }
            if m.start < start {
                out.push(Mapping {
                    end: start,
                    ..m.clone()
                });
            }
            if m.end > end {
                let skip = end - m.start;
                out.push(Mapping {
                    start: end,
                    offset: if m.path.as_deref().is_some_and(|p| p.starts_with('/')) {
                        m.offset + skip
                    } else {
                        m.offset
                    },
                    ..m
                });
            }
        }
        self.maps = out;
    }

    fn insert(&mut self, m: Mapping) {
        self.remove(m.start, m.end);
        let at = self.maps.partition_point(|x| x.start < m.start);
        self.maps.insert(at, m);
    }

    /// A successful `mmap` returned `addr`; `path` is the file behind `fd`, if any.
    pub fn mmap(&mut self, addr: u64, len: u64, prot: u64, flags: u64, path: Option<String>, offset: u64) {
        self.insert(Mapping {
            start: addr,
            end: addr + page_up(len),
            perms: perms(prot, flags & MAP_SHARED != 0),
            offset: if path.is_some() { offset } else { 0 },
            path,
        });
    }

    /// A successful `munmap`.
    pub fn munmap(&mut self, addr: u64, len: u64) {
        self.remove(addr, addr + page_up(len));
    }

    /// A successful `mprotect`: the pages of `[addr, addr + len)` that are mapped get `prot`.
    pub fn mprotect(&mut self, addr: u64, len: u64, prot: u64) {
        let end = addr + page_up(len);
        let changed: Vec<Mapping> = self
            .maps
            .iter()
            .filter(|m| m.start < end && m.end > addr)
            .map(|m| {
                let start = m.start.max(addr);
                let file = m.path.as_deref().is_some_and(|p| p.starts_with('/'));
                Mapping {
                    start,
                    end: m.end.min(end),
                    perms: perms(prot, m.perms.ends_with('s')),
                    offset: if file { m.offset + (start - m.start) } else { m.offset },
                    path: m.path.clone(),
                }
            })
            .collect();
        for m in changed {
            self.insert(m);
        }
    }

    /// `brk` returned `end`: the heap runs from the first value it returned to this one.
    pub fn brk(&mut self, end: u64) {
        let (start, old) = *self.heap.get_or_insert((page_up(end), page_up(end)));
        let new = page_up(end).max(start);
        if new > old {
            self.insert(Mapping {
                start: old,
                end: new,
                perms: "rw-p".to_string(),
                offset: 0,
                path: Some("[heap]".to_string()),
            });
        } else if new < old {
            self.remove(new, old);
        }
        self.heap = Some((start, new));
    }

    /// A successful `mremap` moved or resized `[old, old + old_len)` to `new`.
    pub fn mremap(&mut self, old: u64, old_len: u64, new_len: u64, new: u64) {
        let Some(source) = self.maps.iter().find(|m| m.start <= old && old < m.end).cloned() else {
            return;
        };
        self.remove(old, old + page_up(old_len));
        let file = source.path.as_deref().is_some_and(|p| p.starts_with('/'));
        self.insert(Mapping {
            start: new,
            end: new + page_up(new_len),
            perms: source.perms,
            offset: if file { source.offset + (old - source.start) } else { 0 },
            path: source.path,
        });
    }
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
    fn mmap_munmap_and_mprotect_split_mappings() {
        let mut g = GuestMaps::new(vec![]);
        g.mmap(
            0x10000,
            0x3000,
            PROT_READ | PROT_EXEC,
            0,
            Some("/lib/x.so".into()),
            0x2000,
        );
        g.mprotect(0x11000, 0x1000, PROT_READ);
        assert_eq!(
            g.current(),
            [
                m(0x10000, 0x11000, "r-xp", Some("/lib/x.so"), 0x2000),
                m(0x11000, 0x12000, "r--p", Some("/lib/x.so"), 0x3000),
                m(0x12000, 0x13000, "r-xp", Some("/lib/x.so"), 0x4000),
            ]
        );
        g.munmap(0x10000, 0x1800);
        assert_eq!(g.current()[0], m(0x12000, 0x13000, "r-xp", Some("/lib/x.so"), 0x4000));
        g.mmap(0x12000, 10, PROT_READ | PROT_WRITE, MAP_SHARED, None, 77);
        assert_eq!(g.current(), [m(0x12000, 0x13000, "rw-s", None, 0)]);
    }

    #[test]
    fn brk_grows_and_shrinks_the_heap() {
        let mut g = GuestMaps::new(vec![m(0x400000, 0x401000, "r-xp", Some("/a"), 0)]);
        g.brk(0x4acd00);
        assert_eq!(g.current().len(), 1);
        g.brk(0x4cf000);
        assert_eq!(g.current()[1], m(0x4ad000, 0x4cf000, "rw-p", Some("[heap]"), 0));
        g.brk(0x4b0000);
        assert_eq!(g.current()[1].end, 0x4b0000);
    }

    #[test]
    fn mremap_moves_a_mapping() {
        let mut g = GuestMaps::new(vec![m(0x10000, 0x12000, "rw-p", None, 0)]);
        g.mremap(0x10000, 0x2000, 0x4000, 0x50000);
        assert_eq!(g.current(), [m(0x50000, 0x54000, "rw-p", None, 0)]);
    }
}

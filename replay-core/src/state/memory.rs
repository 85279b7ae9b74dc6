//! Memory as known bytes: pages copied on write, so a checkpoint is a cheap clone of the
//! page table; read-only image bytes are known everywhere and are not stored here.

use std::sync::Arc;

use super::pages::PageTable;
use super::why::{self, Why};
use crate::image::AddressSpace;

const PAGE: u64 = 4096;

#[derive(Clone)]
struct Page {
    bytes: [u8; PAGE as usize],
    /// One bit per byte.
    known: [u64; PAGE as usize / 64],
    /// Why the unknown bytes of each 64-byte line are unknown (the last cause that forgot
    /// any of them): per line, so a save area forgotten next to older losses in the same
    /// page does not hide their causes.
    why: [Why; LINES],
}

/// 64-byte lines per page.
const LINES: usize = PAGE as usize / 64;

impl Page {
    fn empty(why: Why) -> Self {
        Self {
            bytes: [0; PAGE as usize],
            known: [0; PAGE as usize / 64],
            why: [why; LINES],
        }
    }

    fn is_known(&self, i: usize) -> bool {
        self.known[i / 64] & (1 << (i % 64)) != 0
    }
}

/// The writable memory's known bytes.
#[derive(Clone, Default)]
pub struct Memory {
    pages: PageTable<Page>,
    /// Why the bytes of pages not held are unknown: the last time all memory was forgotten,
    /// or never known.
    why_all: Why,
    /// Ranges the kernel rewrites whenever it returns to the program (a registered rseq
    /// area: its `cpu_id` changes when the thread migrates), so never known.
    volatile: Arc<[(u64, u64)]>,
    /// Unknown bytes of which some bits are known, as (address, value, known bits): MXCSR's
    /// first byte saved with its exception flags unknown but its DAZ bit known. Any write or
    /// forget of the byte drops its entry. Rarely more than one.
    partial: Vec<(u64, u8, u8)>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Memory({} pages)", self.pages.len())
    }
}

impl Memory {
    /// Nothing known.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of pages holding known bytes (for the memory cost).
    pub fn pages(&self) -> usize {
        self.pages.len()
    }

    /// The byte at `addr`, if known here.
    fn byte(&self, addr: u64) -> Option<u8> {
        let page = self.pages.get(addr / PAGE)?;
        let i = (addr % PAGE) as usize;
        page.is_known(i).then_some(page.bytes[i])
    }

    /// The cause recorded for the line holding `addr`.
    fn line_why(&self, addr: u64) -> Why {
        let line = (addr % PAGE) as usize / 64;
        self.pages.get(addr / PAGE).map_or(self.why_all, |p| p.why[line])
    }

    /// Declares ranges the kernel may rewrite at any time: never known.
    pub fn set_volatile(&mut self, ranges: &[(u64, u64)]) {
        self.volatile = ranges.into();
    }

    /// Why the byte at `addr` is unknown, if it is (read-only image bytes are known).
    pub fn why(&self, addr: u64, space: &AddressSpace) -> Option<Why> {
        if self.read_byte(addr, space).is_some() {
            return None;
        }
        if self.volatile.iter().any(|&(a, n)| addr.wrapping_sub(a) < n) {
            return Some(Why {
                cause: why::Cause::KernelUpdated,
                position: 0,
            });
        }
        Some(self.line_why(addr))
    }

    /// The byte at `addr`, if known here or in a read-only image.
    pub fn read_byte(&self, addr: u64, space: &AddressSpace) -> Option<u8> {
        if self.volatile.iter().any(|&(a, n)| addr.wrapping_sub(a) < n) {
            why::saw(Why {
                cause: why::Cause::KernelUpdated,
                position: 0,
            });
            return None;
        }
        match self.byte(addr) {
            Some(b) => Some(b),
            None => {
                let b = space.read_only_bytes_at(addr).and_then(|b| b.first().copied());
                if b.is_none() {
                    why::saw(self.line_why(addr));
                }
                b
            }
        }
    }

    /// `len` bytes at `addr`, if every one is known here or in a read-only image.
    pub fn read(&self, addr: u64, len: usize, space: &AddressSpace) -> Option<Vec<u8>> {
        (0..len as u64)
            .map(|i| self.read_byte(addr.checked_add(i)?, space))
            .collect()
    }

    /// A little-endian value of `bytes` bytes at `addr`, if known.
    pub fn read_u64(&self, addr: u64, bytes: u32, space: &AddressSpace) -> Option<u64> {
        let b = self.read(addr, bytes as usize, space)?;
        let mut v = [0u8; 8];
        v[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
        Some(u64::from_le_bytes(v))
    }

    /// Knows `bytes` at `addr`.
    pub fn write(&mut self, addr: u64, bytes: &[u8]) {
        self.drop_partial(addr, bytes.len() as u64);
        let why_all = self.why_all;
        // Page by page: a file mapping writes megabytes at once.
        let mut done = 0usize;
        while done < bytes.len() {
            let a = addr.wrapping_add(done as u64);
            let j = (a % PAGE) as usize;
            let n = (PAGE as usize - j).min(bytes.len() - done);
            let page = Arc::make_mut(self.pages.get_or_insert_with(a / PAGE, || Page::empty(why_all)));
            page.bytes[j..j + n].copy_from_slice(&bytes[done..done + n]);
            for k in j..j + n {
                page.known[k / 64] |= 1 << (k % 64);
            }
            done += n;
        }
    }

    /// Drops the partly known bytes in `len` bytes at `addr`.
    fn drop_partial(&mut self, addr: u64, len: u64) {
        if !self.partial.is_empty() {
            self.partial.retain(|&(a, ..)| a.wrapping_sub(addr) >= len);
        }
    }

    /// Makes the byte at `addr` unknown but for the bits of `known`, which hold `value`.
    pub fn write_bits(&mut self, addr: u64, value: u8, known: u8) {
        self.forget(addr, 1);
        if known != 0 {
            self.partial.push((addr, value & known, known));
        }
    }

    /// The byte at `addr` and which of its bits are known.
    pub fn read_bits(&self, addr: u64, space: &AddressSpace) -> (u8, u8) {
        match self.read_byte(addr, space) {
            Some(b) => (b, 0xff),
            None => self
                .partial
                .iter()
                .find(|p| p.0 == addr)
                .map_or((0, 0), |&(_, v, k)| (v, k)),
        }
    }

    /// Writes `value` (little-endian, `bytes` wide) or makes those bytes unknown.
    pub fn store(&mut self, addr: u64, bytes: u32, value: Option<u64>) {
        match value {
            Some(v) => self.write(addr, &v.to_le_bytes()[..bytes.min(8) as usize]),
            None => self.forget(addr, u64::from(bytes)),
        }
    }

    /// Makes `len` bytes at `addr` unknown. Costs what the pages it touches cost: a range
    /// with more pages than are known (a huge mapping gone, a system call's length argument)
    /// visits the known pages, not the range.
    pub fn forget(&mut self, addr: u64, len: u64) {
        self.drop_partial(addr, len);
        let end = addr.saturating_add(len);
        if len / PAGE > self.pages.len() as u64 {
            let touched: Vec<u64> = self
                .pages
                .iter()
                .map(|(p, _)| p)
                .filter(|&p| p * PAGE < end && (p + 1).saturating_mul(PAGE) > addr)
                .collect();
            for p in touched {
                self.forget_within(addr.max(p * PAGE), end.min((p + 1).saturating_mul(PAGE)));
            }
            return;
        }
        self.forget_within(addr, end);
    }

    fn forget_within(&mut self, addr: u64, end: u64) {
        let mut a = addr;
        while a < end {
            let p = a / PAGE;
            let page_end = (p + 1).saturating_mul(PAGE).min(end);
            // A page forgotten is kept (its bytes unknown) for the cause it holds.
            if let Some(page) = self.pages.get_mut(p) {
                let page = Arc::make_mut(page);
                let why = why::current();
                if a % PAGE == 0 && page_end - a == PAGE {
                    page.known = [0; PAGE as usize / 64];
                    page.why = [why; LINES];
                } else {
                    for x in a..page_end {
                        let j = (x % PAGE) as usize;
                        page.known[j / 64] &= !(1 << (j % 64));
                        page.why[j / 64] = why;
                    }
                }
            }
            if page_end == a {
                break;
            }
            a = page_end;
        }
    }

    /// Learns every byte `other` knows and this does not.
    pub fn absorb(&mut self, other: &Memory) {
        for (p, theirs) in other.pages.iter() {
            match self.pages.get_mut(p) {
                None => {
                    self.pages.insert(p, theirs.clone());
                }
                Some(mine) if Arc::ptr_eq(mine, theirs) => {}
                Some(mine) => {
                    let new = theirs.known.iter().zip(&mine.known).any(|(t, m)| t & !m != 0);
                    if new {
                        let page = Arc::make_mut(mine);
                        for i in 0..PAGE as usize {
                            if theirs.is_known(i) && !page.is_known(i) {
                                page.bytes[i] = theirs.bytes[i];
                                page.known[i / 64] |= 1 << (i % 64);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Makes all writable memory unknown: what a store to an address nobody knows does, since
    /// it may have written anywhere.
    pub fn forget_all(&mut self) {
        self.pages.clear();
        self.partial.clear();
        self.why_all = why::current();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Image;

    #[test]
    fn bytes_are_known_where_written_or_read_only() {
        let mut space = AddressSpace::new();
        space.add(Image::from_raw("ro", 0x1000, vec![1, 2, 3, 4])).expect("add");
        let mut m = Memory::new();
        m.write(0x2ffe, &[9, 8, 7, 6]);
        assert_eq!(
            m.read(0x2ffe, 4, &space),
            Some(vec![9, 8, 7, 6]),
            "across a page boundary"
        );
        assert_eq!(m.read(0x2ffd, 2, &space), None);
        assert_eq!(m.read(0x1001, 2, &space), Some(vec![2, 3]), "read-only image bytes");
        let snapshot = m.clone();
        m.forget(0x2fff, 2);
        assert_eq!(m.read(0x2ffe, 1, &space), Some(vec![9]));
        assert_eq!(m.read(0x2fff, 1, &space), None);
        assert_eq!(m.read(0x3001, 1, &space), Some(vec![6]));
        assert_eq!(
            snapshot.read(0x2fff, 2, &space),
            Some(vec![8, 7]),
            "checkpoints are copies"
        );
        m.store(0x5000, 8, Some(0x1122_3344_5566_7788));
        assert_eq!(m.read_u64(0x5000, 8, &space), Some(0x1122_3344_5566_7788));
        m.forget(0x5000, 4096);
        assert_eq!(m.read_u64(0x5000, 1, &space), None);
        m.forget_all();
        assert_eq!(m.pages(), 0);
        assert_eq!(m.read(0x1000, 1, &space), Some(vec![1]));
    }

    #[test]
    fn forgetting_a_huge_range_visits_only_the_known_pages() {
        let mut m = Memory::new();
        m.write(0x1000, &[1, 2, 3]);
        m.write(0x7fff_0000_0ffe, &[4, 5, 6, 7]);
        // A terabyte-sized unmapping that clips the second write.
        m.forget(0x7fff_0000_1000, 1 << 40);
        let space = AddressSpace::new();
        assert_eq!(m.read(0x1000, 3, &space), Some(vec![1, 2, 3]));
        assert_eq!(m.read(0x7fff_0000_0ffe, 2, &space), Some(vec![4, 5]));
        assert_eq!(m.read(0x7fff_0000_1000, 1, &space), None);
        // The whole address space, for a cause the forgotten pages keep.
        why::begin(why::Cause::MapChange, 9);
        m.forget(0, u64::MAX);
        assert_eq!(m.read(0x1000, 1, &space), None);
        assert_eq!(m.read(0x7fff_0000_0ffe, 1, &space), None);
        assert_eq!(
            m.why(0x1001, &space),
            Some(Why {
                cause: why::Cause::MapChange,
                position: 9
            })
        );
    }
}

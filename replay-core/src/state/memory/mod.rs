//! Memory as known bytes: pages of segments copied on write ([`page`]) in a two-level table
//! ([`table`]), so a checkpoint is a cheap clone of the table; read-only image bytes are
//! known everywhere and are not stored here.

mod footprint;
pub mod log;
mod page;
mod recent;
mod table;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use super::why::{self, Why};
use crate::image::AddressSpace;
pub use footprint::Footprint;
use page::{Page, SEG};
use recent::Recent;
use table::PageTable;

const PAGE: u64 = page::PAGE as u64;

/// The writable memory's known bytes.
#[derive(Default)]
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
    /// What no store writes now ([`crate::state::readonly`]): kept when a store through an
    /// unknown address forgets the rest.
    readonly: Arc<[(u64, u64)]>,
    /// Nothing was learnt since the last [`Self::forget_all`] (only forgotten): another one
    /// has nothing to drop. A walk whose stack pointer is unknown forgets all memory at every
    /// push and call, and rebuilding the page table each time took a 139 M-instruction
    /// python3's first look at its end from 1 s to 50 s.
    settled: bool,
    /// The segments used last ([`recent`]): dropped at every change to `pages` but a store
    /// through one of them.
    recent: Recent,
}

impl Clone for Memory {
    fn clone(&self) -> Self {
        // What this owned alone is shared with the clone from now on.
        self.recent.shared();
        Self {
            pages: self.pages.clone(),
            why_all: self.why_all,
            volatile: self.volatile.clone(),
            partial: self.partial.clone(),
            readonly: self.readonly.clone(),
            settled: self.settled,
            recent: Recent::default(),
        }
    }
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

    /// Counts what this holds that `f` has not seen yet.
    pub fn footprint(&self, f: &mut Footprint) {
        f.first(Arc::as_ptr(&self.volatile), self.volatile.len() * 16);
        f.first(Arc::as_ptr(&self.readonly).cast::<u8>(), self.readonly.len() * 16);
        self.pages.footprint(f, Page::footprint);
    }

    /// The byte at `addr`, if known here.
    fn byte(&self, addr: u64) -> Option<u8> {
        self.pages.get(addr / PAGE)?.byte((addr % PAGE) as usize)
    }

    /// The cause recorded for the unknown byte at `addr`.
    fn line_why(&self, addr: u64) -> Why {
        self.pages
            .get(addr / PAGE)
            .map_or(self.why_all, |p| p.why((addr % PAGE) as usize))
    }

    /// Sets what no store writes from now on ([`crate::state::readonly`]).
    pub fn set_readonly(&mut self, ranges: Arc<[(u64, u64)]>) {
        self.recent.clear();
        self.readonly = ranges;
        self.settled = false;
    }

    /// Declares ranges the kernel may rewrite at any time: never known.
    pub fn set_volatile(&mut self, ranges: &[(u64, u64)]) {
        self.recent.clear();
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
        let mut out = vec![0; len];
        self.read_into(addr, &mut out, space).then_some(out)
    }

    /// A little-endian value of `bytes` bytes at `addr`, if known.
    pub fn read_u64(&self, addr: u64, bytes: u32, space: &AddressSpace) -> Option<u64> {
        // Bytes held whole in one segment, nothing volatile among them: nearly every load.
        if self.volatile.is_empty() || !self.is_volatile(addr, u64::from(bytes)) {
            let j = (addr % PAGE) as usize;
            if let Some(v) = self.pages.get(addr / PAGE).and_then(|p| p.small(j, bytes as usize)) {
                return Some(v);
            }
        }
        let mut v = [0u8; 8];
        match bytes as usize {
            n @ 0..=8 => self.read_into(addr, &mut v[..n], space).then_some(())?,
            n => v.copy_from_slice(&self.read(addr, n, space)?[..8]),
        }
        Some(u64::from_le_bytes(v))
    }

    /// What [`Self::read_u64`] gives, through the segments used last ([`recent`]): the walk's
    /// loads.
    #[inline]
    #[allow(unsafe_code)]
    pub fn load(&mut self, addr: u64, bytes: u32, space: &AddressSpace) -> Option<u64> {
        let (s, off, n) = (addr / SEG as u64, (addr % SEG as u64) as usize, bytes as usize);
        if n <= 8 && off + n <= SEG && (self.volatile.is_empty() || !self.is_volatile(addr, n as u64)) {
            if let Some((seg, _)) = self.recent.get(s) {
                // SAFETY: an entry's segment is the one the table holds, and alive; nothing
                // writes it while `self` is borrowed ([`recent`]).
                return Some(unsafe { seg.small(off, n) });
            }
            let j = (addr % PAGE) as usize;
            if let Some(seg) = self.pages.get(addr / PAGE).and_then(|p| p.known_segment(j)) {
                self.recent.put(s, seg, false);
                // SAFETY: the table holds it, and `self` is borrowed.
                return Some(unsafe { seg.small(off, n) });
            }
        }
        self.read_u64(addr, bytes, space)
    }

    /// Fills `out` with the bytes at `addr`; false at the first byte not known (whose cause
    /// is noted, as [`Self::read_byte`] does).
    fn read_into(&self, addr: u64, out: &mut [u8], space: &AddressSpace) -> bool {
        if !self.is_volatile(addr, out.len() as u64) && self.read_held(addr, out) {
            return true;
        }
        for (i, o) in out.iter_mut().enumerate() {
            match addr.checked_add(i as u64).and_then(|a| self.read_byte(a, space)) {
                Some(b) => *o = b,
                None => return false,
            }
        }
        true
    }

    /// Fills `out` with the bytes at `addr` if every one is known in the pages held (not
    /// read-only image bytes), with no note of a cause either way: a vector load's bytes at
    /// once, where [`Self::read_byte`] looks each up.
    pub fn read_known(&self, addr: u64, out: &mut [u8]) -> bool {
        !self.is_volatile(addr, out.len() as u64) && self.read_held(addr, out)
    }

    /// Whether any of the `len` bytes at `addr` is in a volatile range (never known).
    fn is_volatile(&self, addr: u64, len: u64) -> bool {
        self.volatile
            .iter()
            .any(|&(a, n)| addr < a.saturating_add(n) && a < addr.saturating_add(len))
    }

    /// Fills `out` if every byte at `addr` is known in the pages held: a segment at a time,
    /// where a byte at a time looked each up from the top (9 % of python3's walk).
    fn read_held(&self, addr: u64, out: &mut [u8]) -> bool {
        let mut done = 0;
        while done < out.len() {
            let Some(a) = addr.checked_add(done as u64) else {
                return false;
            };
            let j = (a % PAGE) as usize;
            let n = (PAGE as usize - j).min(out.len() - done);
            match self.pages.get(a / PAGE) {
                Some(page) if page.read(j, &mut out[done..done + n]) => done += n,
                _ => return false,
            }
        }
        true
    }

    /// Knows `bytes` at `addr`. A write of what is already known copies nothing.
    pub fn write(&mut self, addr: u64, bytes: &[u8]) {
        log::note(addr, bytes.len() as u64);
        self.recent.clear();
        self.settled = false;
        self.drop_partial(addr, bytes.len() as u64);
        let why_all = self.why_all;
        // Page by page: a file mapping writes megabytes at once.
        let mut done = 0usize;
        while done < bytes.len() {
            let a = addr.wrapping_add(done as u64);
            let j = (a % PAGE) as usize;
            let n = (PAGE as usize - j).min(bytes.len() - done);
            let src = &bytes[done..done + n];
            done += n;
            if self.pages.get(a / PAGE).is_some_and(|p| !p.write_changes(j, src)) {
                continue;
            }
            let page = self.pages.get_or_insert_with(a / PAGE, || Page::unknown(why_all));
            Arc::make_mut(page).write(j, src);
        }
    }

    /// Knows `len` bytes at `addr` to be zero (a new anonymous mapping, which the kernel
    /// fills with zeros): whole pages share one page of zeros, so a mapping costs a slot a
    /// page until written (sort's 1.1 MB buffer was forgotten instead, being over the bound a
    /// write of zeros had, and every value copied from its unwritten bytes was unknown).
    pub fn zero(&mut self, addr: u64, len: u64) {
        log::note(addr, len);
        let end = addr.saturating_add(len);
        let (first, last) = (addr.next_multiple_of(PAGE), end / PAGE * PAGE);
        if first >= last {
            return self.write(addr, &vec![0; (end - addr) as usize]);
        }
        self.drop_partial(addr, len);
        self.settled = false;
        self.recent.clear();
        self.write(addr, &vec![0; (first - addr) as usize]);
        let zeros = Arc::new(Page::zeros());
        for p in first / PAGE..last / PAGE {
            self.pages.insert(p, zeros.clone());
        }
        self.write(last, &vec![0; (end - last) as usize]);
    }

    /// Drops the partly known bytes in `len` bytes at `addr`.
    fn drop_partial(&mut self, addr: u64, len: u64) {
        if !self.partial.is_empty() {
            self.partial.retain(|&(a, ..)| a.wrapping_sub(addr) >= len);
        }
    }

    /// Makes the byte at `addr` unknown but for the bits of `known`, which hold `value` (all
    /// of them: the byte, known).
    pub fn write_bits(&mut self, addr: u64, value: u8, known: u8) {
        if known == 0xff {
            return self.write(addr, &[value]);
        }
        self.forget(addr, 1);
        if known != 0 {
            self.settled = false;
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
            Some(v) if self.store_recent(addr, bytes.min(8) as usize, v) => {}
            Some(v) if self.store_known(addr, bytes.min(8) as usize, v) => {}
            Some(v) => self.write(addr, &v.to_le_bytes()[..bytes.min(8) as usize]),
            None => self.forget(addr, u64::from(bytes)),
        }
    }

    /// What [`Self::write`] does for a store of `n` bytes (at most 8) into bytes all known in
    /// one segment (nearly every store of a walk), with one look in the table and no copy or
    /// comparison of a length known only at run time; false, having done nothing, in any
    /// other case.
    #[inline]
    fn store_known(&mut self, addr: u64, n: usize, v: u64) -> bool {
        let (p, j) = (addr / PAGE, (addr % PAGE) as usize);
        let Some(held) = self.pages.get(p).and_then(|page| page.small(j, n)) else {
            return false;
        };
        log::note(addr, n as u64);
        self.settled = false;
        self.drop_partial(addr, n as u64);
        if held != v & super::reg::mask(n as u32) {
            // The chunk, the page and the segment are made this table's own: the segment
            // may be written in place until the table changes otherwise or is cloned.
            let seg = self
                .pages
                .get_mut(p)
                .and_then(|page| Arc::make_mut(page).store_known(j, n, v));
            match seg {
                Some(seg) => self.recent.put(addr / SEG as u64, seg, true),
                None => self.recent.clear(),
            }
        }
        true
    }

    /// What [`Self::store_known`] does, for a store within a segment held writable among the
    /// ones used last ([`recent`]); false, having done nothing, in any other case.
    #[inline]
    #[allow(unsafe_code)]
    fn store_recent(&mut self, addr: u64, n: usize, v: u64) -> bool {
        let (s, off) = (addr / SEG as u64, (addr % SEG as u64) as usize);
        if off + n > SEG {
            return false;
        }
        self.recent.unshared();
        let Some((seg, true)) = self.recent.get(s) else {
            return false;
        };
        log::note(addr, n as u64);
        self.settled = false;
        self.drop_partial(addr, n as u64);
        // SAFETY: a writable entry's segment is this table's alone, alive, and not referred
        // to elsewhere while `self` is borrowed mutably ([`recent`]).
        unsafe { seg.store(off, n, v) };
        true
    }

    /// Makes `len` bytes at `addr` unknown. Costs what the pages it touches cost: a range
    /// with more pages than are known (a huge mapping gone, a system call's length argument)
    /// visits the known pages, not the range.
    pub fn forget(&mut self, addr: u64, len: u64) {
        log::note(addr, len);
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
        let why = why::current();
        let mut a = addr;
        while a < end {
            let p = a / PAGE;
            let page_end = (p + 1).saturating_mul(PAGE).min(end);
            let (j, n) = ((a % PAGE) as usize, (page_end - a) as usize);
            // A page forgotten is kept (its bytes unknown) for the cause it holds.
            if self.pages.get(p).is_some_and(|page| page.forget_changes(j, n, why)) {
                self.recent.clear();
                if let Some(page) = self.pages.get_mut(p) {
                    Arc::make_mut(page).forget(j, n, why);
                }
            }
            if page_end == a {
                break;
            }
            a = page_end;
        }
    }

    /// Whether this knows every byte `other` knows, with the same value (partly known bytes
    /// in `other`, which are rare, count as not covered).
    pub fn covers(&self, other: &Memory) -> bool {
        other.partial.is_empty()
            && other.pages.iter().all(|(p, theirs)| match self.pages.get(p) {
                Some(mine) => Arc::ptr_eq(mine, theirs) || mine.covers(theirs),
                None => theirs.knows_nothing(),
            })
    }

    /// Learns every byte `other` knows and this does not.
    pub fn absorb(&mut self, other: &Memory) {
        self.settled = false;
        self.recent.clear();
        for (p, theirs) in other.pages.iter() {
            match self.pages.get(p) {
                None => self.pages.insert(p, theirs.clone()),
                Some(mine) if Arc::ptr_eq(mine, theirs) || !mine.lacks(theirs) => {}
                Some(_) => {
                    if let Some(mine) = self.pages.get_mut(p) {
                        Arc::make_mut(mine).absorb(theirs);
                    }
                }
            }
        }
    }

    /// Makes all writable memory unknown: what a store to an address nobody knows does, since
    /// it may have written anywhere.
    pub fn forget_all(&mut self) {
        log::note_all();
        if !self.settled {
            self.recent.clear();
            self.pages = self.pages.within(&self.readonly, PAGE);
            self.partial.clear();
            self.settled = true;
        }
        self.why_all = why::current();
    }
}

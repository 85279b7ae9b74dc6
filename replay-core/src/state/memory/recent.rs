//! The segments a memory read or stored lately, by segment number: a walk's loads and stores
//! go to the same few stack slots and objects over and over, and each went through the page
//! table's hash, a chunk, a page and a segment, with three atomic copy-on-write checks for a
//! store (a quarter of the background fill's time on python3). A hit here is one compare and
//! one load; three loads in four and three stores in four hit on python3's walk.
//!
//! Only segments whose bytes are all known are held. The rules that make the pointers sound
//! are kept by [`super::Memory`]:
//! - every change to its table other than a store through a writable entry drops every entry
//!   ([`Recent::clear`]), so an entry's segment is the one the table holds at its number, and
//!   alive;
//! - an entry is writable only if the store that made it copied the chunk, the page and the
//!   segment to be this table's own ([`super::page::Page::store_known`]), and a clone of the
//!   memory (which shares them again) drops every entry before the next store
//!   ([`Recent::shared`], [`Recent::unshared`]);
//! - entries are used through `&mut` of the memory only, so no two threads use one.

use std::sync::atomic::{AtomicBool, Ordering};

use super::page::SegmentRef;

/// Entries, indexed by the segment number's low bits.
const WAYS: usize = 256;

/// Bits of a key that hold the segment number: user space is 2^47 bytes, 2^39 segments.
const NUMBER_BITS: u32 = 40;

/// A key no entry matches.
const NONE: u64 = u64::MAX;

#[derive(Clone, Copy)]
struct Entry {
    /// The segment number, and above it the generation the entry was made in.
    key: u64,
    seg: Option<SegmentRef>,
    writable: bool,
}

/// The entries (made at the first use: a memory cloned and never walked has none).
pub(super) struct Recent {
    entries: Option<Box<[Entry; WAYS]>>,
    /// The generation of the entries held: [`Recent::clear`] starts a new one.
    generation: u64,
    /// Set when the memory is cloned (through `&self`): its writable entries are shared now.
    cloned: AtomicBool,
}

impl Default for Recent {
    fn default() -> Self {
        Self {
            entries: None,
            generation: 0,
            cloned: AtomicBool::new(false),
        }
    }
}

// SAFETY: the pointers are to segments that the memory's own table holds (each an `Arc`'s,
// which is `Send` and `Sync`), and are used only through `&mut` of the memory (module docs).
#[allow(unsafe_code)]
unsafe impl Send for Recent {}
// SAFETY: as for `Send`; a `&Recent` is only marked as shared ([`Recent::shared`]), atomically.
#[allow(unsafe_code)]
unsafe impl Sync for Recent {}

impl Recent {
    /// The key of segment number `s` in this generation.
    #[inline]
    fn key(&self, s: u64) -> u64 {
        s | self.generation << NUMBER_BITS
    }

    /// The entry of segment number `s`, if held, and whether it may be written.
    #[inline]
    pub(super) fn get(&self, s: u64) -> Option<(SegmentRef, bool)> {
        let e = &self.entries.as_ref()?[(s % WAYS as u64) as usize];
        if e.key != self.key(s) {
            return None;
        }
        Some((e.seg?, e.writable))
    }

    /// Holds `seg` as segment number `s`, writable or not.
    #[inline]
    pub(super) fn put(&mut self, s: u64, seg: SegmentRef, writable: bool) {
        if s >> NUMBER_BITS != 0 {
            return;
        }
        let key = self.key(s);
        let entries = self.entries.get_or_insert_with(|| {
            Box::new(
                [Entry {
                    key: NONE,
                    seg: None,
                    writable: false,
                }; WAYS],
            )
        });
        entries[(s % WAYS as u64) as usize] = Entry {
            key,
            seg: Some(seg),
            writable,
        };
    }

    /// Drops every entry: the table changed. A new generation, so that no key made before
    /// matches; when the generations wrap, the keys are cleared.
    #[inline]
    pub(super) fn clear(&mut self) {
        self.generation = (self.generation + 1) % (1 << (64 - NUMBER_BITS));
        if self.generation == 0 {
            if let Some(entries) = &mut self.entries {
                entries.iter_mut().for_each(|e| e.key = NONE);
            }
        }
    }

    /// Drops every entry if the memory was cloned since the last look: what it owned alone
    /// is shared now.
    #[inline]
    pub(super) fn unshared(&mut self) {
        if *self.cloned.get_mut() {
            *self.cloned.get_mut() = false;
            self.clear();
        }
    }

    /// Notes that the memory was cloned.
    pub(super) fn shared(&self) {
        self.cloned.store(true, Ordering::Relaxed);
    }
}

//! The index of written addresses (issue 41): for each block of [`BLOCK`] positions of a
//! stretch between two exact states, the byte ranges its instructions and the kernel wrote or
//! made unknown, as the fill's forward walk met them (`memory::log`), or that anything may
//! have been written (a store through an address the walk did not know). A search for writes
//! walks only the blocks whose ranges touch the watched bytes: the index never leaves out a
//! write the walk makes, and a block it does not name is known to write none.
//!
//! Each block's ranges are merged and sorted, then kept as pairs of LEB128 numbers (the gap
//! from the end of the range before, the length): a few bytes a range, tens of ranges a block.

use std::sync::OnceLock;

use super::super::memory::log::Noted;
use super::{Watch, WatchKind};

/// Positions in a block: a search walks at least this many where a watched byte is written
/// (a fraction of a millisecond).
pub const BLOCK: u64 = 1 << 12;

/// What one stretch's blocks wrote.
#[derive(Debug, Clone, Default)]
pub struct StretchWrites {
    /// Where each block's ranges start in `bytes` (one more at the end).
    offsets: Vec<u32>,
    /// Blocks where anything may have been written, a bit each.
    all: Vec<u64>,
    bytes: Vec<u8>,
}

impl StretchWrites {
    /// Adds the next block's writes.
    pub fn push(&mut self, noted: Noted) {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        let block = self.offsets.len() - 1;
        if block % 64 == 0 {
            self.all.push(0);
        }
        if noted.all {
            self.all[block / 64] |= 1 << (block % 64);
        }
        let mut ranges = noted.ranges;
        ranges.sort_unstable();
        let mut end = 0u64;
        let mut merged: Option<(u64, u64)> = None;
        for (a, n) in ranges {
            let e = a.saturating_add(n);
            match &mut merged {
                Some((_, me)) if a <= *me => *me = (*me).max(e),
                _ => {
                    if let Some((s, me)) = merged.replace((a, e)) {
                        put(&mut self.bytes, s - end);
                        put(&mut self.bytes, me - s);
                        end = me;
                    }
                }
            }
        }
        if let Some((s, me)) = merged {
            put(&mut self.bytes, s - end);
            put(&mut self.bytes, me - s);
        }
        self.offsets.push(u32::try_from(self.bytes.len()).unwrap_or(u32::MAX));
    }

    /// Blocks held.
    #[cfg(test)]
    pub fn blocks(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// Bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.offsets.capacity() * 4 + self.all.capacity() * 8 + self.bytes.capacity()
    }

    /// Whether block `b` may write a byte one of `watches` waits for a write of (`true` for a
    /// block not held).
    pub fn may_write(&self, b: usize, watches: &[Watch]) -> bool {
        let (Some(&from), Some(&to)) = (self.offsets.get(b), self.offsets.get(b + 1)) else {
            return true;
        };
        if self.all.get(b / 64).is_some_and(|w| w & (1 << (b % 64)) != 0) {
            return true;
        }
        let mut bytes = &self.bytes[from as usize..to as usize];
        let mut end = 0u64;
        while !bytes.is_empty() {
            let start = end.saturating_add(take(&mut bytes));
            end = start.saturating_add(take(&mut bytes));
            let touched = |w: &Watch| w.address < end && start < w.address.saturating_add(w.len);
            if watches.iter().any(|w| w.kind != WatchKind::Read && touched(w)) {
                return true;
            }
        }
        false
    }
}

/// Appends `v` as LEB128.
fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 number from the front of `bytes`.
fn take(bytes: &mut &[u8]) -> u64 {
    let (mut v, mut shift) = (0u64, 0);
    while let Some((&b, rest)) = bytes.split_first() {
        *bytes = rest;
        v |= u64::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
        shift += 7;
        if b & 0x80 == 0 {
            break;
        }
    }
    v
}

/// Every stretch's writes, each set once its forward walk is done.
pub struct WriteIndex {
    stretches: Box<[OnceLock<StretchWrites>]>,
}

impl WriteIndex {
    /// An index of `n` stretches, none done.
    pub fn new(n: usize) -> Self {
        Self {
            stretches: (0..n).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Stretch `i`'s writes, once walked.
    pub fn set(&self, i: usize, writes: StretchWrites) {
        if let Some(s) = self.stretches.get(i) {
            let _ = s.set(writes);
        }
    }

    /// Stretch `i`'s writes, if walked.
    pub fn get(&self, i: usize) -> Option<&StretchWrites> {
        self.stretches.get(i)?.get()
    }

    /// Bytes held, and stretches done.
    pub fn size(&self) -> (usize, usize) {
        let done = self.stretches.iter().filter_map(OnceLock::get);
        done.fold((0, 0), |(b, n), s| (b + s.heap_bytes(), n + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(address: u64, len: u64) -> Watch {
        Watch {
            address,
            len,
            kind: WatchKind::Write,
        }
    }

    #[test]
    fn a_block_names_the_bytes_it_wrote_and_no_others() {
        let mut s = StretchWrites::default();
        // Block 0: a push below 0x7ff0, an overlapping store, a far one.
        s.push(Noted {
            ranges: vec![(0x7fe8, 8), (0x7fe0, 12), (0x40_0000, 4)],
            all: false,
        });
        // Block 1: nothing. Block 2: a store through an unknown address.
        s.push(Noted::default());
        s.push(Noted {
            ranges: vec![],
            all: true,
        });
        assert_eq!(s.blocks(), 3);
        assert!(s.may_write(0, &[w(0x7fe0, 1)]) && s.may_write(0, &[w(0x7fef, 8)]));
        assert!(s.may_write(0, &[w(0x40_0003, 1)]) && s.may_write(0, &[w(0x3f_fffc, 5)]));
        assert!(!s.may_write(0, &[w(0x7ff0, 8)]) && !s.may_write(0, &[w(0x7fd8, 8)]));
        assert!(!s.may_write(0, &[w(0x40_0004, 4)]));
        assert!(!s.may_write(1, &[w(0x7fe0, 100)]));
        assert!(s.may_write(2, &[w(1, 1)]), "anything, after an unknown store");
        assert!(s.may_write(3, &[w(1, 1)]), "a block not held");
        // A read watchpoint is not the index's to answer.
        let read = Watch {
            kind: WatchKind::Read,
            ..w(0x7fe0, 1)
        };
        assert!(!s.may_write(0, &[read]));
    }

    #[test]
    fn numbers_round_trip() {
        for v in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            put(&mut out, v);
            let mut b = &out[..];
            assert_eq!(take(&mut b), v);
            assert!(b.is_empty());
        }
    }
}

//! Which code each stretch of the history ran (issue 40, "the end at once"): the recorder
//! cuts the history into stretches of about [`STRETCH`] positions and notes, for each, every
//! 4 KiB page holding an instruction that ran in it. A `continue` asked before the trace is
//! decoded can then tell that no breakpoint runs before the end, and stop there at once:
//! the end's state is in the recording, and only the decode would say where a breakpoint
//! in between is hit.
//!
//! A page listed may hold no instruction that ran (a block's pages are noted whole, and a
//! block under way at a cut in both stretches): the list says where code may have run, and
//! never leaves out where it did. The decoded history is checked against it
//! (`Timeline::code_outside`) so that a list that left something out is an error, never a
//! breakpoint passed over.
//!
//! `code-ran.bin`: [`MAGIC`], then one record a stretch, in order: the position that ends
//! it (exclusive) less the one before (LEB128), how many pages (LEB128), and the pages'
//! numbers (address / 4096), ascending, each less the one before (the first less 0).

use super::{files, Recording, RecordingError};

use std::ops::Range;

/// The file's first bytes.
pub const MAGIC: &[u8; 8] = b"rtitCR01";

/// Positions a stretch holds, at least (the recorder cuts at the first chance after).
pub const STRETCH: u64 = 1 << 20;

/// Bytes in a page.
const PAGE_SHIFT: u32 = 12;

/// The stretches and the code pages each ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CodeRan {
    /// Where each stretch ends (exclusive), ascending.
    ends: Vec<u64>,
    /// Where each stretch's pages start in `pages` (one more than `ends`).
    from: Vec<usize>,
    /// The page numbers, each stretch's ascending.
    pages: Vec<u64>,
}

/// Appends a stretch to `out` (the file's bytes after [`MAGIC`]): it ends at `end` (the one
/// before at `before`) and ran code in `pages` (page numbers, ascending, each once).
pub fn encode_stretch(before: u64, end: u64, pages: &[u64], out: &mut Vec<u8>) {
    leb128(end - before, out);
    leb128(pages.len() as u64, out);
    let mut last = 0;
    for &p in pages {
        leb128(p - last, out);
        last = p;
    }
}

/// The pages of `addresses`, sorted, each once.
fn pages_of(addresses: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let mut pages: Vec<u64> = addresses.into_iter().map(|a| a >> PAGE_SHIFT).collect();
    pages.sort_unstable();
    pages.dedup();
    pages
}

fn leb128(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Reads a LEB128 number at `*at`; `None` if it runs past the end or over 64 bits.
fn read_leb128(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

impl CodeRan {
    /// Parses the file's bytes; an error names the byte offset and what is wrong there.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        if !bytes.starts_with(MAGIC) {
            return Err("byte 0: not a list of the code each stretch ran (rtitCR01)".into());
        }
        let mut at = MAGIC.len();
        let mut c = CodeRan {
            from: vec![0],
            ..Self::default()
        };
        let mut end = 0u64;
        while at < bytes.len() {
            let record = at;
            let bad = |what: &str| format!("byte {record}: {what}");
            let step = read_leb128(bytes, &mut at).ok_or_else(|| bad("a stretch's length runs past the file"))?;
            if step == 0 {
                return Err(bad("a stretch of no positions"));
            }
            end = end.checked_add(step).ok_or_else(|| bad("positions past 2^64"))?;
            let n = read_leb128(bytes, &mut at).ok_or_else(|| bad("a page count runs past the file"))?;
            if n > (bytes.len() - at) as u64 {
                return Err(bad("more pages than the file has bytes"));
            }
            let mut page = 0u64;
            for i in 0..n {
                let at_page = at;
                let d = read_leb128(bytes, &mut at)
                    .ok_or_else(|| format!("byte {at_page}: a page number runs past the file"))?;
                if i > 0 && d == 0 {
                    return Err(format!("byte {at_page}: a page listed twice"));
                }
                page = page
                    .checked_add(d)
                    .filter(|&p| p < 1 << (64 - PAGE_SHIFT))
                    .ok_or_else(|| format!("byte {at_page}: a page past the address space"))?;
                c.pages.push(page);
            }
            c.ends.push(end);
            c.from.push(c.pages.len());
        }
        Ok(c)
    }

    /// Where the last stretch ends: the positions the list covers.
    pub fn covers(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    fn pages_of(&self, i: usize) -> &[u64] {
        &self.pages[self.from[i]..self.from[i + 1]]
    }

    /// Whether an instruction at one of `addresses` may have run at a position in
    /// `from..to`: false only where the list says no such page ran code there (and covers
    /// the whole range).
    pub fn may_run(&self, from: u64, to: u64, addresses: impl IntoIterator<Item = u64>) -> bool {
        !self.may_run_in(from, to, addresses).is_empty()
    }

    /// The parts of `from..to` where one of `addresses` may have run: the stretches that
    /// ran code on one of their pages, next ones merged, cut to the range, in order. The
    /// whole range where the list does not cover it.
    pub fn may_run_in(&self, from: u64, to: u64, addresses: impl IntoIterator<Item = u64>) -> Vec<Range<u64>> {
        if from >= to {
            return Vec::new();
        }
        let (Some(first), Some(last)) = (self.stretch_of(from), self.stretch_of(to - 1)) else {
            return std::iter::once(from..to).collect();
        };
        let pages = pages_of(addresses);
        let mut parts: Vec<Range<u64>> = Vec::new();
        for i in first..=last {
            if !pages.iter().any(|p| self.pages_of(i).binary_search(p).is_ok()) {
                continue;
            }
            let start = if i == 0 { 0 } else { self.ends[i - 1] }.max(from);
            let end = self.ends[i].min(to);
            match parts.last_mut() {
                Some(r) if r.end == start => r.end = end,
                _ => parts.push(start..end),
            }
        }
        parts
    }

    /// The stretch holding position `p`, if the list covers it.
    pub fn stretch_of(&self, p: u64) -> Option<usize> {
        let i = self.ends.partition_point(|&e| e <= p);
        (i < self.ends.len()).then_some(i)
    }

    /// Where stretch `i` ends (exclusive).
    pub fn end_of(&self, i: usize) -> u64 {
        self.ends[i]
    }

    /// Whether the list says code at `address` may have run in stretch `i`.
    pub fn ran(&self, i: usize, address: u64) -> bool {
        self.pages_of(i).binary_search(&(address >> PAGE_SHIFT)).is_ok()
    }
}

impl Recording {
    /// The code each stretch of the history ran, if the recorder noted it, or an error
    /// naming the file and the byte. Whether it covers the history is for the decode to say
    /// ([`CodeRan::covers`]): a history shorter than the manifest counts is incomplete first.
    pub fn code_ran(&self) -> Result<Option<CodeRan>, RecordingError> {
        let Some(bytes) = self.read_optional(files::CODE_RAN)? else {
            return Ok(None);
        };
        CodeRan::decode(&bytes)
            .map(Some)
            .map_err(|message| RecordingError::Invalid {
                path: self.dir.join(files::CODE_RAN).display().to_string(),
                message,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        encode_stretch(0, 100, &[0x400, 0x401, 0x7000], &mut out);
        encode_stretch(100, 250, &[0x401], &mut out);
        encode_stretch(250, 251, &[], &mut out);
        out
    }

    #[test]
    fn stretches_round_trip_and_answer() {
        let c = CodeRan::decode(&sample()).expect("decodes");
        assert_eq!(c.covers(), 251);
        assert!(c.may_run(0, 100, [0x400_123]));
        assert!(!c.may_run(100, 251, [0x400_123]), "page 0x400 ran only before 100");
        assert!(c.may_run(99, 251, [0x400_123]), "position 99 is in the first stretch");
        assert!(c.may_run(100, 251, [0x400_123, 0x401_fff]));
        assert!(!c.may_run(250, 251, [0x401_000]));
        assert!(c.may_run(250, 252, [0x401_000]), "past what the list covers: maybe");
        assert!(!c.may_run(5, 5, [0x400_000]), "an empty range runs nothing");
        assert_eq!(
            c.may_run_in(0, 251, [0x401_000]),
            vec![(0..250)],
            "two stretches merged"
        );
        assert_eq!(c.may_run_in(5, 200, [0x401_000]), vec![(5..200)], "cut to the range");
        assert_eq!(
            c.may_run_in(100, 251, [0x400_000]),
            vec![],
            "page 0x400 never after 100"
        );
        assert_eq!(
            c.may_run_in(0, 300, [0x0999_9000]),
            vec![(0..300)],
            "past the list: everywhere"
        );
        let mut late = MAGIC.to_vec();
        encode_stretch(0, 100, &[1], &mut late);
        encode_stretch(100, 200, &[2], &mut late);
        encode_stretch(200, 300, &[1, 3], &mut late);
        let late = CodeRan::decode(&late).expect("a list");
        assert_eq!(late.may_run_in(10, 300, [0x1000]), vec![10..100, 200..300]);
        assert_eq!(late.may_run_in(10, 300, [0x3000, 0x2000]), vec![(100..300)]);
        assert_eq!(late.may_run_in(10, 250, [0x5000]), vec![]);
        assert_eq!(c.stretch_of(99), Some(0));
        assert_eq!(c.stretch_of(100), Some(1));
        assert_eq!(c.stretch_of(251), None);
        assert_eq!(c.end_of(1), 250);
        assert!(c.ran(0, 0x0700_0abc) && !c.ran(1, 0x0700_0abc));
    }

    #[test]
    fn damage_is_placed() {
        let good = sample();
        let e = CodeRan::decode(&good[1..]).expect_err("no magic");
        assert!(e.starts_with("byte 0"), "{e}");
        assert_eq!(CodeRan::decode(MAGIC).expect("no stretch").covers(), 0);
        let e = CodeRan::decode(&good[..good.len() - 1]).expect_err("cut short");
        assert!(e.contains("runs past the file") || e.contains("more pages"), "{e}");
        let mut twice = MAGIC.to_vec();
        encode_stretch(0, 10, &[5, 5], &mut twice);
        let e = CodeRan::decode(&twice).expect_err("a page twice");
        assert!(e.contains("listed twice") && e.starts_with("byte 11"), "{e}");
        let mut empty = MAGIC.to_vec();
        encode_stretch(0, 10, &[], &mut empty);
        encode_stretch(10, 10, &[], &mut empty);
        let e = CodeRan::decode(&empty).expect_err("no positions");
        assert!(e.contains("no positions"), "{e}");
        // Every byte flipped: refused or read as some list, never a panic.
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0xff;
            let _ = CodeRan::decode(&bad);
        }
    }
}

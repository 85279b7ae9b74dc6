//! One 4 KiB page of known bytes, held as 16 segments of 256 bytes, each shared until written.
//!
//! Why segments: a checkpoint shares every page with the one before, so what a checkpoint
//! costs is what the walk since copies on its first write to each page. python3 writes a few
//! 64-byte lines in each of ~175 pages per 2^18 positions (70 % of those pages have fewer than
//! 8 of their 64 lines written, 35 % a single 256-byte segment); copying whole pages of bytes,
//! known bits and causes (5.6 KB each) made its checkpoints cost 1 MB each and its values 6.8
//! bytes a position (issue 19). Here a write copies the page's slots (256 bytes) and the
//! segments it touches; a segment whose bytes are all known (nearly every one, once written)
//! holds no known bits and no causes; a write that changes nothing copies nothing.

use std::ptr::NonNull;
use std::sync::Arc;

use super::super::why::Why;
use super::footprint::Footprint;

/// Bytes a page covers.
pub(super) const PAGE: usize = 4096;
/// Bytes a segment covers.
pub(super) const SEG: usize = 256;
/// Segments in a page.
const SEGS: usize = PAGE / SEG;
/// 64-byte lines in a segment: the granularity of known bits' words and of causes.
const LINES: usize = SEG / 64;

/// A segment's unknown bytes: which bytes are known, and why each line's unknown ones are not
/// (the last cause that forgot any of them: per line, so a save area forgotten next to older
/// losses does not hide their causes).
#[derive(Clone, Copy)]
struct Gaps {
    known: [u64; LINES],
    why: [Why; LINES],
}

#[derive(Clone)]
struct Segment {
    bytes: [u8; SEG],
    /// `None`: every byte known.
    gaps: Option<Box<Gaps>>,
}

/// The bits `lo..hi` of a 64-bit word (`lo < hi <= 64`).
fn bits(lo: usize, hi: usize) -> u64 {
    let high = if hi == 64 { !0 } else { (1u64 << hi) - 1 };
    high & !((1u64 << lo) - 1)
}

/// Calls `f(line, mask)` for each line the byte range `j..j + n` of a segment touches (`n > 0`).
fn for_lines(j: usize, n: usize, mut f: impl FnMut(usize, u64)) {
    let end = j + n;
    let mut a = j;
    while a < end {
        let line = a / 64;
        let stop = end.min((line + 1) * 64);
        f(line, bits(a % 64, stop - line * 64));
        a = stop;
    }
}

impl Segment {
    /// Nothing known, for `why`.
    fn unknown(why: Why) -> Self {
        Self {
            bytes: [0; SEG],
            gaps: Some(Box::new(Gaps {
                known: [0; LINES],
                why: [why; LINES],
            })),
        }
    }

    fn is_known(&self, i: usize) -> bool {
        self.gaps
            .as_ref()
            .map_or(true, |g| g.known[i / 64] & (1 << (i % 64)) != 0)
    }

    /// Whether the bytes `j..j + n` are all known.
    fn all_known(&self, j: usize, n: usize) -> bool {
        let Some(g) = &self.gaps else { return true };
        let mut all = true;
        for_lines(j, n, |l, m| all &= g.known[l] & m == m);
        all
    }

    fn write(&mut self, j: usize, src: &[u8]) {
        self.bytes[j..j + src.len()].copy_from_slice(src);
        if let Some(g) = &mut self.gaps {
            for_lines(j, src.len(), |l, m| g.known[l] |= m);
            if g.known == [!0; LINES] {
                self.gaps = None;
            }
        }
    }

    fn forget(&mut self, j: usize, n: usize, why: Why) {
        let g = self.gaps.get_or_insert_with(|| {
            Box::new(Gaps {
                known: [!0; LINES],
                why: [why; LINES],
            })
        });
        for_lines(j, n, |l, m| {
            g.known[l] &= !m;
            g.why[l] = why;
        });
    }

    /// Whether forgetting `j..j + n` for `why` would change anything.
    fn forget_changes(&self, j: usize, n: usize, why: Why) -> bool {
        let Some(g) = &self.gaps else { return true };
        let mut changes = false;
        for_lines(j, n, |l, m| changes |= g.known[l] & m != 0 || g.why[l] != why);
        changes
    }

    /// Whether this knows every byte `theirs` knows, with the same value.
    fn covers(&self, theirs: &Segment) -> bool {
        (0..LINES).all(|l| {
            let known = |s: &Segment| s.gaps.as_ref().map_or(!0, |g| g.known[l]);
            let (mine, t) = (known(self), known(theirs));
            let line = l * 64..(l + 1) * 64;
            if t & !mine != 0 {
                return false;
            }
            if t == !0 {
                return self.bytes[line.clone()] == theirs.bytes[line];
            }
            let mut bits = t;
            while bits != 0 {
                let i = l * 64 + bits.trailing_zeros() as usize;
                if self.bytes[i] != theirs.bytes[i] {
                    return false;
                }
                bits &= bits - 1;
            }
            true
        })
    }

    /// Whether no byte is known.
    fn knows_nothing(&self) -> bool {
        self.gaps.as_ref().is_some_and(|g| g.known == [0; LINES])
    }

    /// Whether `theirs` knows a byte this does not.
    fn lacks(&self, theirs: &Segment) -> bool {
        match (&self.gaps, &theirs.gaps) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(m), Some(t)) => t.known.iter().zip(&m.known).any(|(t, m)| t & !m != 0),
        }
    }

    /// Learns the bytes `theirs` knows and this does not.
    fn absorb(&mut self, theirs: &Segment) {
        let Some(g) = &mut self.gaps else { return };
        for l in 0..LINES {
            let theirs_known = theirs.gaps.as_ref().map_or(!0, |t| t.known[l]);
            let mut new = theirs_known & !g.known[l];
            g.known[l] |= new;
            while new != 0 {
                let i = l * 64 + new.trailing_zeros() as usize;
                self.bytes[i] = theirs.bytes[i];
                new &= new - 1;
            }
        }
        if g.known == [!0; LINES] {
            self.gaps = None;
        }
    }
}

/// A segment nothing of which is known (and why), or one shared with other states.
#[derive(Clone)]
enum Slot {
    Unknown(Why),
    Held(Arc<Segment>),
}

/// A page: its segments.
#[derive(Clone)]
pub(super) struct Page {
    slots: [Slot; SEGS],
}

/// Calls `f(segment, offset, part)` for each segment a range of a page touches: `part` is the
/// part of `0..n` that falls in it.
fn for_segments(j: usize, n: usize, mut f: impl FnMut(usize, usize, std::ops::Range<usize>)) {
    let mut done = 0;
    while done < n {
        let a = j + done;
        let take = (SEG - a % SEG).min(n - done);
        f(a / SEG, a % SEG, done..done + take);
        done += take;
    }
}

/// Up to 8 bytes as a little-endian number, the usual widths copied by a constant size (a
/// copy of a length known only at run time is a call to `memcpy`).
#[inline]
pub(super) fn le(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    match bytes.len() {
        8 => b.copy_from_slice(bytes),
        4 => b[..4].copy_from_slice(bytes),
        2 => b[..2].copy_from_slice(bytes),
        1 => b[0] = bytes[0],
        n => b[..n].copy_from_slice(bytes),
    }
    u64::from_le_bytes(b)
}

/// Writes the low `bytes.len()` bytes (at most 8) of `v`, little-endian, the usual widths by
/// a constant size.
#[inline]
fn put(bytes: &mut [u8], v: u64) {
    let v = v.to_le_bytes();
    match bytes.len() {
        8 => bytes.copy_from_slice(&v),
        4 => bytes.copy_from_slice(&v[..4]),
        2 => bytes.copy_from_slice(&v[..2]),
        n => bytes.copy_from_slice(&v[..n]),
    }
}

/// Where a segment whose bytes are all known lies, for the memory's cache of the segments it
/// used last ([`super::recent`]), which keeps the rules that make its use sound: the segment is
/// read only while the table that holds it has not changed since, and written only if that
/// table owns it alone (it came from [`Page::store_known`]) and has not been cloned since.
#[derive(Clone, Copy)]
pub(super) struct SegmentRef(NonNull<Segment>);

impl SegmentRef {
    /// The `n` bytes (at most 8, within the segment) at `off`, as a little-endian number.
    ///
    /// # Safety
    /// The segment is alive and nothing writes it meanwhile.
    #[inline]
    #[allow(unsafe_code)]
    pub(super) unsafe fn small(self, off: usize, n: usize) -> u64 {
        // SAFETY: the caller's.
        let seg = unsafe { self.0.as_ref() };
        le(&seg.bytes[off..off + n])
    }

    /// Writes the `n` bytes (at most 8, within the segment) of `v` at `off`.
    ///
    /// # Safety
    /// The segment is alive and nothing else refers to it: no other table holds it, and no
    /// reference to it is live.
    #[inline]
    #[allow(unsafe_code)]
    pub(super) unsafe fn store(mut self, off: usize, n: usize, v: u64) {
        // SAFETY: the caller's.
        let seg = unsafe { self.0.as_mut() };
        put(&mut seg.bytes[off..off + n], v);
    }
}

/// The one segment of known zeros every state shares (copied on its first write, as any
/// shared segment is).
fn zero_segment() -> Arc<Segment> {
    static ZERO: std::sync::OnceLock<Arc<Segment>> = std::sync::OnceLock::new();
    ZERO.get_or_init(|| {
        Arc::new(Segment {
            bytes: [0; SEG],
            gaps: None,
        })
    })
    .clone()
}

impl Page {
    /// Every byte known to be zero, the segments one shared segment.
    pub(super) fn zeros() -> Self {
        let zero = zero_segment();
        Self {
            slots: std::array::from_fn(|_| Slot::Held(zero.clone())),
        }
    }

    /// Nothing known, for `why`.
    pub(super) fn unknown(why: Why) -> Self {
        Self {
            slots: std::array::from_fn(|_| Slot::Unknown(why)),
        }
    }

    /// The `n` bytes (at most 8) at `j` as a little-endian number, if they lie in one segment
    /// and are all known; `None` otherwise, known or not ([`Self::read`] then says): most
    /// loads of a walk, without the general path's loop over segments.
    #[inline]
    pub(super) fn small(&self, j: usize, n: usize) -> Option<u64> {
        let off = j % SEG;
        if n > 8 || off + n > SEG {
            return None;
        }
        match &self.slots[j / SEG] {
            Slot::Held(seg) if seg.gaps.is_none() => Some(le(&seg.bytes[off..off + n])),
            _ => None,
        }
    }

    /// Writes the `n` bytes (at most 8) of `v` at `j`, which lie in one segment whose bytes are
    /// all known ([`Self::small`] gave them), copying the segment if it is shared; the segment
    /// written, now this page's own.
    #[inline]
    pub(super) fn store_known(&mut self, j: usize, n: usize, v: u64) -> Option<SegmentRef> {
        let off = j % SEG;
        let Slot::Held(seg) = &mut self.slots[j / SEG] else {
            return None;
        };
        let seg = Arc::make_mut(seg);
        put(&mut seg.bytes[off..off + n], v);
        Some(SegmentRef(NonNull::from(seg)))
    }

    /// The segment holding byte `j`, if every byte of it is known (for [`super::recent`]).
    #[inline]
    pub(super) fn known_segment(&self, j: usize) -> Option<SegmentRef> {
        match &self.slots[j / SEG] {
            Slot::Held(seg) if seg.gaps.is_none() => Some(SegmentRef(NonNull::from(&**seg))),
            _ => None,
        }
    }

    /// The byte at `i`, if known.
    pub(super) fn byte(&self, i: usize) -> Option<u8> {
        match &self.slots[i / SEG] {
            Slot::Held(s) if s.is_known(i % SEG) => Some(s.bytes[i % SEG]),
            _ => None,
        }
    }

    /// Fills `out` with the bytes at `j` if all are known.
    pub(super) fn read(&self, j: usize, out: &mut [u8]) -> bool {
        let mut all = true;
        for_segments(j, out.len(), |s, off, part| match &self.slots[s] {
            Slot::Held(seg) if all && seg.all_known(off, part.len()) => {
                out[part.clone()].copy_from_slice(&seg.bytes[off..off + part.len()]);
            }
            _ => all = false,
        });
        all
    }

    /// Why the byte at `i` is unknown (meaningless if it is known).
    pub(super) fn why(&self, i: usize) -> Why {
        match &self.slots[i / SEG] {
            Slot::Unknown(why) => *why,
            Slot::Held(s) => s.gaps.as_ref().map_or_else(Why::default, |g| g.why[i % SEG / 64]),
        }
    }

    /// Whether writing `src` at `j` would change anything (a store of what is already known
    /// there copies nothing).
    pub(super) fn write_changes(&self, j: usize, src: &[u8]) -> bool {
        let mut changes = false;
        for_segments(j, src.len(), |s, off, part| {
            changes |= match &self.slots[s] {
                Slot::Unknown(_) => true,
                Slot::Held(seg) => {
                    seg.bytes[off..off + part.len()] != src[part.clone()] || !seg.all_known(off, part.len())
                }
            }
        });
        changes
    }

    /// Knows `src` at `j` (within the page).
    pub(super) fn write(&mut self, j: usize, src: &[u8]) {
        for_segments(j, src.len(), |s, off, part| {
            let src = &src[part];
            let slot = &mut self.slots[s];
            if src.len() == SEG {
                // A segment written whole keeps what it shares when nothing changes, and all
                // zeros share one segment: most pages an anchor holds of a long sort are
                // written zeros (311,793 of 426,257 in its first 120 anchors).
                if let Slot::Held(seg) = slot {
                    if seg.gaps.is_none() && seg.bytes[..] == *src {
                        return;
                    }
                }
                if *src == [0u8; SEG][..] {
                    *slot = Slot::Held(zero_segment());
                    return;
                }
                let mut bytes = [0; SEG];
                bytes.copy_from_slice(src);
                *slot = Slot::Held(Arc::new(Segment { bytes, gaps: None }));
                return;
            }
            match slot {
                Slot::Unknown(why) => {
                    let mut seg = Segment::unknown(*why);
                    seg.write(off, src);
                    *slot = Slot::Held(Arc::new(seg));
                }
                Slot::Held(seg) => {
                    if seg.bytes[off..off + src.len()] != *src || !seg.all_known(off, src.len()) {
                        Arc::make_mut(seg).write(off, src);
                    }
                }
            }
        });
    }

    /// Whether forgetting `n` bytes at `j` for `why` would change anything.
    pub(super) fn forget_changes(&self, j: usize, n: usize, why: Why) -> bool {
        let mut changes = false;
        for_segments(j, n, |s, off, part| {
            changes |= match &self.slots[s] {
                Slot::Unknown(w) => *w != why,
                Slot::Held(seg) => seg.forget_changes(off, part.len(), why),
            }
        });
        changes
    }

    /// Makes `n` bytes at `j` unknown, for `why`. A segment forgotten whole is dropped; one
    /// nothing was known of takes the cause for all its lines (causes of never-known bytes
    /// are kept per segment, not per line).
    pub(super) fn forget(&mut self, j: usize, n: usize, why: Why) {
        for_segments(j, n, |s, off, part| {
            let slot = &mut self.slots[s];
            match slot {
                Slot::Held(seg) if part.len() < SEG => {
                    if seg.forget_changes(off, part.len(), why) {
                        Arc::make_mut(seg).forget(off, part.len(), why);
                    }
                }
                _ => *slot = Slot::Unknown(why),
            }
        });
    }

    /// Counts the segments not seen yet.
    pub(super) fn footprint(&self, f: &mut Footprint) {
        for slot in &self.slots {
            if let Slot::Held(s) = slot {
                let gaps = s.gaps.as_ref().map_or(0, |_| size_of::<Gaps>());
                f.first(Arc::as_ptr(s), size_of::<Segment>() + gaps);
            }
        }
    }

    /// Whether this knows every byte `theirs` knows, with the same value.
    pub(super) fn covers(&self, theirs: &Page) -> bool {
        self.slots.iter().zip(&theirs.slots).all(|pair| match pair {
            (_, Slot::Unknown(_)) => true,
            (Slot::Unknown(_), Slot::Held(t)) => t.knows_nothing(),
            (Slot::Held(m), Slot::Held(t)) => Arc::ptr_eq(m, t) || m.covers(t),
        })
    }

    /// Whether no byte is known.
    pub(super) fn knows_nothing(&self) -> bool {
        self.slots.iter().all(|s| match s {
            Slot::Unknown(_) => true,
            Slot::Held(t) => t.knows_nothing(),
        })
    }

    /// Whether `theirs` knows a byte this does not.
    pub(super) fn lacks(&self, theirs: &Page) -> bool {
        self.slots.iter().zip(&theirs.slots).any(|pair| match pair {
            (_, Slot::Unknown(_)) => false,
            (Slot::Unknown(_), Slot::Held(_)) => true,
            (Slot::Held(m), Slot::Held(t)) => !Arc::ptr_eq(m, t) && m.lacks(t),
        })
    }

    /// Learns every byte `theirs` knows and this does not (sharing their segments where this
    /// knew nothing and they know everything).
    pub(super) fn absorb(&mut self, theirs: &Page) {
        for (mine, t) in self.slots.iter_mut().zip(&theirs.slots) {
            let Slot::Held(t) = t else { continue };
            match mine {
                Slot::Unknown(_) if t.gaps.is_none() => *mine = Slot::Held(t.clone()),
                Slot::Unknown(why) => {
                    let mut seg = Segment::unknown(*why);
                    seg.absorb(t);
                    *mine = Slot::Held(Arc::new(seg));
                }
                Slot::Held(m) => {
                    if !Arc::ptr_eq(m, t) && m.lacks(t) {
                        Arc::make_mut(m).absorb(t);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::why::Cause;

    fn why(position: u64) -> Why {
        Why {
            cause: Cause::Untraced,
            position,
        }
    }

    #[test]
    fn bit_ranges_cover_exactly_the_bytes() {
        assert_eq!(bits(0, 64), !0);
        assert_eq!(bits(3, 5), 0b11000);
        assert_eq!(bits(63, 64), 1 << 63);
        let mut seen = vec![];
        for_lines(60, 70, |l, m| seen.push((l, m)));
        assert_eq!(seen, [(0, bits(60, 64)), (1, !0), (2, bits(0, 2))]);
    }

    #[test]
    fn writes_and_forgets_across_segments_keep_bytes_and_causes() {
        let mut p = Page::unknown(why(1));
        p.write(250, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            (p.byte(249), p.byte(250), p.byte(257), p.byte(258)),
            (None, Some(1), Some(8), None)
        );
        assert_eq!(p.why(249), why(1));
        let before = p.clone();
        assert!(!p.write_changes(252, &[3, 4]), "same bytes: nothing to copy");
        assert!(p.write_changes(252, &[3, 9]));
        p.forget(251, 2, why(2));
        assert_eq!(
            (p.byte(250), p.byte(251), p.byte(252), p.byte(253)),
            (Some(1), None, None, Some(4))
        );
        assert_eq!((p.why(251), p.why(249)), (why(2), why(2)), "the line's cause");
        assert_eq!(p.why(100), why(1), "another line keeps its cause");
        assert_eq!(before.byte(251), Some(2), "a clone is a copy");
        assert!(!p.forget_changes(251, 2, why(2)));
        p.forget(0, PAGE, why(3));
        assert!((0..PAGE).all(|i| p.byte(i).is_none() && p.why(i) == why(3)));
    }

    #[test]
    fn a_segment_written_whole_is_fully_known_and_shared_by_absorb() {
        let mut theirs = Page::unknown(why(0));
        theirs.write(256, &[7; 256]);
        theirs.write(1024, &[5; 3]);
        let mut mine = Page::unknown(why(4));
        mine.write(1025, &[9]);
        assert!(mine.lacks(&theirs));
        mine.absorb(&theirs);
        assert!(!mine.lacks(&theirs));
        assert_eq!(
            (mine.byte(1024), mine.byte(1025), mine.byte(1026)),
            (Some(5), Some(9), Some(5))
        );
        assert_eq!(mine.byte(300), Some(7));
        assert_eq!(mine.why(1027), why(4), "mine's causes where neither knows");
        let (Slot::Held(a), Slot::Held(b)) = (&mine.slots[1], &theirs.slots[1]) else {
            panic!("held")
        };
        assert!(Arc::ptr_eq(a, b), "a fully known segment is shared, not copied");
        assert!(a.gaps.is_none());
    }

    #[test]
    fn slots_and_pages_stay_small() {
        assert!(size_of::<Slot>() <= 24, "{}", size_of::<Slot>());
        assert!(size_of::<Page>() <= 24 * SEGS);
    }
}

//! Memory's reads, writes, forgets and causes across pages.

use super::*;
use crate::image::Image;
use crate::state::why;

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

#[test]
fn a_checkpoint_costs_the_segments_written_since_not_the_pages() {
    let mut m = Memory::new();
    for p in 0..64u64 {
        m.write(0x10_0000 + p * PAGE, &[1; PAGE as usize]);
    }
    let mut f = Footprint::new();
    m.footprint(&mut f);
    let one = f.bytes();
    assert!(one > 64 * PAGE as usize, "{one}");
    let checkpoint = m.clone();
    checkpoint.footprint(&mut f);
    assert!(f.bytes() - one < 256, "a clone copies its map of chunks only");
    let one = f.bytes();
    // Eight bytes in each of 8 pages: 8 pages' slots, 8 segments and the chunk copied, not
    // 8 pages of bytes.
    for p in 0..8u64 {
        m.write(0x10_0000 + p * PAGE + 100, &[2; 8]);
    }
    // A write of what is known already copies nothing.
    m.write(0x10_0000 + 9 * PAGE, &[1; 8]);
    m.footprint(&mut f);
    let grown = f.bytes() - one;
    assert!(grown > 8 * 256 && grown < 8 * 1024 + 2048, "{grown}");
    let space = AddressSpace::new();
    assert_eq!(checkpoint.read(0x10_0000 + 100, 2, &space), Some(vec![1, 1]));
    assert_eq!(m.read(0x10_0000 + 100, 2, &space), Some(vec![2, 2]));
}

#[test]
fn a_read_mixes_written_and_read_only_bytes_and_names_the_first_unknown_cause() {
    let mut space = AddressSpace::new();
    space.add(Image::from_raw("ro", 0x2000, vec![0xa0, 0xa1])).expect("add");
    let mut m = Memory::new();
    m.write(0x1ffe, &[1, 2]);
    m.write(0x10f8, &[7; 16]);
    assert_eq!(m.read(0x1ffe, 4, &space), Some(vec![1, 2, 0xa0, 0xa1]));
    assert_eq!(
        m.read_u64(0x10fc, 8, &space),
        Some(0x0707_0707_0707_0707),
        "across segments"
    );
    why::begin(why::Cause::MapChange, 5);
    m.forget(0x1100, 1);
    why::begin(why::Cause::Untraced, 6);
    assert_eq!(m.read_u64(0x10fc, 8, &space), None);
    assert_eq!(
        m.why(0x1100, &space),
        Some(Why {
            cause: why::Cause::MapChange,
            position: 5
        })
    );
    m.set_volatile(&[(0x10f8, 1)]);
    assert_eq!(m.read(0x10f8, 2, &space), None, "a volatile byte is never known");
    assert_eq!(m.read(0x10f9, 2, &space), Some(vec![7, 7]));
}

/// A new anonymous mapping is zeros: whole pages share one page of zeros (64 MiB in 16,384
/// slots, not 64 MiB of bytes), the ends are written, the neighbours keep their bytes, and a
/// write into a zero page copies that page alone.
#[test]
fn a_zero_filled_range_reads_zero_and_shares_its_pages() {
    let space = AddressSpace::new();
    let mut m = Memory::new();
    m.write(0x0fff, &[7]);
    m.write(0x1000 + (64 << 20) + 0x10, &[5]);
    m.zero(0x1000, 64 << 20);
    assert_eq!(
        m.read(0x0fff, 1, &space),
        Some(vec![7]),
        "the byte before keeps its value"
    );
    assert_eq!(m.read(0x1000, 8, &space), Some(vec![0; 8]));
    assert_eq!(m.read(0x1000 + (64 << 20) - 8, 8, &space), Some(vec![0; 8]));
    assert_eq!(
        m.read(0x1000 + (64 << 20) + 0x10, 1, &space),
        Some(vec![5]),
        "after it too"
    );
    let mut f = Footprint::new();
    m.footprint(&mut f);
    assert!(f.bytes() < 2 << 20, "64 MiB of zeros held in {} bytes", f.bytes());
    let before = m.clone();
    m.write(0x20_0000, &[1, 2]);
    assert_eq!(m.read(0x20_0000, 3, &space), Some(vec![1, 2, 0]));
    assert_eq!(
        before.read(0x20_0000, 2, &space),
        Some(vec![0, 0]),
        "the shared page is untouched"
    );
    // Unaligned both ends, within one page and across two.
    let mut m = Memory::new();
    m.zero(0x3010, 0x20);
    assert_eq!(m.read(0x3010, 0x20, &space), Some(vec![0; 0x20]));
    assert_eq!(m.read(0x300f, 1, &space), None);
    m.zero(0x4ff0, 0x1020);
    assert_eq!(m.read(0x4ff0, 0x1020, &space), Some(vec![0; 0x1020]));
    assert_eq!(m.read(0x6010, 1, &space), None);
}

/// A store through an unknown address forgets all memory but what no store writes: the
/// pages whole within the read-only ranges keep their bytes.
#[test]
fn forgetting_all_keeps_the_pages_no_store_writes() {
    let space = AddressSpace::new();
    let mut m = Memory::new();
    m.write(0x1ff8, &[1; 16]); // across pages 0x1000 and 0x2000
    m.write(0x3000, &[2; 8]);
    m.write(0x5000, &[3; 8]);
    m.set_readonly([(0x2000, 0x2000)].into());
    m.forget_all();
    assert_eq!(m.read(0x2000, 8, &space), Some(vec![1; 8]), "in a kept page");
    assert_eq!(m.read(0x3000, 8, &space), Some(vec![2; 8]));
    assert_eq!(m.read(0x1ff8, 8, &space), None, "the page before is writable");
    assert_eq!(m.read(0x5000, 8, &space), None);
    m.set_readonly([].into());
    m.forget_all();
    assert_eq!(m.read(0x3000, 8, &space), None, "nothing kept without ranges");
}

/// Pages written whole (an anchor's, a system call's read): written zeros share one segment,
/// a page written again with the bytes it holds keeps what it shares with a checkpoint, and
/// a later small write into either copies one segment and reads back right.
#[test]
fn pages_written_whole_share_zeros_and_unchanged_segments() {
    let space = AddressSpace::new();
    let mut m = Memory::new();
    for p in 0..256u64 {
        m.write(0x40_0000 + p * PAGE, &[0; PAGE as usize]);
    }
    let mut f = Footprint::new();
    m.footprint(&mut f);
    assert!(
        f.bytes() < 256 * 1024,
        "1 MiB of written zeros held in {} bytes",
        f.bytes()
    );
    let mut page = vec![3u8; PAGE as usize];
    page[0] = 9;
    m.write(0x80_0000, &page);
    let checkpoint = m.clone();
    let mut f = Footprint::new();
    checkpoint.footprint(&mut f);
    let one = f.bytes();
    // The same bytes again, and the page with its last segment changed.
    m.write(0x80_0000, &page);
    page[PAGE as usize - 1] = 4;
    m.write(0x80_0000, &page);
    m.footprint(&mut f);
    let grown = f.bytes() - one;
    assert!(
        grown < 2048,
        "one segment, the page's slots and its chunk copied, not 16 segments: {grown}"
    );
    m.write(0x40_0000 + 5, &[6]);
    assert_eq!(m.read(0x40_0000 + 4, 3, &space), Some(vec![0, 6, 0]));
    assert_eq!(
        m.read(0x40_1000 + 5, 1, &space),
        Some(vec![0]),
        "the shared zeros unchanged"
    );
    assert_eq!(m.read(0x80_0ffe, 2, &space), Some(vec![3, 4]));
    assert_eq!(checkpoint.read(0x80_0ffe, 2, &space), Some(vec![3, 3]));
    assert_eq!(checkpoint.read(0x80_0000, 1, &space), Some(vec![9]));
}

#[test]
fn covering_needs_every_known_byte_with_its_value() {
    let mut exact = Memory::new();
    exact.write(0x2ff0, &[1; 40]);
    exact.write(0x9000, &[2; 3]);
    let mut walked = exact.clone();
    assert!(walked.covers(&exact), "shared pages");
    walked.write(0x7000, &[5; 8]);
    assert!(walked.covers(&exact), "knowing more still covers");
    assert!(!exact.covers(&walked), "a page it does not hold");
    let mut lost = exact.clone();
    lost.forget(0x3005, 1);
    assert!(!lost.covers(&exact), "a byte forgotten");
    assert!(exact.covers(&lost), "the other way");
    let mut other = walked.clone();
    other.write(0x9001, &[3]);
    assert!(!other.covers(&exact), "a byte with another value");
    let mut gaps = exact.clone();
    gaps.forget(0x2ff8, 4);
    let mut fills = gaps.clone();
    fills.write(0x2ff8, &[1; 4]);
    assert!(fills.covers(&gaps) && fills.covers(&exact), "bytes around a gap");
    fills.write(0x2ffa, &[7]);
    assert!(fills.covers(&gaps), "where the gap was, any value");
    assert!(!fills.covers(&exact));
}

/// A second forget of all memory with nothing learnt between is free, and exact: whatever
/// was learnt since the last one (a write, zeros, partly known bits, another state's bytes)
/// is forgotten by the next; what is forgotten meanwhile stays so; read-only pages stay.
#[test]
fn forgetting_all_again_drops_exactly_what_was_learnt_since() {
    let space = AddressSpace::new();
    let mut m = Memory::new();
    m.write(0x2000, &[1; 8]);
    m.set_readonly([(0x2000, 0x1000)].into());
    m.forget_all();
    m.forget_all();
    assert_eq!(m.read(0x2000, 8, &space), Some(vec![1; 8]), "read-only, kept");
    m.write(0x5000, &[2; 8]);
    m.forget_all();
    assert_eq!(m.read(0x5000, 1, &space), None, "a write since is forgotten");
    m.zero(0x10_0000, 3 * PAGE);
    m.forget_all();
    assert_eq!(m.read(0x10_1000, 1, &space), None, "zeros since are forgotten");
    m.write_bits(0x6000, 0x40, 0x40);
    m.forget_all();
    assert_eq!(m.read_bits(0x6000, &space), (0, 0), "partly known bits too");
    let mut other = Memory::new();
    other.write(0x7000, &[3; 4]);
    m.absorb(&other);
    m.forget_all();
    assert_eq!(m.read(0x7000, 1, &space), None, "absorbed bytes too");
    m.forget(0x2000, 8);
    m.forget_all();
    assert_eq!(m.read(0x2000, 1, &space), None, "forgotten stays forgotten");
    m.set_readonly([(0x8000, 0x1000)].into());
    m.write(0x8000, &[4; 2]);
    m.forget_all();
    m.set_readonly([].into());
    m.forget_all();
    assert_eq!(m.read(0x8000, 1, &space), None, "a page read-only no more");
}

/// Everything a memory tells of the bytes from `from` to `to`: each byte or its cause.
fn bytes_and_causes(m: &Memory, from: u64, to: u64, space: &AddressSpace) -> Vec<(Option<u8>, Option<Why>)> {
    (from..to).map(|a| (m.read_byte(a, space), m.why(a, space))).collect()
}

#[test]
fn a_store_into_known_bytes_does_what_a_write_does() {
    let space = AddressSpace::new();
    let mut rng = crate::test_rng::Rng(0x9e37_79b9_7f4a_7c15);
    let mut next = || rng.next();
    // Two pages known but for a few holes, each for a cause of its own.
    let mut base = Memory::new();
    let bytes: Vec<u8> = (0..2 * PAGE).map(|_| next() as u8).collect();
    base.write(0x7000, &bytes);
    for k in 0..6 {
        why::begin(why::Cause::Syscall(k), 10 + u64::from(k));
        base.forget(0x7000 + next() % (2 * PAGE), 1 + next() % 20);
    }
    let (mut stored, mut written) = (base.clone(), base.clone());
    let mut shortcuts = 0;
    for _ in 0..5000 {
        // Widths of every store, anywhere in the pages and a little outside, across segment
        // and page bounds; a value already there half the time.
        let n = [1u32, 2, 4, 8][(next() % 4) as usize];
        let a = 0x6ff8 + next() % (2 * PAGE + 16);
        let v = match (next() % 2, stored.read_u64(a, n, &space)) {
            (0, Some(old)) => old,
            _ => next(),
        };
        let before = stored.clone();
        shortcuts += usize::from(stored.store_known(a, n as usize, v));
        let mut general = before.clone();
        general.write(a, &v.to_le_bytes()[..n as usize]);
        stored = before;
        stored.store(a, n, Some(v));
        written.write(a, &v.to_le_bytes()[..n as usize]);
        assert_eq!(
            bytes_and_causes(&stored, a - 16, a + 16, &space),
            bytes_and_causes(&general, a - 16, a + 16, &space),
            "{n} bytes at {a:#x}"
        );
    }
    assert!(shortcuts > 2500, "{shortcuts}");
    assert_eq!(
        bytes_and_causes(&stored, 0x6ff0, 0x9010, &space),
        bytes_and_causes(&written, 0x6ff0, 0x9010, &space)
    );
    assert_eq!(stored.pages(), written.pages());
    // The state the stores started from is as it was: they copied what they changed.
    let original: Vec<_> = (0..2 * PAGE).map(|i| base.read_byte(0x7000 + i, &space)).collect();
    assert!(original.iter().zip(&bytes).all(|(o, b)| o.map_or(true, |o| o == *b)));
}

#[test]
fn the_segments_used_last_answer_as_the_table_and_clones_keep_theirs() {
    // A memory walked by loads and stores (which go through the segments used last) and one
    // told the same through the general reads and writes only, with clones of both kept
    // along the way: every clone must still hold what it held when made.
    let space = AddressSpace::new();
    let mut rng = crate::test_rng::Rng(0x2545_f491_4f6c_dd1d);
    let (lo, span) = (0x10_000u64, 3 * PAGE);
    let (mut m, mut r) = (Memory::new(), Memory::new());
    let bytes: Vec<u8> = (0..span).map(|_| rng.next() as u8).collect();
    m.write(lo, &bytes);
    r.write(lo, &bytes);
    let mut kept: Vec<(Memory, Memory)> = vec![];
    let (mut hits, mut loads, mut in_place) = (0, 0, 0);
    // Fewer under Miri, which checks the cache's pointers (`cargo +nightly miri test`).
    let (steps, every) = if cfg!(miri) { (400, 200) } else { (20_000u64, 500) };
    for step in 0..steps {
        why::begin(why::Cause::Syscall(1), step);
        // Mostly near a few hot places, as a stack and a few objects are.
        let hot = [lo + 0x80, lo + 0x1ff8, lo + 0x2400][rng.below(3) as usize];
        let a = match rng.below(4) {
            0 => lo - 8 + rng.below(span + 16),
            _ => hot + rng.below(64),
        };
        let n = [1u32, 2, 4, 8][rng.below(4) as usize];
        match rng.below(100) {
            0..=44 => {
                loads += 1;
                let seen = m.recent.get(a / SEG as u64).is_some();
                let v = m.load(a, n, &space);
                hits += usize::from(seen && v.is_some());
                assert_eq!(v, r.read_u64(a, n, &space), "load of {n} at {a:#x}, step {step}");
            }
            45..=84 => {
                let v = match (rng.below(8), r.read_u64(a, n, &space)) {
                    (0, Some(old)) => Some(old),
                    (1, _) => None,
                    _ => Some(rng.next()),
                };
                let seen = m.recent.get(a / SEG as u64).is_some_and(|(_, writable)| writable);
                in_place += usize::from(seen && v.is_some() && (a % SEG as u64) + u64::from(n) <= SEG as u64);
                m.store(a, n, v);
                match v {
                    Some(v) => r.write(a, &v.to_le_bytes()[..n as usize]),
                    None => r.forget(a, u64::from(n)),
                }
            }
            85..=88 => {
                let len = 1 + rng.below(600);
                m.forget(a, len);
                r.forget(a, len);
            }
            89..=91 => {
                let src: Vec<u8> = (0..1 + rng.below(300)).map(|_| rng.next() as u8).collect();
                m.write(a, &src);
                r.write(a, &src);
            }
            92 => {
                let page = lo + rng.below(3) * PAGE;
                m.zero(page, PAGE);
                r.zero(page, PAGE);
            }
            93..=96 => kept.push((m.clone(), r.clone())),
            97 if !kept.is_empty() => {
                let (km, kr) = kept.swap_remove(rng.below(kept.len() as u64) as usize);
                m.absorb(&km);
                r.absorb(&kr);
            }
            98 => {
                m.forget_all();
                r.forget_all();
                if rng.below(2) == 0 {
                    m.write(lo, &bytes);
                    r.write(lo, &bytes);
                }
            }
            _ => {
                kept.pop();
            }
        }
        if step % every == 0 {
            for (km, kr) in &kept {
                assert_eq!(
                    bytes_and_causes(km, lo - 8, lo + span + 8, &space),
                    bytes_and_causes(kr, lo - 8, lo + span + 8, &space),
                    "a kept clone changed, step {step}"
                );
            }
        }
    }
    assert_eq!(
        bytes_and_causes(&m, lo - 8, lo + span + 8, &space),
        bytes_and_causes(&r, lo - 8, lo + span + 8, &space)
    );
    // Both shortcuts were taken often (the clears and clones here are far more frequent
    // than in a walk).
    assert!(
        hits * 10 > loads,
        "{hits} of {loads} loads answered by the segments used last"
    );
    assert!(in_place as u64 > steps / 200, "{in_place} stores in place");
}

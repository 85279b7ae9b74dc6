//! Anchors (issue 40): the whole states `rtit record` takes while the program runs under
//! QEMU. Each must be the state the history reaches there: where the replay's passes know a
//! register or a byte at an anchor's position, the anchor must hold the same (the passes are
//! computed without the anchors, so the two are independent witnesses of each other).
//! Between two anchors, a stretch whose forward walk reaches the anchor above knowing all of
//! it needs no backward walk: the answers without it are the answers with it.

mod common;

use rtit_replay_core::recording::Recording;
use rtit_replay_core::session::Session;
use rtit_replay_core::timeline::cache::Policy;

#[test]
fn every_anchor_agrees_with_what_the_passes_know_there() {
    if common::skip_without_anchors() {
        return;
    }
    let dir = common::scratch("anchors", "sort");
    let out = common::record_sort_with_anchors(&dir);
    let rec = Recording::open(&out).expect("a recording");
    let anchors = rec.anchors().expect("anchors read").expect("anchors taken");
    assert!(anchors.list.len() >= 3, "{} anchors", anchors.list.len());
    // The passes alone: a session over the anchors would answer at each with the anchor.
    let passes = rec.clone().ignoring_anchors();
    let mut session = Session::open_cached(passes, false, Policy::Off, &mut |_| {}).expect("session");
    session.prepare(|_, _| {});
    let (mut registers, mut bytes) = (0, 0);
    for (i, a) in anchors.list.iter().enumerate() {
        session.set_position(a.position);
        let hex = |v: &String| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok();
        // A parked anchor (QEMU 9.0 and later) holds the eflags bits it says it knows.
        let flags_known = a.registers.get("eflags_known").and_then(hex).unwrap_or(u64::MAX);
        for (name, value) in a.registers.iter().filter(|(n, _)| *n != "eflags_known") {
            let mask = if name == "eflags" { flags_known } else { u64::MAX };
            if let (Some(known), Some(recorded)) = (session.register(name), hex(value)) {
                assert_eq!(
                    known & mask,
                    recorded & mask,
                    "anchor {i} (position {}): {name}",
                    a.position
                );
                registers += 1;
            }
        }
        for (address, page) in anchors.pages(i).expect("the pages read").iter() {
            let Some(page) = page else { continue };
            for (j, chunk) in page.chunks(256).enumerate() {
                let at = address + j as u64 * 256;
                if let Some(known) = session.read_memory(at, chunk.len()) {
                    assert_eq!(known, chunk, "anchor {i} (position {}): memory at {at:#x}", a.position);
                    bytes += known.len();
                }
            }
        }
    }
    // The passes know most of it: a check that compared nothing would prove nothing.
    assert!(registers > anchors.list.len() * 10, "{registers} registers compared");
    assert!(bytes > 100_000, "{bytes} bytes compared");

    // The pages' file is read an anchor at a time, when a state is built: a byte changed
    // after the recording was opened is refused there, naming the file and its bytes.
    let last = anchors.list.len() - 1;
    let a = &anchors.list[last];
    assert!(a.pages > 0, "the last anchor holds pages");
    let pages = out.join("anchor-pages.bin");
    let mut file = std::fs::read(&pages).expect("the pages");
    let at = (a.offset + 8 + 100) as usize;
    file[at] ^= 0x10;
    std::fs::write(&pages, file).expect("changed");
    let e = anchors.pages(last).expect_err("a changed page").to_string();
    assert!(
        e.contains("anchor-pages.bin") && e.contains("not what the recording wrote"),
        "{e}"
    );
    let e = rec.anchors().expect_err("reopened").to_string();
    assert!(e.contains("anchor-pages.bin"), "{e}");
}

/// Opens `rec` and waits until the background fill has walked every stretch.
fn filled(rec: &Recording, back_everywhere: bool) -> Session {
    let mut s = Session::open_cached(rec.clone(), false, Policy::Off, &mut |_| {}).expect("session");
    if back_everywhere {
        s.values().expect("the values").walk_back_everywhere();
    }
    // A stop starts the fill.
    s.set_position(s.last() / 2);
    s.settle(&mut || false);
    while !matches!(s.values_walked(), (done, total) if total > 0 && done >= total) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    s
}

/// What a look at `p` reads: the general registers, the flags, the vector registers, the
/// stack and 64 bytes where each register points; and how many of those are known.
fn look(s: &mut Session, p: u64) -> (String, usize) {
    s.set_position(p);
    s.settle(&mut || false);
    let (mut shown, mut known) = (format!("at {p}:"), 0);
    let mut pointers = Vec::new();
    for r in rtit_replay_core::state::Reg::all().map(|r| r.name()).chain(["eflags"]) {
        let v = s.register(r);
        pointers.extend(v);
        known += usize::from(v.is_some());
        shown += &format!(" {r}={v:x?}");
    }
    for i in 0..16 {
        let v = s.vector_register(i);
        known += v.iter().filter(|b| b.is_some()).count() / 16;
        shown += &format!(" v{i}={v:x?}");
    }
    let sp = s.register("rsp").unwrap_or(0);
    for a in (0..288).map(|k| sp.wrapping_sub(256) + k * 8).chain(pointers) {
        let bytes = s.read_memory_prefix(a, 64);
        known += bytes.len() / 8;
        shown += &format!(" {a:x}:{bytes:x?}");
    }
    (shown, known)
}

#[test]
fn where_the_forward_walk_knows_the_anchor_above_the_backward_walk_is_skipped_and_nothing_changes() {
    if common::skip_without_anchors() {
        return;
    }
    let dir = common::scratch("anchors", "settled");
    let _removed = common::RemovedOnSuccess(dir.clone());
    let rec = Recording::open(&common::record_sort_with_anchors(&dir)).expect("a recording");
    let anchors = rec.anchors().expect("anchors read").expect("anchors taken");
    let mut skipping = filled(&rec, false);
    let (settled, stretches) = skipping.values_stats().settled;
    // sort reads its input through logged system calls: the forward walk of some stretches
    // loses nothing the anchor above holds (how many depends on where the anchors fell).
    assert!(settled >= 1 && stretches > settled, "{settled} of {stretches} settled");
    let mut everywhere = filled(&rec, true);
    assert_eq!(everywhere.values_stats().settled, (settled, stretches));
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let random = (0..40).map(|_| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((x >> 11) % skipping.last(), None)
    });
    // And just below each anchor, where the backward walk knows nearly all the anchor
    // holds, every byte of its pages: where a stretch is open, what the forward walk lost
    // (the `xsave` areas of the dynamic loader's trampolines, a stored `rdtsc`) shows there.
    let below = (1..anchors.list.len()).map(|i| (anchors.list[i].position - 1, Some(i)));
    let mut known = 0;
    for (p, anchor) in random.collect::<Vec<_>>().into_iter().chain(below) {
        let (mut with_skips, k) = look(&mut skipping, p);
        let (mut walked, _) = look(&mut everywhere, p);
        known += k;
        let pages = anchor
            .map(|i| anchors.pages(i).expect("the pages read"))
            .unwrap_or_default();
        for (address, _) in pages.iter() {
            for at in (0..64).map(|k| address + k * 64) {
                let (a, b) = (
                    skipping.read_memory_prefix(at, 64),
                    everywhere.read_memory_prefix(at, 64),
                );
                known += a.len() / 8;
                with_skips += &format!(" {at:x}:{a:x?}");
                walked += &format!(" {at:x}:{b:x?}");
            }
        }
        assert_eq!(
            with_skips, walked,
            "skipping the backward walks (left), walking them (right)"
        );
    }
    // The looks compared values, not unknowns.
    assert!(known > 40 * 40, "{known} values known");
}

//! Anchors (issue 40): the whole states `rtit record` takes while the program runs under
//! QEMU. Each must be the state the history reaches there: where the replay's passes know a
//! register or a byte at an anchor's position, the anchor must hold the same (the passes are
//! computed without the anchors, so the two are independent witnesses of each other).

mod common;

use std::process::Command;

use rtit_replay_core::recording::Recording;
use rtit_replay_core::session::Session;
use rtit_replay_core::timeline::cache::Policy;

#[test]
fn every_anchor_agrees_with_what_the_passes_know_there() {
    if common::skip_without_anchors() {
        return;
    }
    let dir = common::scratch("anchors", "sort");
    let input = dir.join("input");
    let text: String = (0..4_000u64)
        .map(|i| format!("{:x} line\n", i * 2654435761 % 1_000_003))
        .collect();
    std::fs::write(&input, text).expect("input");
    let out = dir.join("rec");
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--anchor-every", "300000", "--out"])
        .arg(&out)
        .args(["--", "/usr/bin/sort", "-o", "/dev/null"])
        .arg(&input)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .output()
        .expect("rtit record");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
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
        for (name, value) in &a.registers {
            let recorded = u64::from_str_radix(value.trim_start_matches("0x"), 16).ok();
            if let (Some(known), Some(recorded)) = (session.register(name), recorded) {
                assert_eq!(known, recorded, "anchor {i} (position {}): {name}", a.position);
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

//! Sync points (issue 40, "the end at once"): where the qemu recorder's unit model says a
//! decode can start exactly. A decode started at each must be the whole decode's from that
//! position to the end, instruction for instruction, with the same count: a cold start at a
//! PSB is not (RTIT's PSB carries no IP and flushes no TNT bit), which is why they exist.

mod common;

use std::process::Command;

use rtit_replay_core::recording::Recording;
use rtit_replay_core::session::Session;
use rtit_replay_core::timeline::cache::Policy;
use rtit_replay_core::timeline::suffix;

#[test]
fn a_decode_from_sync_points_is_the_whole_decode_from_there_gzip() {
    let dir = common::scratch("sync_points", "gzip");
    let input = dir.join("input");
    // Text that compresses unevenly: gzip's inner loops take many branch patterns.
    let text: String = (0..60_000u64)
        .map(|i| format!("{:x} {}\n", i * 2654435761 % 1_000_003, "ab".repeat((i % 7) as usize)))
        .collect();
    std::fs::write(&input, text).expect("input");
    let input = input.display().to_string();
    check(&dir, &["/usr/bin/gzip", "-c", &input]);
}

/// python3, where 3 of 50 cold decodes from PSBs near the end were wrong.
#[test]
fn a_decode_from_sync_points_is_the_whole_decode_from_there_python3() {
    let dir = common::scratch("sync_points", "python3");
    let script = "import json\nfor i in range(1500): json.loads(json.dumps({'a': [i, str(i), {'b': i * 1.5}]}))";
    check(&dir, &["/usr/bin/python3", "-S", "-c", script]);
}

/// A loop of calls and conditional branches: after a PSB clears LAST_LIP no IP-carrying
/// packet comes, so its points have LAST_LIP invalid (none were found in such a loop when
/// they had to have it valid, and a replay's windows decoded from the trace's start).
#[test]
fn a_decode_from_sync_points_is_the_whole_decode_from_there_in_a_loop() {
    let dir = common::scratch("sync_points", "loop");
    let src = dir.join("loop.c");
    std::fs::write(
        &src,
        "static unsigned long t[64];\n\
         __attribute__((noinline)) static unsigned long mix(unsigned long x) { return x * 2654435761u ^ (x >> 7); }\n\
         int main(void) { unsigned long s = 0;\n\
         for (unsigned long i = 0; i < 1500000; i++) { s += mix(i); if (s & 1) t[i & 63] ^= s; }\n\
         return (int)(t[0] & 1); }\n",
    )
    .expect("source");
    let exe = common::gcc(src.to_str().expect("utf-8"), &["-O0"], &dir);
    let rec = check(&dir, &[exe.to_str().expect("utf-8")]);
    let points = rec.sync_points().expect("read").expect("sync points");
    assert!(
        points.iter().any(|p| p.last_lip == 0),
        "points with LAST_LIP invalid were checked: {points:?}"
    );
}

/// Records `command` under QEMU, then decodes from the first two and the last eight sync
/// points (a replay starts at one near the end) and compares each with the whole decode.
fn check(dir: &std::path::Path, command: &[&str]) -> Recording {
    let out = dir.join("rec");
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--out"])
        .arg(&out)
        .arg("--")
        .args(command)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .output()
        .expect("rtit record");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let rec = Recording::open(&out).expect("a recording");
    let points = rec
        .sync_points()
        .expect("read")
        .expect("the recorder wrote sync points");
    assert!(points.len() >= 4, "{} sync points", points.len());

    let mut session = Session::open_cached(rec.clone(), false, Policy::Off, &mut |_| {}).expect("session");
    session.prepare(|_, _| {});
    let whole = session.timeline();
    let trace = rec.trace().expect("trace");
    let space = rec.address_space().expect("space");
    let gaps = rec.gaps();
    let input = rec.decode_input(&trace, &space, &gaps);
    let last = points.len().saturating_sub(8);
    for (i, p) in points.iter().enumerate().filter(|(i, _)| *i < 2 || *i >= last) {
        let tail = suffix(&input, p);
        assert_eq!(
            p.position + tail.len(),
            whole.len(),
            "sync point {i} (position {}): the decode from it ends elsewhere",
            p.position
        );
        let differs = (tail.ips())
            .zip(whole.ips().skip(p.position as usize))
            .position(|(a, b)| a != b);
        assert_eq!(
            differs, None,
            "sync point {i} (position {}): first difference",
            p.position
        );
    }
    rec
}

//! Replay at scale (issue 19): a recording whose history the first design held at 24 bytes
//! a position (over 1 GB here) opens at once and serves a real gdb with its default
//! settings (no `remotetimeout`): breakpoints in libc, `bt`, `continue` to the end and
//! `reverse-continue` back to the start, in a server that stays small.

mod common;

use std::process::{Command, Stdio};

use common::gdb::Server;
use rtit_replay_core::recording::Recording;
use rtit_replay_core::session::Session;
use rtit_replay_core::timeline::cache::{self, CacheError, Origin, Policy};

#[test]
fn a_55_million_instruction_history_serves_a_default_gdb_from_end_to_start() {
    let dir = common::scratch("scale", "sha256sum");
    // sha256sum of 1 MiB: about 55 million instructions, read 32 KiB at a time.
    let input = dir.join("zeros");
    std::fs::write(&input, vec![0u8; 1 << 20]).expect("input");
    let rec = dir.join("rec");
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--out"])
        .arg(&rec)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .args(["--", "/usr/bin/sha256sum"])
        .arg(&input)
        .stdout(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.success());
    let rec = Recording::open(&rec).expect("recording");
    let n = rec.manifest.instructions;
    assert!(n > 45_000_000, "{n} instructions: at 24 bytes each, over 1 GB");
    let server = Server::start(&rec);
    let out = server.gdb(
        None,
        &[
            "break read",
            "continue",
            "continue",
            "p $rdx",
            "bt",
            "delete",
            "continue",
            "monitor when",
            "reverse-continue",
            "monitor when",
        ],
    );
    let peak = server.peak_kib();
    assert!(out.contains("in _start ()"), "gdb connected at position 0:\n{out}");
    let reads = out.matches("Breakpoint 1, __GI___libc_read (fd=").count();
    assert_eq!(reads, 2, "{out}");
    assert!(out.contains("$1 = 32768"), "the second read asks for 32 KiB:\n{out}");
    for frame in ["__GI___fread_unlocked", "__libc_start_main"] {
        assert!(out.contains(frame), "`bt` through {frame}:\n{out}");
    }
    assert!(out.contains("__GI__exit"), "`continue` reached the exit:\n{out}");
    let last = n - 1;
    assert!(out.contains(&format!("position {last} of {n}")), "{out}");
    assert!(
        out.contains(&format!("position 0 of {n}")),
        "`reverse-continue` reached the start:\n{out}"
    );
    assert_eq!(out.matches("No more reverse-execution history").count(), 2, "{out}");
    assert!(
        !out.contains("Remote connection closed") && !out.contains("nack"),
        "{out}"
    );
    // The first design held 24 bytes a position: 1.3 GB here.
    assert!(peak < 1 << 20, "the server's peak is {peak} KiB");
    eprintln!("{n} positions, server peak {} MiB", peak >> 10);
}

/// Records `sort -n` on `lines` numbers with the qemu backend.
fn record_sort(name: &str, lines: u32) -> Recording {
    let dir = common::scratch("scale", name);
    let input = dir.join("numbers");
    let text: String = (0..lines).map(|i| format!("{}\n", (i * 7919) % 10007)).collect();
    std::fs::write(&input, text).expect("input");
    let rec = dir.join("rec");
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--out"])
        .arg(&rec)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .args(["--", "/usr/bin/sort", "-n"])
        .arg(&input)
        .stdout(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.success());
    Recording::open(&rec).expect("recording")
}

#[test]
fn a_timeline_decoded_once_is_read_back_by_the_next_replay_and_never_when_stale() {
    let rec = record_sort("cache", 3000);
    let stored = rec.dir.join(cache::FILE);
    let mut first = Session::open_cached(rec.clone(), false, Policy::Always, &mut |_| {}).expect("first open");
    assert!(
        matches!(first.origin(), Origin::Decoded { set_aside: None, .. }),
        "{:?}",
        first.origin()
    );
    assert_eq!(first.stored().expect("stored").expect("written"), stored);
    let mut again = Session::open(rec.clone()).expect("second open");
    assert!(
        matches!(again.origin(), Origin::Read(p) if *p == stored),
        "{:?}",
        again.origin()
    );
    assert_eq!(first.timeline().first_difference(again.timeline()), None);
    assert!(again.len() > 1_000_000, "{} positions", again.len());
    // The same values wherever asked: the state layer works on the history read back.
    for position in [0, 20_000, again.len() / 2] {
        first.set_position(position);
        again.set_position(position);
        for reg in ["rip", "rsp", "rax", "rdi"] {
            assert_eq!(first.register(reg), again.register(reg), "{reg} at {position}");
        }
    }
    again.set_position(20_000);
    assert!(again.register("rsp").is_some(), "rsp is known at 20,000");

    // A real gdb on a replay that read it back.
    let server = Server::start(&rec);
    let out = server.gdb(None, &["monitor info", "break exit", "continue", "bt 2"]);
    assert!(out.contains(&format!("read back from {}", stored.display())), "{out}");
    assert!(out.contains("Breakpoint 1, ") && out.contains("exit"), "{out}");
    drop(server);

    // A recording changed since (here only a file's modification time): decoded again.
    let maps = std::fs::File::options()
        .write(true)
        .open(rec.dir.join("maps.json"))
        .expect("maps.json");
    maps.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .expect("touch");
    let third = Session::open(rec.clone()).expect("third open");
    assert!(
        matches!(
            third.origin(),
            Origin::Decoded {
                set_aside: Some(CacheError::OtherKey),
                ..
            }
        ),
        "{:?}",
        third.origin()
    );
    assert_eq!(first.timeline().first_difference(third.timeline()), None);
}

//! Replay at scale (issue 19): a recording whose history the first design held at 24 bytes
//! a position (over 1 GB here) opens at once and serves a real gdb with its default
//! settings (no `remotetimeout`): breakpoints in libc, `bt`, `continue` to the end and
//! `reverse-continue` back to the start, in a server that stays small.

mod common;

use std::process::{Command, Stdio};

use common::gdb::Server;
use rtit_replay_core::recording::Recording;

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

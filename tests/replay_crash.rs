//! A real crash in a real interpreter, as issue 17 found it: `python3 -c 'import ctypes;
//! ctypes.string_at(0)'` recorded with the qemu backend dies of SIGSEGV in glibc's `strlen`.
//! Replayed in gdb, the NULL that caused it, the stack pointer and the frames down through
//! libffi must show as native gdb shows them at the same fault.

mod common;

use std::process::{Command, Stdio};

#[test]
fn python3s_null_pointer_crash_shows_the_null_and_the_frames() {
    let dir = common::scratch("replay_crash", "python3-ctypes");
    let script = "import ctypes; ctypes.string_at(0)";
    let rec = dir.join("rec");
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--out"])
        .arg(&rec)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .args(["--", "/usr/bin/python3", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(!status.success(), "python3 dies of SIGSEGV");
    // `rtit replay` starts the gdb it is given: a script that runs gdb in batch mode.
    let gdb = dir.join("gdb.sh");
    std::fs::write(
        &gdb,
        "#!/bin/sh\nexec gdb -batch -nx \"$@\" -ex 'set pagination off' -ex continue -ex 'p/x $rdi' -ex 'p/x $rsp' -ex 'bt 7'\n",
    )
    .expect("script");
    Command::new("chmod").arg("+x").arg(&gdb).status().expect("chmod");
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["replay", "--gdb"])
        .arg(&gdb)
        .arg(&rec)
        .output()
        .expect("rtit replay");
    let replayed = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let native = Command::new("gdb")
        .args(["-batch", "-nx", "-ex", "run", "-ex", "p/x $rdi", "-ex", "bt 7"])
        .args(["--args", "/usr/bin/python3", "-c", script])
        .output()
        .expect("gdb");
    let native = String::from_utf8_lossy(&native.stdout).into_owned() + &String::from_utf8_lossy(&native.stderr);
    assert!(replayed.contains("SIGSEGV"), "{replayed}");
    assert!(native.contains("$1 = 0x0"), "native: {native}");
    assert!(replayed.contains("$1 = 0x0"), "the NULL passed to strlen: {replayed}");
    assert!(replayed.contains("$2 = 0x"), "the stack pointer: {replayed}");
    // Frame 0 is glibc's strlen of each CPU (AVX2 under QEMU, maybe EVEX natively); the
    // callers are the same libraries in the same order.
    let (want, got) = (common::gdb::frame_places(&native), common::gdb::frame_places(&replayed));
    assert!(want.len() >= 7, "native: {native}");
    assert!(got[0].starts_with("__strlen_"), "{replayed}");
    assert_eq!(got[1..], want[1..], "replayed:\n{replayed}\nnative:\n{native}");
}

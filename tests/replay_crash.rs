//! A real crash in a real interpreter, as issue 17 found it: `python3 -c 'import ctypes;
//! ctypes.string_at(0)'` recorded with the qemu backend dies of SIGSEGV in glibc's `strlen`.
//! Replayed in gdb, the NULL that caused it, the stack pointer and the frames down through
//! libffi must show as native gdb shows them at the same fault.

mod common;

use std::process::Command;

#[test]
fn python3s_null_pointer_crash_shows_the_null_and_the_frames() {
    let dir = common::scratch("replay_crash", "python3-ctypes");
    let script = "import ctypes; ctypes.string_at(0)";
    let rec = dir.join("rec");
    common::record_python3_crash(&rec, script, &["--backend", "qemu"]);
    // `rtit replay` starts the gdb it is given: a script that runs gdb in batch mode.
    let gdb = dir.join("gdb.sh");
    std::fs::write(
        &gdb,
        "#!/bin/sh\nexec gdb -batch -nx \"$@\" -ex 'set pagination off' -ex continue -ex 'p/x $rdi' -ex 'p/x $rsp' -ex 'bt 7' -ex 'p/x $eflags & 0x10000'\n",
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
    let native = common::gdb::native_python3_crash(script);
    common::gdb::assert_same_python3_crash(&replayed, &native);
    // RFLAGS.RF, which the kernel saved at the fault and QEMU's CPU keeps none of.
    let (got, want) = (common::gdb::printed(&replayed), common::gdb::printed(&native));
    assert_eq!(want.get(1).map(String::as_str), Some("0x10000"), "native: {native}");
    assert_eq!(
        got.get(2),
        want.get(1),
        "RF at the fault\nreplayed:\n{replayed}\nnative:\n{native}"
    );
}

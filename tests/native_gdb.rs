//! Replays compared with native gdb on the same programs: Debian's grep stopped at its
//! `write` (the frames and what `finish` returns), recorded with each backend; and values that
//! come from the kernel (the time, read through the vDSO where there is one) shown as the
//! program printed them.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::gdb::{frame_functions, Server};
use rtit_replay_core::recording::Recording;

/// Records `args` in `dir` with `backend` (from `main` if `from_main`), its standard output
/// into `out.txt`.
fn record(dir: &Path, backend: &str, from_main: bool, args: &[&str]) -> Recording {
    let out_file = std::fs::File::create(dir.join("out.txt")).expect("output");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rtit"));
    cmd.args(["record", "--backend", backend, "--out"]).arg(dir.join("rec"));
    if from_main {
        cmd.args(["--start", "main"]);
    }
    if backend == "qemu" {
        cmd.env("RTIT_QEMU_PLUGIN", common::plugin());
    }
    let status = cmd
        .current_dir(dir)
        .arg("--")
        .args(args)
        .stdout(out_file)
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.success(), "{args:?} ran to its end");
    Recording::open(&dir.join("rec")).expect("the recording opens")
}

/// Debian's grep, dynamically linked, recorded with `backend`: at its one `write` (stdout
/// flushed at exit, 13 frames deep through libc) `bt` lists the frames native gdb lists and
/// `finish` returns what native gdb's does.
fn backtrace_and_finish_at_write_match_native_gdb(backend: &str, from_main: bool) {
    let dir = common::scratch("native_gdb", &format!("{backend}-grep-write"));
    std::fs::write(dir.join("in.txt"), "hello\nworld\nfoo\nzebra\napple\n").expect("input");
    let rec = record(&dir, backend, from_main, &["/usr/bin/grep", "o", "in.txt"]);
    let commands = ["set breakpoint pending on", "break write", "continue", "bt", "finish"];
    let native = Command::new("gdb")
        .args([
            "-batch",
            "-nx",
            "-ex",
            "set breakpoint pending on",
            "-ex",
            "break write",
        ])
        .arg("-ex")
        .arg(format!("run o in.txt > {}", dir.join("native.txt").display()))
        .args(["-ex", "bt", "-ex", "finish", "/usr/bin/grep"])
        .current_dir(&dir)
        .output()
        .expect("gdb");
    let native = String::from_utf8_lossy(&native.stdout).into_owned() + &String::from_utf8_lossy(&native.stderr);
    let replayed = Server::start(&rec).gdb(None, &commands);
    let want = frame_functions(&native);
    assert!(want.len() >= 10, "native gdb's backtrace: {native}");
    assert_eq!(
        frame_functions(&replayed),
        want,
        "replayed:\n{replayed}\nnative:\n{native}"
    );
    let value = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("Value returned"))
            .map(str::to_string)
    };
    assert_eq!(value(&replayed), value(&native), "finish: {replayed}");
    assert!(value(&native).is_some(), "{native}");
}

#[test]
fn qemu_backend_backtrace_and_finish_at_write_match_native_gdb() {
    backtrace_and_finish_at_write_match_native_gdb("qemu", false);
}

#[test]
fn step_backend_backtrace_and_finish_at_write_match_native_gdb() {
    // From main: ptrace single-steps 16,000 instructions a second, and grep's start-up is
    // 300,000 of them.
    backtrace_and_finish_at_write_match_native_gdb("step", true);
}

/// Records tests/programs/times.c with `backend` and checks that the replay shows at its
/// `printf` the times the program printed.
fn times_are_shown_as_the_program_read_them(backend: &str) {
    let dir = common::scratch("native_gdb", &format!("{backend}-times"));
    let exe = common::gcc("tests/programs/times.c", &[], &dir);
    let rec = record(&dir, backend, true, &[exe.to_str().expect("utf-8")]);
    let printed = std::fs::read_to_string(dir.join("out.txt")).expect("output");
    let out = Server::start(&rec).gdb(
        Some(&exe),
        &[
            "break printf",
            "continue",
            "p ts.tv_sec",
            "p ts.tv_nsec",
            "p tv.tv_sec",
            "p tv.tv_usec",
            "p t",
        ],
    );
    let shown: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix('$').and_then(|l| l.split_once(" = ")).map(|(_, v)| v))
        .collect();
    let want: Vec<&str> = printed.split_whitespace().collect();
    assert_eq!(want.len(), 5, "{printed}");
    assert_eq!(shown, want, "gdb:\n{out}\nthe program printed: {printed}");
}

#[test]
fn step_backend_shows_the_time_the_program_read() {
    // The vDSO is hidden from the program, so the time comes from logged system calls.
    times_are_shown_as_the_program_read_them("step");
}

#[test]
fn qemu_backend_shows_the_time_the_program_read() {
    // QEMU 7.2 gives its programs no vDSO.
    times_are_shown_as_the_program_read_them("qemu");
}

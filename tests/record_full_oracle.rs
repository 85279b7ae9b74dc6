//! gdb's own `record full` as the oracle for reverse execution: the same program
//! (tests/programs/oracle/oracle.c: library calls, system calls that write memory, the time, a
//! signal) is debugged with the same commands from `main` natively under `record full` and as
//! an rtit replay, with each backend; every command must stop at the same place and print the
//! same values.
//!
//! What `record full` needs on this project's machines (gdb 13): glibc's SSE2 routines (it
//! cannot record VEX or EVEX instructions), `LD_BIND_NOW` (it does not decode `xsavec` in the
//! lazy-binding trampoline), the time calls as system calls (it does not record `rdtscp` in
//! the vDSO), and a target description without AVX (on a CPU with AMX, gdb's XSAVE buffer is
//! smaller than the kernel's and every write of a vector register fails with "Couldn't write
//! extended state status"; with only SSE described gdb uses the FXSAVE register set). gdb 13
//! also records some general registers wrongly (r8–r15 through some `mov` forms, `pmovmskb`'s
//! destination), so the program is built -O0 and only stops, frames and values in memory
//! are compared. If `record full` still refuses something, the test says so and skips.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::gdb::{interleaved, Server};
use rtit_replay_core::recording::Recording;

/// What glibc 2.36 needs to run only SSE2 code in its string and memory routines.
const SSE2: &str =
    "glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,-AVX2,-AVX,-AVX_Fast_Unaligned_Load,-ERMS";

/// Where both sides start: the first statement of `main` that runs code (locals printed
/// before they are set would show the stack's old bytes, which differ between two runs).
const START: &str = "break 44";

/// The commands compared, run from [`START`] on both sides. `reverse-next` steps only over
/// calls whose code has one entry: over glibc's `memset`, native `record full` misses the
/// function's start going backwards and runs to the beginning of its history.
const COMMANDS: &[&str] = &[
    "next",
    "p n",
    "next",
    "p line",
    "next",
    "p values",
    "step",
    "bt",
    "next",
    "finish",
    "next",
    "p total",
    "next",
    "next",
    "next",
    "next",
    "p got",
    "p buf",
    "next",
    "next",
    "p gotv",
    "p first",
    "p second",
    "next",
    "p ruid == euid",
    "next",
    "p (st.st_mode & 0170000) == 0010000",
    "next",
    "next",
    "next",
    "next",
    "p later",
    "next",
    "next",
    "next",
    "next",
    "p hits",
    "next",
    "p hits",
    "next",
    "p total",
    "reverse-next",
    "p total",
    "reverse-next",
    "p hits",
    "reverse-next",
    "p hits",
    "reverse-next",
    "reverse-next",
    "p later",
    "break handler",
    "continue",
    "bt 1",
    "p sig",
    "p hits",
    "continue",
    "p hits",
    "reverse-continue",
    "p hits",
    "delete",
    "break sum",
    "reverse-continue",
    "bt",
    "p n",
    "reverse-finish",
    "p total",
    "reverse-next",
    "p values",
    "reverse-next",
    "p line",
];

/// Lines that differ between a native run and a replay for reasons of no interest (file
/// reads, thread library notes, process ids), and addresses (QEMU loads a program elsewhere).
fn normalize(block: &str) -> String {
    block
        .lines()
        .filter(|l| {
            !(l.starts_with("Reading ")
                || l.starts_with("warning:")
                || l.starts_with("[Inferior")
                || l.starts_with("[Thread debugging")
                || l.starts_with("Using host libthread_db")
                || l.starts_with("Download failed")
                || l.trim().is_empty())
        })
        .map(|l| {
            let mut out = String::new();
            let mut rest = l;
            while let Some(i) = rest.find("0x") {
                out.push_str(&rest[..i]);
                let hex = rest[i + 2..].bytes().take_while(u8::is_ascii_hexdigit).count();
                out.push_str(if hex >= 6 { "0xADDR" } else { &rest[i..i + 2 + hex] });
                rest = &rest[i + 2 + hex..];
            }
            out.push_str(rest);
            out
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// gdb's output split at the markers echoed before each compared command.
fn blocks(out: &str) -> Vec<String> {
    out.split("@@@ ").skip(1).map(normalize).collect()
}

/// The arguments that echo a marker before each command.
fn marked(commands: &[&str]) -> Vec<String> {
    commands
        .iter()
        .flat_map(|c| {
            [
                "-ex".to_string(),
                format!("echo @@@ {c}\\n"),
                "-ex".to_string(),
                c.to_string(),
            ]
        })
        .collect()
}

/// The program and the preload library, built once per test into `dir`.
fn build(dir: &Path) -> (PathBuf, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/oracle");
    let exe = dir.join("oracle");
    let lib = dir.join("novdso.so");
    for (args, what) in [
        (vec!["-O0", "-g", "-o"], (&exe, src.join("oracle.c"))),
        (vec!["-O1", "-shared", "-fPIC", "-o"], (&lib, src.join("novdso.c"))),
    ] {
        let status = Command::new("gcc")
            .args(args)
            .arg(what.0)
            .arg(what.1)
            .status()
            .expect("gcc is needed");
        assert!(status.success(), "gcc");
    }
    (exe, lib)
}

/// The native side: the program run to [`START`] under gdb, `record full`, the commands.
fn native(dir: &Path, exe: &Path, lib: &Path) -> String {
    // The description rtit serves, less AVX: gdb then writes registers with the FXSAVE set.
    let tdesc = include_str!("../stub/src/target.xml");
    let avx = tdesc
        .find("  <feature name=\"org.gnu.gdb.i386.avx\">")
        .expect("avx feature");
    let end = tdesc[avx..].find("</feature>").expect("its end") + avx + "</feature>\n".len();
    let sse_only = dir.join("sse-only.xml");
    std::fs::write(&sse_only, format!("{}{}", &tdesc[..avx], &tdesc[end..])).expect("tdesc");
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", "set pagination off"])
        .arg("-ex")
        .arg(format!("set tdesc filename {}", sse_only.display()))
        .arg("-ex")
        .arg(format!("set environment GLIBC_TUNABLES={SSE2}"))
        .args(["-ex", "set environment LD_BIND_NOW=1"])
        .arg("-ex")
        .arg(format!("set environment LD_PRELOAD={}", lib.display()))
        .args(["-ex", "handle SIGUSR1 nostop noprint pass"])
        .args(["-ex", START, "-ex", "run", "-ex", "record full"])
        .args(marked(COMMANDS))
        .arg(exe)
        .current_dir(dir);
    interleaved(&mut gdb)
}

/// The rtit side: the program recorded from `main` with `backend`, replayed, run to
/// [`START`], the commands.
fn replayed(dir: &Path, exe: &Path, backend: &str) -> String {
    let rec = dir.join(format!("rec-{backend}"));
    let mut record = Command::new(env!("CARGO_BIN_EXE_rtit"));
    record
        .args(["record", "--backend", backend, "--start", "main", "--out"])
        .arg(&rec);
    if backend == "qemu" {
        record.env("RTIT_QEMU_PLUGIN", common::plugin());
    }
    let status = record
        .arg("--")
        .arg(exe)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.success(), "the program ran to its end under rtit record");
    let rec = Recording::open(&rec).expect("a recording");
    let mut commands = vec!["handle SIGUSR1 nostop noprint pass", START, "continue"];
    let markers = marked(COMMANDS);
    commands.extend(markers.iter().filter(|a| *a != "-ex").map(String::as_str));
    Server::start(&rec).gdb(Some(exe), &commands)
}

/// Compares the two sides command by command.
fn compare(backend: &str) {
    let dir = common::scratch("record_full_oracle", backend);
    let (exe, lib) = build(&dir);
    let native = native(&dir, &exe, &lib);
    for refusal in [
        "Process record does not support",
        "Couldn't write extended state status",
    ] {
        if native.contains(refusal) {
            eprintln!("SKIPPED: gdb's record full cannot serve as the oracle on this machine ({refusal}):\n{native}");
            return;
        }
    }
    let want = blocks(&native);
    assert_eq!(want.len(), COMMANDS.len(), "every command ran natively:\n{native}");
    let replayed = replayed(&dir, &exe, backend);
    // Both whole outputs, for a look when the comparison fails.
    std::fs::write(dir.join("native.txt"), &native).expect("write");
    std::fs::write(dir.join("rtit.txt"), &replayed).expect("write");
    let got = blocks(&replayed);
    let mut diffs = Vec::new();
    for (i, c) in COMMANDS.iter().enumerate() {
        let (w, g) = (&want[i], got.get(i).map_or("<nothing>", String::as_str));
        if w != g {
            diffs.push(format!(
                "command {i} `{c}`:\n  record full: {w:?}\n  rtit:        {g:?}"
            ));
        }
    }
    assert!(
        diffs.is_empty(),
        "{} of {} commands differ ({backend} backend; whole outputs in {}):\n{}",
        diffs.len(),
        COMMANDS.len(),
        dir.display(),
        diffs.join("\n")
    );
}

#[test]
fn the_step_backend_replays_as_record_full_does() {
    compare("step");
}

#[test]
fn the_qemu_backend_replays_as_record_full_does() {
    compare("qemu");
}

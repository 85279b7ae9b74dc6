//! The state layer against the recorder's truth: every example is recorded with
//! `rtit record --truth` (registers sampled every 97 instructions by ptrace) and checked with
//! `rtit check-values`, which fails on any wrong value or any disagreement between the forward
//! and backward passes. Known-and-right rates are asserted only loosely (they are reported in
//! the README); a wrong value is never allowed.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn scratch_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("values").join(name)
}

fn scratch(name: &str) -> PathBuf {
    let dir = scratch_dir(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Compiles an example, records it with the step backend and the truth, and returns the
/// output of `rtit check-values` (asserting it succeeded).
fn check(name: &str, dynamic: bool, from_main: bool) -> String {
    check_source(&format!("examples/c/{name}.c"), dynamic, from_main, &[])
}

/// [`check`] for any C source of the repository, `env` set for the recorded program.
fn check_source(source: &str, dynamic: bool, from_main: bool, env: &[(&str, &str)]) -> String {
    let name = Path::new(source)
        .file_stem()
        .expect("a file")
        .to_string_lossy()
        .into_owned();
    let dir = scratch(&format!("{name}-{dynamic}-{from_main}-{}", env.len()));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(source);
    let exe = dir.join(&name);
    let mut gcc = Command::new("gcc");
    gcc.args(["-O1", "-g", "-o"]).arg(&exe).arg(&src);
    if !dynamic {
        gcc.arg("-static");
    }
    assert!(gcc.status().expect("gcc is needed").success());
    let rec = dir.join("rec");
    let mut record = Command::new(env!("CARGO_BIN_EXE_rtit"));
    record
        .args(["record", "--backend", "step", "--truth", "--out"])
        .arg(&rec);
    if from_main {
        record.args(["--start", "main"]);
    }
    let status = record
        .envs(env.iter().copied())
        .arg("--")
        .arg(&exe)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.code().is_some(), "rtit record ran");
    check_values(&rec, &name)
}

/// `rtit check-values REC`'s output, asserting it succeeded (no wrong value, no conflict).
fn check_values(rec: &Path, name: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .arg("check-values")
        .arg(rec)
        .output()
        .expect("rtit check-values");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name}: no value may be wrong:\n{text}");
    text
}

/// The environment that makes glibc 2.36 pick its SSE2 string and memory routines (without
/// `-AVX_Fast_Unaligned_Load` memcpy stays AVX; `strcspn` and the like keep SSE4.2).
const SSE2: (&str, &str) = (
    "GLIBC_TUNABLES",
    "glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,-AVX2,-AVX,-AVX_Fast_Unaligned_Load,-ERMS",
);

/// The known-and-right percentage `check-values` printed for a row.
fn right(out: &str, row: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("{row} ")))
        .unwrap_or_else(|| panic!("no {row} row:\n{out}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    let wrong: u64 = cols[cols.len() - 3].parse().expect("wrong count");
    assert_eq!(wrong, 0, "{line}");
    cols[cols.len() - 1]
        .trim_end_matches('%')
        .parse()
        .expect("a percentage")
}

#[test]
fn no_value_is_ever_wrong_in_the_static_examples_from_main() {
    for name in ["recursion", "dispatch", "longjmp", "signals", "crash", "goto", "deep"] {
        let out = check(name, false, true);
        assert_eq!(right(&out, "rip"), 100.0, "{name}: rip is always known:\n{out}");
        assert!(
            right(&out, "rsp") >= 80.0,
            "{name}: rsp is known at most positions:\n{out}"
        );
        assert!(right(&out, "all GPRs") > 30.0, "{name}:\n{out}");
    }
}

#[test]
fn frames_are_known_throughout_the_recursion() {
    let out = check("recursion", false, true);
    assert_eq!(right(&out, "rsp"), 100.0, "{out}");
    assert!(right(&out, "rbp") > 90.0, "{out}");
    assert!(right(&out, "all GPRs") > 90.0, "{out}");
}

#[test]
fn no_value_is_ever_wrong_from_the_entry_point_and_with_the_dynamic_loader() {
    // From the entry point: the C library's start-up code, its system calls and TLS setup.
    let out = check("recursion", false, false);
    assert!(right(&out, "rsp") > 50.0, "{out}");
    assert_eq!(
        right(&out, "fs_base"),
        100.0,
        "arch_prctl(ARCH_SET_FS) is followed: {out}"
    );
    // A dynamic executable from main: PLT calls, the C library as a shared object.
    check("dynamic", true, true);
}

#[test]
fn the_dynamic_loader_from_the_entry_point_with_its_cache_logged() {
    let out = check("dynamic", true, false);
    assert!(right(&out, "rsp") > 10.0, "{out}");
    // The loader maps /etc/ld.so.cache, not an ELF image: the step backend logs its bytes
    // with the mmap call, so replay knows the library paths it reads there.
    let syscalls = std::fs::read_to_string(scratch_dir("dynamic-true-false-0").join("rec/syscalls.jsonl"))
        .expect("syscalls.jsonl");
    let magic: String = b"glibc-ld.so.cache".iter().map(|b| format!("{b:02x}")).collect();
    if Path::new("/etc/ld.so.cache").exists() {
        assert!(
            syscalls.lines().any(|l| l.contains("\"nr\":9,") && l.contains(&magic)),
            "an mmap record holds the cache's bytes"
        );
    }
}

/// The percentage of unknown GPR samples `check-values` blamed on a cause kind.
fn blamed(out: &str, kind: &str) -> f64 {
    out.lines()
        .skip_while(|l| !l.starts_with("why GPR samples"))
        .find(|l| l.trim_start().starts_with(kind))
        .map_or(0.0, |l| {
            l.split_whitespace()
                .last()
                .and_then(|p| p.trim_end_matches('%').parse().ok())
                .expect("a percentage")
        })
}

#[test]
fn glibc_string_routines_carries_atomics_and_cpuid_are_computed_exactly() {
    // glibc's SSE2 string routines (any CPU told so).
    let out = check_source("tests/programs/semantics.c", false, true, &[SSE2]);
    assert!(right(&out, "all GPRs") >= 99.0, "{out}");
    assert_eq!(right(&out, "rsp"), 100.0, "{out}");
    assert_eq!(blamed(&out, "store through"), 0.0, "{out}");
    assert_eq!(
        blamed(&out, "unmodelled"),
        0.0,
        "cpuid and rdtsc come from the log: {out}"
    );
    let results = std::fs::read_to_string(scratch_dir("semantics-false-true-1").join("rec/results.jsonl"))
        .expect("results.jsonl");
    assert!(
        results.lines().count() >= 2 * 39,
        "a cpuid and an rdtsc per round:\n{results}"
    );
    // This CPU's own choice (AVX2, or AVX-512's EVEX routines with the program's own AVX-512
    // function): as well known, never wrong.
    let out = check_source("tests/programs/semantics.c", false, true, &[]);
    assert!(right(&out, "all GPRs") >= 99.0, "{out}");
    assert!(right(&out, "xmm0-15") >= 99.0, "{out}");
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if ["avx512bw", "avx512vl", "avx512dq"]
        .iter()
        .all(|f| cpuinfo.split_whitespace().any(|w| w == *f))
    {
        assert!(right(&out, "zmm16-31") >= 99.0, "{out}");
        assert!(right(&out, "k0-7") >= 99.0, "{out}");
    } else {
        eprintln!("this CPU has no AVX-512: its part of semantics.c did not run");
    }
}

#[test]
fn a_signal_return_restores_the_interrupted_vector_state() {
    // The handler changes vector registers; rt_sigreturn loads the interrupted ones back from
    // the frame. Before the state layer modelled that, the handler's values were shown after
    // the return (58 wrong xmm samples).
    let out = check_source("tests/programs/signal_vectors.c", true, true, &[]);
    assert!(right(&out, "all GPRs") >= 99.0, "{out}");
    assert!(right(&out, "xmm0-15") >= 99.0, "{out}");
}

#[test]
fn debian_grep_from_its_entry_point() {
    // The real, dynamically linked grep, from the dynamic loader's first instruction: lazy
    // binding (xsavec), glibc's SSE2 string routines reading past strings' ends, futex,
    // cpuid. About 550,000 instructions (35 s with the step backend).
    let grep = Path::new("/usr/bin/grep");
    assert!(grep.exists(), "Debian's grep is part of every machine of this kind");
    let dir = scratch("grep");
    std::fs::write(dir.join("in.txt"), "hello\nworld\nfoo\nzebra\napple\n").expect("input");
    let rec = dir.join("rec");
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "step", "--truth", "--out"])
        .arg(&rec)
        .env(SSE2.0, SSE2.1)
        .current_dir(&dir)
        .args(["--", "/usr/bin/grep", "o", "in.txt"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.success(), "grep found matches: status 0");
    let text = check_values(&rec, "grep");
    assert!(right(&text, "rsp") >= 99.0, "{text}");
    assert!(right(&text, "all GPRs") >= 99.0, "{text}");
    // cpuid, rdtsc, xgetbv and xsavec ran, and the log gave their results: none is listed
    // as an instruction to model.
    assert!(
        !text.contains("instructions nobody modelled"),
        "every instruction's result known: {text}"
    );
}

/// How many samples `check-values` compared.
fn samples(out: &str) -> u64 {
    out.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sample count:\n{out}"))
}

#[test]
fn the_qemu_backend_samples_registers_through_qemus_gdbstub() {
    // Debian's sort under qemu-x86_64, from the loader's first instruction: the registers come
    // from QEMU's gdbstub at random stops between blocks, placed by the plugin's position.
    let dir = scratch("qemu-sort");
    let _removed = common::RemovedOnSuccess(dir.clone());
    // Samples come 3-13 ms apart: 10,000 lines (31 M instructions) give 20-35 of them.
    let lines: String = (0..10_000).map(|i| format!("{}\n", (i * 7919) % 10_007)).collect();
    std::fs::write(dir.join("in.txt"), lines).expect("input");
    let rec = dir.join("rec");
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--truth", "--out"])
        .arg(&rec)
        .current_dir(&dir)
        .args(["--", "/usr/bin/sort", "-n", "in.txt"])
        .stdout(Stdio::null())
        .output()
        .expect("rtit record");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let text = check_values(&rec, "qemu sort");
    // The entry's registers, and more taken at random while it ran.
    assert!(samples(&text) >= 5, "{text}");
    assert_eq!(right(&text, "rip"), 100.0, "{text}");
    // With the plugin's logs (mapped files, the CPUID table, QEMU's syscall keeping rcx and
    // r11), sort's values are known throughout.
    assert!(right(&text, "rsp") >= 99.0, "{text}");
    assert!(right(&text, "all GPRs") >= 99.0, "{text}");
    // The selectors QEMU's loader gives, and the GS base ARCH_SET_FS leaves alone.
    for r in ["cs", "ss", "ds", "es", "fs", "gs", "gs_base"] {
        assert_eq!(right(&text, r), 100.0, "{r}: {text}");
    }
}

#[test]
fn the_qemu_backend_knows_python3s_values_from_its_entry_point() {
    // The real interpreter's startup (about 30 M instructions): its string routines
    // (packs, aligns, lzcnt), directory reads (getdents64), a restarted read (the sampler's
    // signal interrupts it), and floating-point arithmetic under MXCSR's default, any of
    // which, unknown, led to a store through an unknown address that forgot all memory.
    let dir = scratch("qemu-python3");
    let _removed = common::RemovedOnSuccess(dir.clone());
    let rec = dir.join("rec");
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--truth", "--out"])
        .arg(&rec)
        .current_dir(&dir)
        .args(["--", "/usr/bin/python3", "-c", "print(sum(range(10)))"])
        .stdout(Stdio::null())
        .output()
        .expect("rtit record");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let text = check_values(&rec, "qemu python3");
    assert!(samples(&text) >= 50, "{text}");
    assert!(right(&text, "rsp") >= 99.0, "{text}");
    assert!(right(&text, "all GPRs") >= 99.0, "{text}");
}

#[test]
fn the_qemu_backend_keeps_the_segment_bases_across_a_signal_return() {
    // python3 with a signal handler it runs 20 times: rt_sigreturn restores neither the
    // segment bases nor DS, ES, FS, GS. Forgotten there, the FS base made every TLS access
    // after the first handler's return unknown (errno's address, a store through it that
    // forgot the stack), and `bt` stopped and `write`'s buffer was unknown to the end.
    let dir = scratch("qemu-python3-signals");
    let _removed = common::RemovedOnSuccess(dir.clone());
    let rec = dir.join("rec");
    let script = "import os, signal\n\
                  signal.signal(signal.SIGUSR1, lambda s, f: None)\n\
                  for _ in range(20): os.kill(os.getpid(), signal.SIGUSR1)\n\
                  print(sum(range(10)))";
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--truth", "--out"])
        .arg(&rec)
        .current_dir(&dir)
        .args(["--", "/usr/bin/python3", "-c", script])
        .stdout(Stdio::null())
        .output()
        .expect("rtit record");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let signals = std::fs::read_to_string(rec.join("signals.jsonl")).expect("signals.jsonl");
    assert_eq!(signals.lines().count(), 20, "every delivery logged");
    let text = check_values(&rec, "qemu python3 with signals");
    assert!(samples(&text) >= 50, "{text}");
    for r in ["fs_base", "gs_base", "ds", "es", "fs", "gs"] {
        assert_eq!(right(&text, r), 100.0, "{r}: {text}");
    }
    assert!(right(&text, "rsp") >= 99.0, "{text}");
    assert!(right(&text, "all GPRs") >= 99.0, "{text}");
}

#[test]
fn the_qemu_backend_knows_the_registers_where_tracing_starts() {
    // Debian's sort is stripped: `--start main` is the function its entry point hands to
    // __libc_start_main. QEMU's gdbstub stops there (a breakpoint) before the plugin starts
    // tracing; its registers, vector registers and MXCSR are the recording's first state.
    let dir = scratch("qemu-sort-main");
    let _removed = common::RemovedOnSuccess(dir.clone());
    // 31 M instructions: samples come every 3-13 ms of the run, and 3000 lines (8 M) gave as
    // few as 4 on a loaded machine.
    let lines: String = (0..10_000).map(|i| format!("{}\n", (i * 7919) % 10_007)).collect();
    std::fs::write(dir.join("in.txt"), lines).expect("input");
    let rec = dir.join("rec");
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--truth", "--start", "main", "--out"])
        .arg(&rec)
        .current_dir(&dir)
        .args(["--", "/usr/bin/sort", "-n", "in.txt"])
        .stdout(Stdio::null())
        .output()
        .expect("rtit record");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("unknown"), "no warning about the start registers: {err}");
    let manifest = std::fs::read_to_string(rec.join("manifest.json")).expect("manifest");
    let manifest: serde_json::Value = serde_json::from_str(&manifest).expect("json");
    let start = &manifest["registers_start"];
    assert_eq!(start["rip"], manifest["start_ip"], "{start}");
    for reg in ["rsp", "rdi", "rsi", "fs_base", "xmm0", "mxcsr"] {
        assert!(start[reg].is_string(), "{reg} at the start: {start}");
    }
    // main(argc, argv): argc is 3.
    assert_eq!(start["rdi"], "0x3", "{start}");
    let text = check_values(&rec, "qemu sort from main");
    assert!(samples(&text) >= 5, "{text}");
    assert!(right(&text, "rsp") >= 99.0, "{text}");
    assert!(right(&text, "all GPRs") >= 99.0, "{text}");
    // The vector registers and MXCSR, through glibc's lazy binding (XSAVE and XRSTOR).
    assert!(right(&text, "xmm0-15") >= 99.0, "{text}");
    assert!(right(&text, "mxcsr") >= 99.0, "{text}");
}

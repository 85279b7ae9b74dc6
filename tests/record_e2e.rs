//! `rtit record` end to end: the C programs of examples/c are compiled, recorded from `main`
//! with the step backend, and `rtit insns` on each recording must reproduce the recorder's
//! truth instruction by instruction, under RET compression on and off and a small PSB period.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nix::sys::signal::Signal;

use rtit_replay_core::recording::{EndState, Recording};

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("record_e2e").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Compiles a C file into `dir` (static unless `dynamic`).
fn compile_c(src: &Path, dynamic: bool, dir: &Path) -> PathBuf {
    let name = src.file_stem().expect("a file name").to_string_lossy().into_owned();
    let exe = dir.join(&name);
    let mut gcc = Command::new("gcc");
    gcc.args(["-O1", "-o"]).arg(&exe).arg(src);
    if !dynamic {
        gcc.arg("-static");
    }
    if name == "threads" {
        gcc.arg("-pthread");
    }
    let status = gcc.status().expect("gcc is needed (`.ci/run` installs it)");
    assert!(status.success(), "gcc failed on {}", src.display());
    exe
}

/// Compiles examples/c/NAME.c.
fn compile(name: &str, dynamic: bool, dir: &Path) -> PathBuf {
    compile_c(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/c/{name}.c")),
        dynamic,
        dir,
    )
}

/// Compiles tests/programs/NAME.c, static.
fn compile_test_program(name: &str, dir: &Path) -> PathBuf {
    compile_c(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c")),
        false,
        dir,
    )
}

fn rtit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(args)
        .env(
            "RTIT_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("record_e2e/default-root"),
        )
        .output()
        .expect("run rtit")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Records `exe` with `flags`; returns the recording and rtit's exit status.
fn record(exe: &Path, out: &Path, flags: &[&str]) -> (Recording, i32) {
    let mut args = vec![
        "record",
        "--backend",
        "step",
        "--truth",
        "--start",
        "main",
        "--out",
        s(out),
    ];
    args.extend_from_slice(flags);
    args.extend(["--", s(exe)]);
    let result = rtit(&args);
    let rec = Recording::open(out)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", out.display(), String::from_utf8_lossy(&result.stderr)));
    (rec, result.status.code().unwrap_or(-1))
}

/// `rtit insns --json` on the recording equals its truth, with no error event.
fn check_truth(rec: &Recording, what: &str) {
    common::assert_decode_is_truth(rec, what, 300);
}

fn run_example(name: &str, dynamic: bool, expect_status: i32) {
    let dir = scratch(name);
    let exe = compile(name, dynamic, &dir);
    let configs: [(&str, &[&str]); 3] = [
        ("default", &[]),
        ("no-ret-compression", &["--no-ret-compression"]),
        ("psb-2048", &["--psb-period", "2048"]),
    ];
    for (config, flags) in configs {
        let (rec, status) = record(&exe, &dir.join(config), flags);
        assert_eq!(
            status, expect_status,
            "{name}/{config}: rtit record exits with the program's status"
        );
        check_truth(&rec, &format!("{name}/{config}"));
    }
}

#[test]
fn recursion() {
    run_example("recursion", false, 0);
}

#[test]
fn function_pointers_and_a_jump_table() {
    run_example("dispatch", false, 0);
}

#[test]
fn setjmp_longjmp() {
    run_example("longjmp", false, 0);
}

#[test]
fn signal_handlers_for_raise_and_sigsegv() {
    run_example("signals", false, 0);
}

#[test]
fn computed_goto() {
    run_example("goto", false, 0);
}

#[test]
fn deep_recursion() {
    run_example("deep", false, 0);
}

#[test]
fn dynamically_linked_with_the_vdso() {
    run_example("dynamic", true, 0);
    let rec = Recording::open(&scratch_path("dynamic").join("default")).expect("recording");
    let images: Vec<&str> = rec.manifest.images.iter().map(|i| i.path.as_str()).collect();
    assert!(images.contains(&"[vdso]"), "{images:?}");
    assert!(images.iter().any(|p| p.contains("libc")), "{images:?}");
}

fn scratch_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("record_e2e").join(name)
}

#[test]
fn a_crash_ends_the_recording_with_the_signal() {
    run_example("crash", false, 128 + 11);
    let rec = Recording::open(&scratch_path("crash").join("default")).expect("recording");
    match &rec.manifest.end {
        EndState::Signaled { name, address, .. } => {
            assert_eq!(name, "SIGSEGV");
            assert_eq!(address.as_deref(), Some("0x8"));
        }
        other => panic!("{other:?}"),
    }
}

/// A thread created before the start point: the start is refused, naming why, and the
/// program runs on unrecorded (its own thread reaching the breakpoint would have died of
/// the SIGTRAP).
#[test]
fn a_thread_before_the_start_point_is_refused_and_the_program_runs_on() {
    let dir = scratch("threads_before_start");
    let exe = compile("threads", true, &dir);
    let out = dir.join("rec");
    let result = rtit(&[
        "record",
        "--backend",
        "step",
        "--start",
        "work",
        "--out",
        s(&out),
        "--",
        s(&exe),
    ]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(String::from_utf8_lossy(&result.stdout), "sum 500500\n", "{stderr}");
    assert_eq!(result.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--start work: the program created a thread before reaching it")
            && stderr.contains("ran on unrecorded and exited with status 7"),
        "{stderr}"
    );
}

#[test]
fn bad_programs_are_one_line_errors_and_leave_nothing_behind() {
    let dir = scratch("bad");
    let script = dir.join("script.sh");
    std::fs::write(&script, "#!/no/such/shell\nexit 0\n").expect("write");
    let plain = dir.join("plain.sh");
    std::fs::write(&plain, "echo hi\n").expect("write");
    let elf32 = dir.join("elf32");
    std::fs::write(
        &elf32,
        [0x7f, b'E', b'L', b'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 3, 0],
    )
    .expect("write");
    let cases = [
        (dir.join("missing"), "cannot open it"),
        (PathBuf::from("no-such-program-anywhere"), "not found"),
        (script, "cannot be run: /no/such/shell: No such file"),
        (
            plain,
            "without a #! line, which a shell runs with /bin/sh: record that, `rtit record -- /bin/sh",
        ),
        (elf32, "32-bit"),
    ];
    for (program, problem) in cases {
        let out = dir.join("rec");
        let result = rtit(&["record", "--backend", "step", "--out", s(&out), "--", s(&program)]);
        assert_ne!(result.status.code(), Some(0), "{}", program.display());
        let err = String::from_utf8_lossy(&result.stderr);
        let last = err.lines().last().unwrap_or_default();
        assert!(last.contains(problem), "{}: {err}", program.display());
        assert!(!out.exists(), "no partial recording for {}", program.display());
    }
}

/// SIGINT and SIGTERM stop a step recording: a valid recording that names the signal, the
/// exit status 128 + signal, and a history that accounts for exactly the instructions the
/// recorder counted. In `busy` the last branches' bits come from RTIT_TNT_BUFF, not a packet,
/// and every instruction is shown; `spin` (`for (;;) n++;`) needs nothing from the trace, so
/// its first passes are shown and the rest are counted as spinning.
#[test]
fn a_signal_leaves_a_valid_recording_marked_interrupted_with_its_name() {
    for (program, signal, status) in [("busy", Signal::SIGINT, 130), ("spin", Signal::SIGTERM, 143)] {
        let dir = scratch(&format!("{program}-{signal}"));
        let exe = compile_test_program(program, &dir);
        let out = dir.join("rec");
        let mut child = Command::new(env!("CARGO_BIN_EXE_rtit"))
            .args([
                "record",
                "--backend",
                "step",
                "--start",
                "main",
                "--out",
                s(&out),
                "--",
                s(&exe),
            ])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("rtit record");
        std::thread::sleep(std::time::Duration::from_millis(700));
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("signal");
        let exit = child.wait().expect("rtit record ends");
        assert_eq!(exit.code(), Some(status), "{signal}");
        let rec = Recording::open(&out).expect("a valid recording");
        assert_eq!(
            rec.manifest.end,
            EndState::Interrupted {
                signal: Some(signal.as_str().to_string())
            }
        );
        let expected = rec.manifest.instructions;
        assert!(expected > 100, "it traced the loop for a while");
        let info = rtit(&["info", "--decode", s(&out)]);
        let text = String::from_utf8_lossy(&info.stdout);
        assert!(info.status.success(), "{text}{}", String::from_utf8_lossy(&info.stderr));
        let decoded = text
            .lines()
            .find_map(|l| l.strip_prefix("decoded       "))
            .expect("a decoded line");
        let shown: u64 = decoded.split(' ').next().and_then(|n| n.parse().ok()).expect("a count");
        if program == "busy" {
            assert_eq!(
                decoded.split(", ").next(),
                Some(format!("{expected} instructions").as_str()),
                "every instruction the recorder counted, no more, no fewer:\n{text}"
            );
        } else {
            assert!(shown < 20, "the first passes of the loop shown:\n{text}");
            let unshown = expected - shown;
            assert!(
                decoded.contains(&format!("(and {unshown} in a spin loop at the end, not shown)")),
                "the rest counted:\n{text}"
            );
        }
        assert!(decoded.contains(", 0 errors"), "{text}");
    }
}

/// `--filter` on fib only: every decoded instruction is in fib, they are the truth, and the
/// manifest counts exactly them.
#[test]
fn an_ip_filter_on_one_function() {
    use object::{Object, ObjectSymbol};
    let dir = scratch("filter");
    let exe = compile("recursion", false, &dir);
    let bytes = std::fs::read(&exe).expect("exe");
    let file = object::File::parse(&*bytes).expect("ELF");
    let fib = file
        .symbols()
        .find(|s| s.name() == Ok("fib"))
        .expect("fib is in the symbol table");
    let range = format!("{:x}-{:x}", fib.address(), fib.address() + fib.size());
    let (rec, status) = record(&exe, &dir.join("rec"), &["--filter", &range]);
    assert_eq!(status, 0);
    check_truth(&rec, "recursion/filter");
    let truth = rec.truth().expect("truth").expect("truth");
    assert!(truth
        .iter()
        .all(|&ip| ip >= fib.address() && ip < fib.address() + fib.size()));
    assert_eq!(
        truth.len() as u64,
        rec.manifest.instructions,
        "the manifest counts what the trace holds: main, printf and exit are left out"
    );
}

/// Without --out, a new directory under $RTIT_DIR with a `latest` link; info and ls show it;
/// insns defaults to it.
#[test]
fn default_directory_latest_info_and_ls() {
    let dir = scratch("default");
    let exe = compile("goto", false, &dir);
    let root = dir.join("root");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_rtit"))
            .args(args)
            .env("RTIT_DIR", &root)
            .output()
            .expect("rtit")
    };
    for _ in 0..2 {
        assert!(run(&["record", "--backend", "step", "--start", "main", "--", s(&exe)])
            .status
            .success());
    }
    assert!(root.join("goto-0").is_dir() && root.join("goto-1").is_dir());
    assert_eq!(
        std::fs::read_link(root.join("latest")).expect("link"),
        Path::new("goto-1")
    );
    let info = String::from_utf8_lossy(&run(&["info"]).stdout).to_string();
    assert!(info.contains("goto-1") || info.contains("latest"), "{info}");
    assert!(info.contains("exited with status 0"), "{info}");
    let ls = String::from_utf8_lossy(&run(&["ls"]).stdout).to_string();
    assert_eq!(ls.lines().count(), 2, "{ls}");
    let insns = run(&["insns", "--range", "0..3"]);
    assert!(insns.status.success());
    assert_eq!(
        String::from_utf8_lossy(&insns.stdout)
            .lines()
            .filter(|l| l.contains("main"))
            .count(),
        3
    );
}

//! `rtit record` and the program's processes: a signal to rtit stops a qemu recording (the
//! program busy in user code, or blocked in a system call) and leaves a recording that
//! decodes to exactly what it counted; a program that forks is recorded without its child,
//! which is named in the manifest, under qemu and step; a set-user-ID program is warned about.
//!
//! Needs `qemu-x86_64` (package qemu-user; `.ci/run` installs it) and gcc. The plugin library
//! is built here (cargo does not build a cdylib for tests).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rtit_replay_core::recording::{EndState, Recording};

/// A bound that turns a hang into a failure; nothing here should take a tenth of it.
const HANG: Duration = Duration::from_secs(60);

/// Compiles tests/programs/NAME.c, static, into `dir`.
fn compile(name: &str, dir: &Path) -> PathBuf {
    common::gcc(&format!("tests/programs/{name}.c"), &["-static"], dir)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn rtit() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rtit"));
    cmd.env("RTIT_QEMU_PLUGIN", common::plugin()).env(
        "RTIT_DIR",
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("processes/root"),
    );
    cmd
}

fn run(args: &[&str]) -> Output {
    rtit().args(args).output().expect("run rtit")
}

/// `rtit info --decode` finds exactly the manifest's instructions, with no error.
fn decodes_exactly(rec: &Recording, what: &str) {
    let info = run(&["info", "--decode", s(&rec.dir)]);
    let text = String::from_utf8_lossy(&info.stdout);
    let expected = format!("decoded       {} instructions, 0 errors", rec.manifest.instructions);
    assert!(
        info.status.success() && text.contains(&expected),
        "{what}: every instruction the recorder counted, no more, no fewer; expected `{expected}`:\n{text}{}",
        String::from_utf8_lossy(&info.stderr)
    );
}

/// The process rtit (`pid`) started: QEMU.
fn child_of(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Records `program` with the qemu backend until `ready(qemu's pid)`, then sends `signals`
/// to rtit one after the other; returns the recording, rtit's status and its stderr.
fn interrupt(
    name: &str,
    program: &[&str],
    ready: impl Fn(u32) -> bool,
    signals: &[Signal],
) -> (Recording, i32, String) {
    interrupt_with(name, &["--backend", "qemu"], program, ready, signals)
}

/// [`interrupt`] with `options` for `rtit record`.
fn interrupt_with(
    name: &str,
    options: &[&str],
    program: &[&str],
    ready: impl Fn(u32) -> bool,
    signals: &[Signal],
) -> (Recording, i32, String) {
    let out = common::scratch("processes", name).join("rec");
    let mut rtit = rtit()
        .arg("record")
        .args(options)
        .args(["--out", s(&out), "--"])
        .args(program)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rtit record");
    let started = Instant::now();
    while !child_of(rtit.id()).is_some_and(&ready) {
        assert!(started.elapsed() < HANG, "{name}: the program never got ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    for &signal in signals {
        kill(Pid::from_raw(rtit.id() as i32), signal).expect("signal rtit");
        // Two signals pending at once are delivered lowest number first (SIGINT before
        // SIGTERM, whatever order they were sent in): the next one goes only once rtit has
        // taken this one, so "the first" is the first rtit saw.
        let sent = Instant::now();
        while pending(rtit.id(), signal) {
            assert!(sent.elapsed() < HANG, "{name}: rtit never took {signal}");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let asked = Instant::now();
    let status = loop {
        if let Some(status) = rtit.try_wait().expect("wait") {
            break status;
        }
        if asked.elapsed() > HANG {
            let _ = rtit.kill();
            panic!("{name}: rtit record did not stop");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut rtit.stderr.take().expect("stderr"), &mut stderr).expect("stderr");
    let rec = Recording::open(&out).unwrap_or_else(|e| panic!("{name}: {e}\n{stderr}"));
    (rec, status.code().unwrap_or(-1), stderr)
}

/// Whether `signal` is still pending for process `pid` (its shared or main thread's set).
fn pending(pid: u32, signal: Signal) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false; // gone: nothing pending
    };
    let bit = 1u64 << (signal as i32 - 1);
    status
        .lines()
        .filter_map(|l| l.strip_prefix("ShdPnd:").or_else(|| l.strip_prefix("SigPnd:")))
        .filter_map(|v| u64::from_str_radix(v.trim(), 16).ok())
        .any(|set| set & bit != 0)
}

/// Field `n` (1-based, after the command) of /proc/PID/stat.
fn stat_field(pid: u32, n: usize) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(n - 3)?.parse().ok()
}

fn interrupted(signal: Signal) -> EndState {
    EndState::Interrupted {
        signal: Some(signal.as_str().to_string()),
    }
}

/// SIGINT to rtit stops a program busy in user code: QEMU never sees the signal, the plugin
/// hears it through its pipe and ends the trace between two blocks, the last branches' bits
/// in the manifest's trace end.
#[test]
fn sigint_stops_a_qemu_recording_of_a_busy_program() {
    let dir = common::scratch("processes", "busy-build");
    let busy_exe = compile("busy", &dir);
    // Half a second of QEMU's CPU time (utime + stime, in ticks of 1/100 s): in the loop.
    let busy = |qemu: u32| {
        stat_field(qemu, 14)
            .zip(stat_field(qemu, 15))
            .is_some_and(|(u, k)| u + k >= 50)
    };
    let (rec, status, stderr) = interrupt("busy", &[s(&busy_exe)], busy, &[Signal::SIGINT]);
    assert_eq!(status, 130, "128 + SIGINT\n{stderr}");
    assert_eq!(rec.manifest.end, interrupted(Signal::SIGINT));
    assert!(
        rec.manifest.instructions > 500_000,
        "it traced the loop for a while: {}",
        rec.manifest.instructions
    );
    decodes_exactly(&rec, "busy");
}

/// SIGTERM to rtit stops a program blocked in `sleep 100`: the plugin ends the recording
/// inside the system call, so the history ends with the call. A SIGINT right after (a second
/// signal while stopping) loses nothing and does not rename the first.
#[test]
fn sigterm_stops_a_qemu_recording_of_a_program_blocked_in_a_system_call() {
    let sleep = which("sleep");
    // QEMU's thread sits in clock_nanosleep (230) or nanosleep (35).
    let asleep = |qemu: u32| {
        std::fs::read_to_string(format!("/proc/{qemu}/syscall"))
            .is_ok_and(|t| matches!(t.split_whitespace().next(), Some("230" | "35")))
    };
    let signals = [Signal::SIGTERM, Signal::SIGINT];
    let (rec, status, stderr) = interrupt("sleep", &[s(&sleep), "100"], asleep, &signals);
    assert_eq!(status, 143, "128 + SIGTERM\n{stderr}");
    assert_eq!(rec.manifest.end, interrupted(Signal::SIGTERM));
    decodes_exactly(&rec, "sleep");
    let n = rec.manifest.instructions;
    let last = run(&["insns", "--json", "--range", &format!("{}..{n}", n - 1), s(&rec.dir)]);
    let text = String::from_utf8_lossy(&last.stdout);
    assert!(
        text.contains("\"insn\":\"syscall\"") && text.contains("nanosleep"),
        "the history ends in the sleep's system call:\n{text}"
    );
}

/// SIGTERM to rtit stops a step recording of a program blocked in `sleep 100` at once (the
/// wait for the call's single step is given up; it waited for the call to return): the
/// history ends before the call, every instruction decoded.
#[test]
fn sigterm_stops_a_step_recording_of_a_program_blocked_in_a_system_call() {
    let sleep = which("sleep");
    let asleep = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/syscall"))
            .is_ok_and(|t| matches!(t.split_whitespace().next(), Some("230" | "35")))
    };
    let options = ["--backend", "step", "--start", "main"];
    let (rec, status, stderr) = interrupt_with("step-sleep", &options, &[s(&sleep), "100"], asleep, &[Signal::SIGTERM]);
    assert_eq!(status, 143, "128 + SIGTERM\n{stderr}");
    assert_eq!(rec.manifest.end, interrupted(Signal::SIGTERM));
    decodes_exactly(&rec, "sleep under step");
    let n = rec.manifest.instructions;
    let last = run(&["insns", "--json", "--range", &format!("{}..{n}", n - 1), s(&rec.dir)]);
    let text = String::from_utf8_lossy(&last.stdout);
    assert!(
        text.contains("nanosleep"),
        "the history ends at the sleep's system call:\n{text}"
    );
}

fn which(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is on PATH"))
}

/// The fork program under both backends: the child ran unrecorded (none of its
/// instructions in the parent's trace, which decodes to exactly the count), and the manifest
/// names it with the pid the program printed, at a position inside the history; rtit warns.
#[test]
fn a_forked_child_is_named_in_the_manifest_and_left_out_of_the_trace() {
    let dir = common::scratch("processes", "fork");
    let exe = compile("fork", &dir);
    for backend in ["qemu", "step"] {
        let out = dir.join(backend);
        let result = run(&[
            "record",
            "--backend",
            backend,
            "--start",
            "main",
            "--out",
            s(&out),
            "--",
            s(&exe),
        ]);
        let stdout = String::from_utf8_lossy(&result.stdout);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert_eq!(result.status.code(), Some(0), "{backend}: {stderr}");
        let pid: i64 = stdout
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{backend}: the program prints its child's pid: {stdout}"));
        let rec = Recording::open(&out).expect("a recording");
        let children = &rec.manifest.children;
        assert_eq!(children.len(), 1, "{backend}: {children:?}");
        assert_eq!(children[0].pid, Some(pid), "{backend}");
        assert_eq!(children[0].syscall, "clone", "{backend}: glibc's fork is a clone");
        assert!(
            children[0].position > 0 && children[0].position < rec.manifest.instructions,
            "{backend}: {} inside 0..{}",
            children[0].position,
            rec.manifest.instructions
        );
        // The child's 300,000 turns of its loop (millions of instructions) are not in the
        // history.
        assert!(
            rec.manifest.instructions < 300_000,
            "{backend}: {} instructions",
            rec.manifest.instructions
        );
        decodes_exactly(&rec, backend);
        let warning = format!(
            "rtit: warning: the program created a process (clone at position {}, pid {pid}); it ran unrecorded",
            children[0].position
        );
        assert!(stderr.contains(&warning), "{backend}: {stderr}");
    }
}

/// A set-user-ID copy of a program owned by `nobody`: recorded (by root) with a warning on
/// stderr and in the manifest.
#[test]
fn a_set_user_id_program_is_warned_about() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: making a set-user-ID program of another user needs root");
        return;
    }
    let Some(nobody) = nix::unistd::User::from_name("nobody").ok().flatten() else {
        eprintln!("skipped: no user `nobody` here");
        return;
    };
    let dir = common::scratch("processes", "setuid");
    let exe = compile("fork", &dir);
    let setuid = dir.join("fork-setuid");
    std::fs::copy(&exe, &setuid).expect("copy");
    nix::unistd::chown(&setuid, Some(nobody.uid), None).expect("chown nobody");
    std::fs::set_permissions(&setuid, std::os::unix::fs::PermissionsExt::from_mode(0o4755)).expect("chmod u+s");
    for backend in ["qemu", "step"] {
        let out = dir.join(backend);
        let result = run(&["record", "--backend", backend, "--out", s(&out), "--", s(&setuid)]);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert_eq!(result.status.code(), Some(0), "{backend}: {stderr}");
        let rec = Recording::open(&out).expect("a recording");
        let warning = rec
            .manifest
            .warnings
            .iter()
            .find(|w| w.contains("set-user-ID nobody"))
            .unwrap_or_else(|| panic!("{backend}: {:?}", rec.manifest.warnings));
        assert!(warning.contains(s(&setuid)), "{warning}");
        assert!(
            stderr.contains(&format!("rtit: warning: {warning}")),
            "{backend}: {stderr}"
        );
    }
    // The same program, not set-user-ID: no warning.
    let out = dir.join("plain");
    let result = run(&["record", "--backend", "qemu", "--out", s(&out), "--", s(&exe)]);
    assert!(result.status.success());
    let rec = Recording::open(&out).expect("a recording");
    assert!(rec.manifest.warnings.is_empty(), "{:?}", rec.manifest.warnings);
}

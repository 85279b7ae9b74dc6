//! Nothing outlives `rtit record` (issue 38): SIGKILL to it leaves no QEMU or program running,
//! and the next run removes the scratch directory the killed one could not; SIGTERM at any
//! early moment (starting QEMU, connecting to its gdbstub, starting the program, running it to
//! `--start`) is named in what rtit says, rtit exits with 128 + SIGTERM, and no process and no
//! scratch is left.
//!
//! Each run gets a marker argument of its own, which QEMU's command line (or the program's,
//! under step) carries: a process whose command line holds it is what the run left. Each runs
//! with a `TMPDIR` of its own, so its scratch directory is known and no other test's.
//!
//! Needs `qemu-x86_64` (package qemu-user; `.ci/run` installs it) and gcc.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rtit_replay_core::recording::{EndState, Recording};

/// A bound that turns a hang into a failure; nothing here takes a tenth of it.
const HANG: Duration = Duration::from_secs(20);

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// tests/programs/naps.c, static, in `dir`.
fn naps(dir: &Path) -> PathBuf {
    common::gcc("tests/programs/naps.c", &["-static"], dir)
}

/// A run's directory (with `tmp/`, its TMPDIR) and its marker.
struct Run {
    dir: PathBuf,
    marker: String,
}

impl Run {
    fn new(name: &str) -> Self {
        let dir = common::scratch("record_leftovers", name);
        std::fs::create_dir_all(dir.join("tmp")).expect("tmp");
        let marker = format!("rtit-leftovers-{}-{name}", std::process::id());
        Self { dir, marker }
    }

    fn tmp(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    fn out(&self) -> PathBuf {
        self.dir.join("rec")
    }

    /// `rtit record` with `flags`, of `exe` with the marker, stderr piped; stdout piped too
    /// (the program's "running").
    fn record(&self, flags: &[&str], exe: &Path) -> Child {
        Command::new(env!("CARGO_BIN_EXE_rtit"))
            .args(["record", "--out", s(&self.out())])
            .args(flags)
            .arg("--")
            .arg(exe)
            .arg(&self.marker)
            .env("RTIT_QEMU_PLUGIN", common::plugin())
            .env("TMPDIR", self.tmp())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rtit record")
    }

    /// The processes whose command line holds the marker.
    fn left(&self) -> Vec<Pid> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            if cmdline.split(|&b| b == 0).any(|arg| arg == self.marker.as_bytes()) {
                found.push(Pid::from_raw(pid));
            }
        }
        found
    }

    /// Asserts that no process of the run is left, once those dying have died (a killed
    /// process keeps its command line until its last thread is gone). Kills what is left
    /// before failing, so that a failure leaves nothing running either.
    fn assert_nothing_left(&self, what: &str) {
        let bound = Instant::now() + HANG;
        let mut left = self.left();
        while !left.is_empty() && Instant::now() < bound {
            std::thread::sleep(Duration::from_millis(20));
            left = self.left();
        }
        let described: Vec<String> = left.iter().map(|&pid| describe(pid)).collect();
        for &pid in &left {
            let _ = kill(pid, Signal::SIGKILL);
        }
        assert!(left.is_empty(), "{what}: processes left running: {described:#?}");
    }
}

/// A process's command line, for a failure's message.
fn describe(pid: Pid) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    format!("{pid}: {}", String::from_utf8_lossy(&cmdline).replace('\0', " "))
}

/// Reads a line from the child's stdout: the program has started.
fn wait_for_running(child: &mut Child) {
    let mut line = String::new();
    let stdout = child.stdout.as_mut().expect("stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).expect("read");
    if line != "running\n" {
        give_up(child, &format!("the program did not start under rtit record: {line:?}"));
    }
}

/// Kills the child (a run that went wrong must not go on running) and fails, saying `why`.
fn give_up(child: &mut Child, why: &str) -> ! {
    let _ = child.kill();
    let _ = child.wait();
    panic!("{why}");
}

/// Waits for the child's end; kills it past [`HANG`] and fails.
fn finish(child: &mut Child, what: &str) -> ExitStatus {
    let bound = Instant::now() + HANG;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() > bound {
            give_up(child, &format!("{what}: rtit record did not end"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What the child wrote to stderr. Read once nothing of the run is left, which could hold
/// the pipe open.
fn stderr(mut child: Child) -> String {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut text).expect("stderr");
    text
}

/// Whether process `pid` catches `signal` (its SigCgt set): rtit has installed its handler.
fn catches(pid: u32, signal: Signal) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .filter_map(|l| l.strip_prefix("SigCgt:"))
        .filter_map(|v| u64::from_str_radix(v.trim(), 16).ok())
        .any(|set| set & 1 << (signal as i32 - 1) != 0)
}

/// Whether process `pid` has a thread named `name`.
fn has_thread(pid: u32, name: &str) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks
        .flatten()
        .any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name))
}

/// The process `pid` started from its main thread (QEMU, under the qemu backend).
fn child_of(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// SIGKILL to `rtit record` while the program runs under QEMU leaves neither QEMU nor the
/// program running (they ran on to the program's end, 30 s here, writing its trace), and the
/// scratch directory it could not remove is gone after the next run; the same for the step
/// backend's program.
#[test]
fn sigkill_leaves_no_process_and_the_next_run_removes_the_scratch() {
    let build = common::scratch("record_leftovers", "build-kill");
    let exe = naps(&build);
    // Step single-steps from main only: from the entry, libc's start would take seconds.
    let backends: [(&str, &[&str]); 2] = [("qemu", &[]), ("step", &["--start", "main"])];
    for (backend, flags) in backends {
        let run = Run::new(&format!("kill-{backend}"));
        let mut rtit = run.record(&[&["--backend", backend], flags].concat(), &exe);
        wait_for_running(&mut rtit);
        let scratch = run.tmp().join(format!("rtit-qemu-{}", rtit.id()));
        kill(Pid::from_raw(rtit.id() as i32), Signal::SIGKILL).expect("SIGKILL rtit");
        let status = finish(&mut rtit, backend);
        assert_eq!(status.code(), None, "{backend}: killed");
        run.assert_nothing_left(backend);
        if backend == "qemu" {
            assert!(scratch.is_dir(), "SIGKILL left {}", scratch.display());
            let next = Command::new(env!("CARGO_BIN_EXE_rtit"))
                .args(["record", "--backend", "qemu", "--out"])
                .arg(run.dir.join("next"))
                .args(["--", "true"])
                .env("RTIT_QEMU_PLUGIN", common::plugin())
                .env("TMPDIR", run.tmp())
                .output()
                .expect("the next rtit record");
            assert!(next.status.success(), "{}", String::from_utf8_lossy(&next.stderr));
            assert!(!scratch.exists(), "the next run removed {}", scratch.display());
        }
    }
}

/// What a SIGTERM to a run that had not ended must leave: no process, no scratch, exit
/// status 143, the signal named, a recording marked interrupted by it or none at all.
/// Returns rtit's stderr.
fn assert_stopped_by_sigterm(run: &Run, mut rtit: Child, what: &str) -> String {
    let status = finish(&mut rtit, what);
    run.assert_nothing_left(what);
    let tmp: Vec<_> = std::fs::read_dir(run.tmp())
        .expect("tmp")
        .flatten()
        .map(|e| e.path())
        .collect();
    let stderr = stderr(rtit);
    // Which way it went, for whoever reads the test's output.
    eprintln!("{what}: {}", stderr.lines().last().unwrap_or_default());
    assert!(tmp.is_empty(), "{what}: scratch left: {tmp:?}\n{stderr}");
    assert_eq!(status.code(), Some(143), "{what}: 128 + SIGTERM\n{stderr}");
    let out = run.out();
    if out.exists() {
        let rec = Recording::open(&out).unwrap_or_else(|e| panic!("{what}: {e}\n{stderr}"));
        let sigterm = EndState::Interrupted {
            signal: Some("SIGTERM".into()),
        };
        assert_eq!(rec.manifest.end, sigterm, "{what}\n{stderr}");
        assert!(
            stderr.contains("interrupted (rtit record received SIGTERM)"),
            "{what}: {stderr}"
        );
    } else {
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("rtit: error: rtit record received SIGTERM while ")
                && last.ends_with("; nothing recorded"),
            "{what}: the signal named in the last line\n{stderr}"
        );
    }
    stderr
}

/// A moment to signal rtit at.
#[derive(Debug, Clone, Copy)]
enum Moment {
    /// QEMU is there: rtit is connecting to its gdbstub.
    QemuThere,
    /// rtit's thread for the gdbstub is there: the program is starting.
    Connected,
    /// This long after rtit started.
    After(Duration),
}

impl Moment {
    /// Whether it has come, for rtit (`pid`) started `elapsed` ago.
    fn came(self, pid: u32, elapsed: Duration) -> bool {
        match self {
            Self::QemuThere => child_of(pid).is_some(),
            Self::Connected => has_thread(pid, "rtit-gdbstub"),
            Self::After(after) => elapsed >= after,
        }
    }
}

/// SIGTERM to `rtit record --backend qemu` as soon as QEMU is there, as soon as rtit is
/// connected to it, and 0.02 s, 0.05 s and 0.2 s after rtit started (which phases these are
/// depends on the machine: here, connecting, then recording). Each is named (before: "QEMU's
/// gdbstub: Broken pipe" or "QEMU closed the connection after \"?\"", exit status 1), and
/// nothing is left. A signal before rtit has installed its handlers ends it as it would any
/// program, with nothing started yet: the test waits for the handlers.
#[test]
fn sigterm_at_early_moments_is_named_and_leaves_nothing() {
    let build = common::scratch("record_leftovers", "build-term");
    let exe = naps(&build);
    common::plugin(); // built before the clock starts
    let moments = [
        Moment::QemuThere,
        Moment::Connected,
        Moment::After(Duration::from_millis(20)),
        Moment::After(Duration::from_millis(50)),
        Moment::After(Duration::from_millis(200)),
    ];
    for (n, moment) in moments.into_iter().enumerate() {
        let name = format!("{moment:?}");
        let run = Run::new(&format!("term-{n}"));
        let started = Instant::now();
        let mut rtit = run.record(&["--backend", "qemu"], &exe);
        let pid = rtit.id();
        while !catches(pid, Signal::SIGTERM) || !moment.came(pid, started.elapsed()) {
            if started.elapsed() > HANG {
                give_up(&mut rtit, &format!("{name}: never came"));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        kill(Pid::from_raw(pid as i32), Signal::SIGTERM).expect("SIGTERM rtit");
        assert_stopped_by_sigterm(&run, rtit, &name);
    }
}

/// SIGTERM while rtit runs the program to `--start` (natively under step, untraced under
/// QEMU) ends the run there, saying so; before, step waited for the start point (never
/// reached here: the program ran on to its end, then "--start: the program ended before
/// reaching it"), and qemu said "stopped by SIGTERM before tracing started", both with exit
/// status 1.
#[test]
fn sigterm_before_the_start_point_is_named_and_leaves_nothing() {
    let build = common::scratch("record_leftovers", "build-start");
    let exe = naps(&build);
    for backend in ["step", "qemu"] {
        let run = Run::new(&format!("start-{backend}"));
        let mut rtit = run.record(&["--backend", backend, "--start", "after_naps"], &exe);
        wait_for_running(&mut rtit);
        kill(Pid::from_raw(rtit.id() as i32), Signal::SIGTERM).expect("SIGTERM rtit");
        let stderr = assert_stopped_by_sigterm(&run, rtit, backend);
        assert!(
            stderr
                .ends_with("rtit record received SIGTERM while running the program to after_naps; nothing recorded\n"),
            "{backend}: {stderr}"
        );
        assert!(!run.out().exists(), "{backend}: no recording");
    }
}

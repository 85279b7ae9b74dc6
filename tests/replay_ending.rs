//! `rtit replay` ending while it stores the history beside the recording (issue 38: quitting
//! the first replay of a long recording left a 2.1 GB `timeline.cache.PID.N.tmp` until the
//! next replay). Every way it ends is tried while a store is seen in progress: Ctrl-C,
//! SIGTERM and SIGHUP without a gdb, `quit` in the gdb it started, SIGTERM with that gdb
//! (passed on to it). None may leave a temporary, and the replay says the history was not
//! kept.
//!
//! The store is real: `sort -n` of 40,000 numbers under the qemu backend, 147 M instructions
//! whose history (about 60 MB) starts being written about a second after the replay starts
//! (once decoded; a gdb is at its prompt by then), paced to take over a second (a few tenths
//! of a second unpaced: on a loaded machine it finished before any ending came). An ending
//! that comes only after the store has finished proves nothing; the replay is then tried
//! again.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rtit_replay_core::timeline::cache;

/// A bound that only a hang exceeds.
const HANG: Duration = Duration::from_secs(60);

/// Replays tried per way of ending before the test gives up catching a store in progress.
const ATTEMPTS: usize = 8;

fn record(name: &str) -> PathBuf {
    let dir = common::scratch("replay_ending", name);
    let input = dir.join("numbers");
    let text: String = (0..40_000u64).map(|i| format!("{}\n", i * 7919 % 100_003)).collect();
    std::fs::write(&input, text).expect("input");
    let rec = dir.join("rec");
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--out"])
        .arg(&rec)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .env("LANG", "C.UTF-8")
        .args(["--", "/usr/bin/sort", "-n"])
        .arg(&input)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.success(), "rtit record");
    rec
}

/// The temporaries of stored histories in `rec`.
fn temporaries(rec: &Path) -> Vec<String> {
    std::fs::read_dir(rec)
        .expect("the recording")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(cache::FILE) && n.ends_with(".tmp"))
        .collect()
}

/// Waits until a store is seen in progress in `rec` (true) or has finished (false).
fn store_in_progress(rec: &Path) -> bool {
    let deadline = Instant::now() + HANG;
    loop {
        if !temporaries(rec).is_empty() {
            return true;
        }
        if rec.join(cache::FILE).exists() {
            return false;
        }
        assert!(Instant::now() < deadline, "no history stored in {}", rec.display());
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// `rtit replay --store-history --port 0 ARGS REC`, its stderr piped.
fn replay(rec: &Path, args: &[&str]) -> Child {
    let _ = std::fs::remove_file(rec.join(cache::FILE));
    Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["replay", "--store-history", "--port", "0"])
        // 60 MiB in 1.2 s at least: long enough to end the replay meanwhile on a loaded
        // machine, where a store of a few tenths of a second finished first every time.
        .args(["--store-pace-ms", "20"])
        .args(args)
        .arg(rec)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rtit replay")
}

/// Waits for the replay to end (killing it after [`HANG`]); its status and what it said.
fn ended(mut child: Child) -> (ExitStatus, String) {
    let deadline = Instant::now() + HANG;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("rtit replay did not end");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut said = String::new();
    for stream in [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn Read>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut stream = stream;
        let _ = stream.read_to_string(&mut said);
    }
    (status, said)
}

/// Runs `end` on a fresh replay of `rec` started with `args` once its store is seen in
/// progress, until one ending comes before the store finished; returns that replay's status
/// and what it said. Whatever came first, no temporary may be left.
fn end_while_storing(rec: &Path, args: &[&str], end: impl Fn(&mut Child)) -> (ExitStatus, String) {
    end_while_storing_after(rec, args, |_| {}, end)
}

/// [`end_while_storing`], with `first` done to each replay as soon as it starts.
fn end_while_storing_after(
    rec: &Path,
    args: &[&str],
    first: impl Fn(&mut Child),
    end: impl Fn(&mut Child),
) -> (ExitStatus, String) {
    for attempt in 1..=ATTEMPTS {
        let mut child = replay(rec, args);
        first(&mut child);
        let caught = store_in_progress(rec);
        end(&mut child);
        let (status, said) = ended(child);
        assert_eq!(temporaries(rec), [] as [String; 0], "left behind ({status}):\n{said}");
        if caught && !rec.join(cache::FILE).exists() {
            eprintln!("the replay ended while storing at attempt {attempt}");
            return (status, said);
        }
    }
    panic!("in {ATTEMPTS} replays every store finished before the replay ended");
}

fn signal(child: &Child, signal: Signal) {
    kill(Pid::from_raw(child.id() as i32), signal).expect("the replay runs");
}

#[test]
fn a_signal_to_a_replay_without_gdb_removes_the_history_it_was_storing() {
    let rec = record("no-gdb");
    for (sig, name) in [
        (Signal::SIGINT, "SIGINT"),
        (Signal::SIGTERM, "SIGTERM"),
        (Signal::SIGHUP, "SIGHUP"),
    ] {
        let (status, said) = end_while_storing(&rec, &["--no-gdb"], |child| signal(child, sig));
        assert_eq!(status.code(), Some(128 + sig as i32), "{name}: {status}\n{said}");
        assert!(said.contains(&format!("rtit: ended by {name}")), "{said}");
        assert!(said.contains("the history was not kept"), "{said}");
    }
}

#[test]
fn quitting_the_gdb_it_started_removes_the_history_it_was_storing() {
    let rec = record("quit");
    // The real gdb, told not to read the libraries' symbols (over the remote protocol, with
    // libc's debug information: a second or two), so that it is at its prompt by the time
    // the store starts and quits while it goes on.
    let gdb = rec.parent().expect("scratch").join("gdb.sh");
    std::fs::write(&gdb, "#!/bin/sh\nexec gdb -iex 'set auto-solib-add off' \"$@\"\n").expect("script");
    let made_executable = Command::new("chmod").arg("+x").arg(&gdb).status().expect("chmod");
    assert!(made_executable.success());
    let gdb = gdb.to_str().expect("a UTF-8 path");
    // gdb reads its commands from the pipe: a question at once (answered before the store
    // starts), and `quit` alone once the store is seen, so that little stands between it and
    // the replay's end however slow the machine is.
    let say = |child: &mut Child, what: &[u8]| {
        let mut stdin = child.stdin.take().expect("stdin");
        std::io::Write::write_all(&mut stdin, what).expect("gdb reads");
        child.stdin = Some(stdin);
    };
    let (status, said) = end_while_storing_after(
        &rec,
        &["--gdb", gdb],
        |child| say(child, b"p $pc\n"),
        |child| say(child, b"quit\n"),
    );
    assert!(status.success(), "{status}\n{said}");
    assert!(said.contains("$1 = (void (*)()) 0x"), "gdb was connected:\n{said}");
    assert!(said.contains("the history was not kept"), "{said}");
}

#[test]
fn sigterm_to_a_replay_with_gdb_ends_both_and_removes_the_history_it_was_storing() {
    let rec = record("gdb-sigterm");
    let (status, said) = end_while_storing(&rec, &[], |child| signal(child, Signal::SIGTERM));
    assert_eq!(status.code(), Some(128 + Signal::SIGTERM as i32), "{status}\n{said}");
    assert!(said.contains("rtit: ended by SIGTERM"), "{said}");
    assert!(said.contains("the history was not kept"), "{said}");
}

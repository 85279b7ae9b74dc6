//! Threads under the step backend (issue 43): they run one at a time, the recording is one
//! stream in which a switch is the kernel running between two user instructions, and the
//! incoming thread's registers are logged there. Checked on `examples/c/workers.c` (four
//! threads on a mutex, a producer and a consumer on condition variables): the decoded
//! instructions are the ones that ran, in their order; the replayed values are right; and a
//! breakpoint in the worker function hits once per thread, with that thread's argument, both
//! ways, as native gdb sees it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use rtit_replay_core::recording::{EndState, Recording};

use common::gdb::{interleaved, Server};

/// Records `exe` from main with the step backend and the truth into `dir`/rec.
fn record_step(exe: &Path, dir: &Path) -> (Recording, std::process::Output) {
    let out = dir.join("rec");
    let result = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "step", "--truth", "--start", "main", "--out"])
        .arg(&out)
        .arg("--")
        .arg(exe)
        .output()
        .expect("rtit record");
    let rec = Recording::open(&out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&result.stderr)));
    (rec, result)
}

/// Records workers.c (compiled into `dir`): the recording, the executable and the
/// program's output.
fn record_workers(dir: &Path) -> (Recording, PathBuf, String) {
    let exe = common::gcc("examples/c/workers.c", &["-pthread"], dir);
    let (rec, result) = record_step(&exe, dir);
    assert_eq!(
        result.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    (rec, exe, String::from_utf8_lossy(&result.stdout).into_owned())
}

#[test]
fn threads_are_recorded_one_at_a_time_and_replayed_with_their_values() {
    let dir = common::scratch("threads", "workers");
    let (rec, _, stdout) = record_workers(&dir);
    assert_eq!(stdout, "counter 500, queue sum 210\n");
    assert_eq!(rec.manifest.end, EndState::Exited { code: 0 });
    // Six threads, one at a time: the switches are logged (a turn ends at a blocked system
    // call, a thread's end, or after its share of instructions).
    let switches = rec
        .signals()
        .expect("entries")
        .iter()
        .filter(|e| e.switch.is_some_and(|s| s.from != s.to))
        .count();
    assert!(switches >= 5, "{switches} switches");
    common::assert_decode_is_truth(&rec, "workers", 20_000);
    let check = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .arg("check-values")
        .arg(&rec.dir)
        .output()
        .expect("rtit check-values");
    let report = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let gprs = report.lines().find(|l| l.starts_with("all GPRs")).expect("a GPR line");
    let fields: Vec<&str> = gprs.split_whitespace().collect();
    assert_eq!(fields[3], "0", "no wrong value: {gprs}");
    let right: u64 = fields[2].parse().expect("a count");
    let unknown: u64 = fields[4].parse().expect("a count");
    assert!(right > 50 * unknown, "nearly every value known: {gprs}");
}

/// `break add` hits once per worker going forward, each with its own argument (1 to 4, in
/// the order the threads ran), and the same hits in the opposite order going backward; native
/// gdb hits it once per worker with the same arguments.
#[test]
fn a_breakpoint_in_a_worker_hits_once_per_thread_both_ways() {
    let dir = common::scratch("threads", "breakpoint");
    let (rec, exe, _) = record_workers(&dir);
    let server = Server::start(&rec);
    let mut commands = vec!["break add"];
    commands.extend(["continue", "p $rdi"].repeat(4));
    // To the end, then back through the four.
    commands.push("continue");
    commands.extend(["reverse-continue", "p $rdi"].repeat(4));
    let out = server.gdb(Some(&exe), &commands);
    let values = common::gdb::printed(&out);
    assert_eq!(values.len(), 8, "{out}");
    let (forward, backward) = values.split_at(4);
    let mut sorted = forward.to_vec();
    sorted.sort();
    assert_eq!(sorted, ["1", "2", "3", "4"], "each worker's own argument\n{out}");
    let reversed: Vec<String> = forward.iter().rev().cloned().collect();
    assert_eq!(backward, reversed, "the same hits backward\n{out}");
    assert!(
        out.contains("No more reverse-execution history") || out.contains("exited"),
        "{out}"
    );

    assert_eq!(common::gdb::native_worker_arguments(&exe), ["1", "2", "3", "4"]);
}

/// Where the producer thread starts, gdb lists it and the main thread, and `thread apply all
/// bt` shows each one's own stack (the waiting main thread's from the registers logged where
/// it resumes), as native gdb does at the same breakpoint.
#[test]
fn gdb_lists_the_threads_with_their_own_backtraces() {
    let dir = common::scratch("threads", "listed");
    let (rec, exe, _) = record_workers(&dir);
    let server = Server::start(&rec);
    let out = server.gdb(
        Some(&exe),
        &[
            "break produce",
            "continue",
            "info threads",
            "thread apply all bt",
            "monitor why-unknown rsp",
            "x/4gx $rsp",
            "monitor goto 0",
        ],
    );
    // The producer's stack, mapped by glibc inaccessible and opened with mprotect, reads
    // zero where it has not written yet, as natively (it read unknown).
    let stack = out.split("the one running here").nth(1).unwrap_or_default();
    let stack = stack.split("position 0, rip").next().unwrap_or_default();
    assert!(
        stack.contains(":\t0x") && !stack.contains("Cannot access memory"),
        "{out}"
    );
    assert!(out.contains("hit Breakpoint 1, produce"), "{out}");
    let threads: Vec<&str> = out.lines().filter(|l| l.contains(" Thread 1.")).collect();
    assert!(threads.len() >= 2, "the main thread and the producer at least\n{out}");
    assert!(
        threads.iter().any(|l| l.starts_with('*') && l.contains("produce")),
        "{out}"
    );
    // The monitor commands name the thread they answer for: the producer at the stop, the
    // main thread at position 0 (where gdb keeps the producer selected).
    let tid = |l: &str| {
        l.split(" Thread 1.")
            .nth(1)
            .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
            .map(str::to_string)
    };
    let producer = threads
        .iter()
        .find(|l| l.starts_with('*'))
        .and_then(|l| tid(l))
        .expect("a tid");
    // The main thread's id is the process's, below those of the threads it made.
    let main = threads
        .iter()
        .filter_map(|l| tid(l))
        .min_by_key(|t| t.parse::<u64>().unwrap_or(u64::MAX))
        .expect("a tid");
    assert!(
        out.contains("rsp is known here: 0x")
            && out.contains(&format!(", in thread 1.{producer}, the one running here")),
        "{out}"
    );
    assert!(out.contains(&format!("thread 1.{main} runs here")), "{out}");
    // The main thread waits (it created the producer a moment ago): its stack leads to main.
    let backtraces: Vec<&str> = out.split("\nThread ").skip(1).collect();
    assert!(backtraces.len() >= 2, "{out}");
    assert!(
        backtraces
            .iter()
            .any(|b| b.contains("produce (") && b.contains("start_thread")),
        "{out}"
    );
    assert!(
        backtraces
            .iter()
            .any(|b| !b.contains("produce (") && b.contains(" main () at ")),
        "{out}"
    );

    let mut native = Command::new("gdb");
    native.args(["-batch", "-nx"]).arg(&exe);
    for c in ["break produce", "run", "info threads", "thread apply all bt"] {
        native.arg("-ex").arg(c);
    }
    let native_out = interleaved(&mut native);
    assert!(
        native_out.contains(" main () at ") && native_out.contains("produce ("),
        "{native_out}"
    );
}

/// `stepi` in the thread that hit a breakpoint walks its own instructions (the other threads'
/// run in between as recorded), as native gdb walks them, and `reverse-stepi` walks them
/// back: the same addresses in the opposite order, the same thread throughout.
#[test]
fn stepi_and_reverse_stepi_move_the_thread_that_stopped() {
    let dir = common::scratch("threads", "stepping");
    let (rec, exe, _) = record_workers(&dir);
    let server = Server::start(&rec);
    let mut commands = vec!["break add", "continue", "p $pc"];
    commands.extend(["stepi", "p $pc"].repeat(6));
    commands.extend(["reverse-stepi", "p $pc"].repeat(6));
    let out = server.gdb(Some(&exe), &commands);
    let pcs = common::gdb::printed(&out);
    assert_eq!(pcs.len(), 13, "{out}");
    let (forward, backward) = pcs.split_at(7);
    let mut back: Vec<String> = backward.to_vec();
    back.reverse();
    assert_eq!(&back[..], &forward[..6], "reverse-stepi retraces stepi\n{out}");
    // gdb switched to the worker at the breakpoint, and to no other thread after it.
    assert_eq!(out.matches("[Switching to").count(), 1, "{out}");

    let mut native = Command::new("gdb");
    native.args(["-batch", "-nx"]).arg(&exe);
    // Natively the other workers run during a stepi and hit the breakpoint too, unless the
    // scheduler is locked: this thread alone steps, as the replayed one does.
    let mut native_commands = vec!["break add", "run", "set scheduler-locking step", "p $pc"];
    native_commands.extend(["stepi", "p $pc"].repeat(6));
    for c in native_commands {
        native.arg("-ex").arg(c);
    }
    let native_out = interleaved(&mut native);
    // The same function at the same offsets (the addresses are the same: no ASLR in either).
    let offsets = |v: &[String]| -> Vec<String> {
        v.iter()
            .map(|p| {
                p.split('<')
                    .nth(1)
                    .unwrap_or_default()
                    .trim_end_matches('>')
                    .to_string()
            })
            .collect()
    };
    assert_eq!(
        offsets(forward),
        offsets(&common::gdb::printed(&native_out)),
        "{native_out}"
    );
}

/// A worker that dereferences a null pointer: `continue` stops at the SIGSEGV naming that
/// thread, with native gdb's backtrace of it; the main thread, which never runs again, has
/// its own stack from the registers logged where the recording ends (where native gdb finds
/// it depends on the timing of that run: in pthread_join, or still creating the worker).
#[test]
fn a_crash_in_a_worker_names_the_thread_and_every_stack_is_shown() {
    let dir = common::scratch("threads", "crash");
    let exe = common::gcc("examples/c/thread_crash.c", &["-pthread"], &dir);
    let (rec, result) = record_step(&exe, &dir);
    assert_eq!(
        result.status.code(),
        Some(128 + 11),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    common::assert_decode_is_truth(&rec, "thread_crash", 5_000);
    let server = Server::start(&rec);
    let replayed = server.gdb(Some(&exe), &["continue", "bt", "thread 1", "bt"]);
    assert!(replayed.contains("received signal SIGSEGV"), "{replayed}");
    let (crashed, main) = replayed
        .split_once("[Switching to thread 1")
        .expect("thread 1 selected");
    assert!(crashed.contains("worker (arg=0x2)"), "the crashing worker\n{replayed}");
    let main_frames = common::gdb::frame_functions(main);
    assert!(main_frames.last().is_some_and(|f| f == "main"), "{replayed}");
    assert!(!main.contains("?? ()"), "{replayed}");
    let mut native = Command::new("gdb");
    native.args(["-batch", "-nx"]).arg(&exe);
    for c in ["run", "bt"] {
        native.arg("-ex").arg(c);
    }
    let native_out = interleaved(&mut native);
    assert!(native_out.contains("received signal SIGSEGV"), "{native_out}");
    assert_eq!(
        common::gdb::frame_functions(crashed),
        common::gdb::frame_functions(&native_out),
        "{replayed}\n---\n{native_out}"
    );
}

/// Signals sent to a worker that waits on a condition variable interrupt its futex wait and
/// are each handled there, as natively (the sender sleeps until the handler counted it: the
/// worker runs while it sleeps), with the handler's entries logged and the values right.
#[test]
fn signals_to_a_waiting_thread_are_each_handled_as_natively() {
    let dir = common::scratch("threads", "signals");
    let exe = common::gcc("tests/programs/thread_signals.c", &["-pthread"], &dir);
    let native = Command::new(&exe).output().expect("natively");
    assert_eq!(String::from_utf8_lossy(&native.stdout), "hits 3\n");
    let (rec, result) = record_step(&exe, &dir);
    assert_eq!(
        String::from_utf8_lossy(&result.stdout),
        "hits 3\n",
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    common::assert_decode_is_truth(&rec, "thread_signals", 5_000);
    let handlers = rec
        .signals()
        .expect("entries")
        .iter()
        .filter(|e| e.switch.is_none())
        .count();
    assert_eq!(handlers, 3, "three handler entries");
    let check = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .arg("check-values")
        .arg(&rec.dir)
        .output()
        .expect("check-values");
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
}

/// SIGINT to `rtit record` while every thread is blocked in a system call ends the
/// recording at once, written and marked interrupted (it hung, waiting for the killed
/// process's leader before its traced threads were reaped).
#[test]
fn an_interrupt_while_every_thread_blocks_ends_the_recording() {
    let dir = common::scratch("threads", "blocked");
    let exe = common::gcc("tests/programs/threads_blocked.c", &["-pthread"], &dir);
    let out = dir.join("rec");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "step", "--start", "main", "--out"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("rtit record");
    // Until both threads block (the worker in its sleep, main in pthread_join).
    std::thread::sleep(std::time::Duration::from_secs(3));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if started.elapsed().as_secs() > 20 {
            let _ = child.kill();
            panic!("rtit record did not end after SIGINT");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130));
    let rec = Recording::open(&out).expect("the recording is written");
    assert!(
        matches!(rec.manifest.end, EndState::Interrupted { .. }),
        "{:?}",
        rec.manifest.end
    );
}

//! Threads under the qemu backend (issue 43), on the newest QEMU `rtit build-qemu` built
//! (QEMU 9.0 and later let the plugin read a thread's registers): the plugin lets one guest
//! thread run at a time, so the decode is the plugin's independent log of every instruction,
//! in one order, and gdb sees each thread with its own values, as under the step backend.
//! Under Debian 12's QEMU 7.2 the recording stops before the first thread, saying what to
//! do (`qemu_backend.rs`).
//!
//! Skips, saying so, where no QEMU was built (CI builds one).

mod common;

use std::path::Path;
use std::process::{Command, Output};

use rtit_replay_core::recording::{EndState, Recording};

use common::gdb::{interleaved, Server};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `rtit record --qemu QEMU --out OUT FLAGS -- ARGV`: the recording and the output.
fn record(qemu: &Path, out: &Path, flags: &[&str], argv: &[&str]) -> (Recording, Output) {
    let result = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--qemu", s(qemu), "--out", s(out)])
        .args(flags)
        .arg("--")
        .args(argv)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .output()
        .expect("rtit record");
    let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
    let rec = Recording::open(out).unwrap_or_else(|e| panic!("{}: {e}\n{stderr}", out.display()));
    assert_eq!(rec.manifest.backend, "qemu", "{stderr}");
    (rec, result)
}

/// The switches between threads the recording logs (not the ends' entries).
fn switches(rec: &Recording) -> usize {
    rec.signals()
        .expect("entries")
        .iter()
        .filter(|e| e.switch.is_some_and(|s| s.from != s.to))
        .count()
}

/// workers.c (four threads on a mutex, a producer and a consumer on condition variables):
/// the program's output is intact, the threads took turns, the fast path wrote what the
/// unit model writes one instruction at a time, the decode is the plugin's log of every
/// instruction, and every value replay knows is right.
#[test]
fn threads_take_turns_and_decode_to_the_plugins_log_with_right_values() {
    let Some(qemu) = common::newer_qemu() else { return };
    let dir = common::scratch("qemu_threads", "workers");
    let exe = common::gcc("examples/c/workers.c", &["-pthread"], &dir);
    let (rec, result) = record(&qemu, &dir.join("rec"), &["--truth", "--check-fast-path"], &[s(&exe)]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&result.stdout), "counter 500, queue sum 210\n");
    assert_eq!(rec.manifest.end, EndState::Exited { code: 0 }, "{stderr}");
    assert!(stderr.contains("every byte is what the unit model wrote"), "{stderr}");
    assert!(switches(&rec) >= 5, "{} switches", switches(&rec));
    // `rtit record` says how many threads it recorded (workers.c starts five).
    let said = format!("rtit: 6 threads, recorded one at a time ({} switches)", switches(&rec));
    assert!(stderr.contains(&said), "{stderr}");
    common::assert_decode_is_truth(&rec, "workers", 20_000);
    common::check_values(&rec, 99.0, "workers");
}

/// A thread that spins until another sets a flag, with no system call: it is interrupted
/// for the other to run, and the whole run is recorded.
#[test]
fn a_spinning_thread_is_interrupted_for_the_one_it_waits_for() {
    let Some(qemu) = common::newer_qemu() else { return };
    let dir = common::scratch("qemu_threads", "spin");
    let exe = common::gcc("tests/programs/threads_spin.c", &["-pthread"], &dir);
    let (rec, result) = record(&qemu, &dir.join("rec"), &["--truth"], &[s(&exe)]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&result.stdout), "flag set, sum 500500\n");
    assert_eq!(rec.manifest.end, EndState::Exited { code: 0 }, "{stderr}");
    // The spinning main thread gave its turn up in its loop, in the program's own code (a
    // turn given up at a system call resumes at the call, in libc).
    let program = (rec.manifest.images.iter())
        .find(|i| i.path == s(&exe))
        .map(|i| i.load_address)
        .expect("the program's image");
    let in_loop = (rec.signals().expect("entries").iter())
        .filter(|e| e.switch.is_some_and(|s| s.from != s.to))
        .any(|e| (program..program + 0x10_0000).contains(&e.ip));
    assert!(in_loop, "main resumes in its loop");
    // The spin is millions of instructions: the whole decodes, and around every switch it
    // is the plugin's log instruction by instruction.
    common::assert_decodes_completely(&rec);
    let truth = rec.truth().expect("readable").expect("--truth was given");
    for e in rec.signals().expect("entries").iter().filter(|e| e.switch.is_some()) {
        let from = e.position.saturating_sub(500);
        let to = (e.position + 500).min(truth.len() as u64);
        let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
            .args(["insns", "--json", "--range", &format!("{from}..{to}"), s(&rec.dir)])
            .output()
            .expect("rtit insns");
        let decoded: Vec<u64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON line"))
            .inspect(|v| assert!(v["event"] != "error" && v["event"] != "gap", "{v}"))
            .filter(|v| v.get("i").is_some())
            .filter_map(|v| u64::from_str_radix(v["ip"].as_str()?.trim_start_matches("0x"), 16).ok())
            .collect();
        assert_eq!(
            decoded,
            truth[from as usize..to as usize],
            "around the switch at {}",
            e.position
        );
    }
}

/// `break add` hits once per worker going forward, each with its own argument, and the same
/// hits in the opposite order going backward, as native gdb sees the arguments; `thread
/// apply all bt` shows each thread's own stack.
#[test]
fn a_breakpoint_in_a_worker_hits_once_per_thread_both_ways() {
    let Some(qemu) = common::newer_qemu() else { return };
    let dir = common::scratch("qemu_threads", "breakpoint");
    let exe = common::gcc("examples/c/workers.c", &["-pthread"], &dir);
    let (rec, result) = record(&qemu, &dir.join("rec"), &[], &[s(&exe)]);
    assert_eq!(
        result.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let server = Server::start(&rec);
    let mut commands = vec!["break add"];
    commands.extend(["continue", "p $rdi"].repeat(4));
    commands.push("thread apply all bt");
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
    // Every worker's stack goes back to the thread's start, the main thread's to main.
    assert!(out.matches("in start_thread").count() >= 1, "{out}");
    assert!(out.contains("in main ()") || out.contains(" main () at"), "{out}");

    assert_eq!(common::gdb::native_worker_arguments(&exe), ["1", "2", "3", "4"]);
}

/// GNU sort sorts 300,000 lines on two threads, and Python's `threading` runs three: both
/// recorded whole with the default settings, their output intact, the whole history
/// decoded; in gdb a thread python3 started is listed at its start, with the main thread.
#[test]
fn debian_programs_with_threads_are_recorded_whole() {
    let Some(qemu) = common::newer_qemu() else { return };
    let dir = common::scratch("qemu_threads", "debian");
    let _removed = common::RemovedOnSuccess(dir.clone());
    let input = common::shuffled_numbers(&dir);
    let sorted = dir.join("sorted");
    let argv = ["/usr/bin/sort", "-n", "--parallel=2", "-o", s(&sorted), s(&input)];
    let (rec, result) = record(&qemu, &dir.join("sort"), &[], &argv);
    assert_eq!(
        result.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let native = Command::new("sort").args(["-n", s(&input)]).output().expect("sort");
    assert!(
        std::fs::read(&sorted).expect("sorted") == native.stdout,
        "the sorted output differs"
    );
    assert_eq!(rec.manifest.end, EndState::Exited { code: 0 });
    assert!(switches(&rec) >= 2, "{} switches", switches(&rec));
    common::assert_decodes_completely(&rec);
    // While both threads compute, one waits inside QEMU, whose gdbstub cannot stop the
    // program then: the running thread parks for the anchors instead, which stay 2^25
    // instructions apart or so (none in 1.2 G instructions before).
    if common::kernel_tracks_written_pages() {
        let anchors = rec.anchors().expect("anchors").expect("anchors taken");
        let mut at: Vec<u64> = anchors.list.iter().map(|a| a.position).collect();
        at.push(rec.manifest.instructions);
        let widest = at.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        assert!(widest < 4 << 25, "{widest} instructions without an anchor: {at:?}");
    }

    let script = dir.join("threads.py");
    std::fs::write(
        &script,
        "import threading\nout = []\ndef work(n):\n    out.append(sum(i * i for i in range(n)))\n\
         ts = [threading.Thread(target=work, args=(2000 * (k + 1),)) for k in range(3)]\n\
         for t in ts: t.start()\nfor t in ts: t.join()\nprint(sorted(out))\n",
    )
    .expect("script");
    let (rec, result) = record(&qemu, &dir.join("python"), &[], &["/usr/bin/python3", s(&script)]);
    assert_eq!(
        result.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&result.stdout),
        "[2664667000, 21325334000, 71982001000]\n"
    );
    assert!(switches(&rec) >= 3, "{} switches", switches(&rec));
    common::assert_decodes_completely(&rec);
    let server = Server::start(&rec);
    let out = server.gdb(None, &["break start_thread", "continue", "info threads", "bt 1"]);
    assert!(out.contains("hit Breakpoint 1, start_thread"), "{out}");
    assert!(out.lines().filter(|l| l.contains("Thread 1.")).count() >= 2, "{out}");
}

/// xz compresses on two threads of its own (`-T2`, small blocks so that a small input makes
/// several): recorded whole with the default settings, its output byte for byte xz's own,
/// the history decoded; in gdb, half-way through, every thread is listed with its own stack,
/// a worker's in liblzma under `start_thread`.
#[test]
fn xz_on_two_threads_is_recorded_whole() {
    let Some(qemu) = common::newer_qemu() else { return };
    let dir = common::scratch("qemu_threads", "xz");
    let input = dir.join("input");
    let text: String = (0..40_000u64)
        .map(|i| format!("{:x}\n", i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect();
    std::fs::write(&input, text).expect("input");
    let args = ["-T2", "-0", "--block-size=65536", "-c"];
    let native = Command::new("xz").args(args).arg(&input).output().expect("xz");
    assert!(native.status.success());
    let mut argv = vec!["/usr/bin/xz"];
    argv.extend(args);
    argv.push(s(&input));
    let (rec, result) = record(&qemu, &dir.join("rec"), &[], &argv);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(0), "{stderr}");
    assert!(
        result.stdout == native.stdout,
        "the compressed output differs from xz's own"
    );
    let signals = rec.signals().expect("entries");
    let threads = rtit_replay_core::recording::threads_and_switches(&signals);
    assert!(
        threads.is_some_and(|(n, _)| n == 3),
        "main and two workers: {threads:?}"
    );
    common::assert_decodes_completely(&rec);
    let server = Server::start(&rec);
    let middle = format!("monitor goto {}", rec.manifest.instructions / 2);
    let out = server.gdb(None, &[&middle, "maint flush register-cache", "thread apply all bt"]);
    let stacks: Vec<&str> = out.split("\nThread ").skip(1).collect();
    assert_eq!(stacks.len(), 3, "{out}");
    assert!(
        stacks
            .iter()
            .any(|b| b.contains("liblzma") && b.contains("start_thread")),
        "a worker compresses: {out}"
    );
    assert!(
        stacks.iter().any(|b| b.contains("__libc_start_call_main")),
        "the main thread: {out}"
    );
}

/// A worker that crashes: gdb stops in it with the signal, its frames and arguments those
/// native gdb shows (but the last: QEMU 10 has no clone3, so glibc's thread starts from
/// clone), and the main thread's stack goes back to main.
#[test]
fn a_crash_in_a_worker_names_the_thread_and_every_stack_is_shown() {
    let Some(qemu) = common::newer_qemu() else { return };
    let dir = common::scratch("qemu_threads", "crash");
    let exe = common::gcc("examples/c/thread_crash.c", &["-pthread"], &dir);
    let (rec, result) = record(&qemu, &dir.join("rec"), &["--truth"], &[s(&exe)]);
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
    let mut native = Command::new("gdb");
    native.args(["-batch", "-nx"]).arg(&exe);
    for c in ["run", "bt"] {
        native.arg("-ex").arg(c);
    }
    let native_out = interleaved(&mut native);
    assert!(native_out.contains("received signal SIGSEGV"), "{native_out}");
    let (ours, theirs) = (
        common::gdb::frame_functions(crashed),
        common::gdb::frame_functions(&native_out),
    );
    let n = ours.len().min(theirs.len()) - 1;
    assert!(n >= 2, "{replayed}\n---\n{native_out}");
    assert_eq!(ours[..n], theirs[..n], "{replayed}\n---\n{native_out}");
}

/// Two threads that compute without a system call: one always waits for its turn inside
/// QEMU, where QEMU's gdbstub cannot stop the program, so the running one parks for each
/// anchor. The anchors stand where their registers say: rip is the logged instruction at
/// their position, and fs_base is that of the thread that runs there (both threads run the
/// same loop, so rip alone could not tell a park that went to the other thread: a thread
/// parked, then left its turn at the same block, and the other ran at the anchor's
/// position); and the values replay finds from them are right.
#[test]
fn anchors_are_taken_while_threads_compute() {
    let Some(qemu) = common::newer_qemu() else { return };
    if common::skip_without_anchors() {
        return;
    }
    let dir = common::scratch("qemu_threads", "compute");
    let exe = common::gcc("tests/programs/threads_compute.c", &["-pthread", "-O1"], &dir);
    let flags = ["--truth", "--anchor-every", "1048576"];
    let (rec, result) = record(&qemu, &dir.join("rec"), &flags, &[s(&exe)]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(0), "{stderr}");
    assert_eq!(rec.manifest.end, EndState::Exited { code: 0 }, "{stderr}");
    let anchors = rec.anchors().expect("anchors").expect("anchors taken");
    // Each try waits up to 20 ms for the held thread first: a few of the 40 due come.
    assert!(anchors.list.len() >= 2, "{} anchors\n{stderr}", anchors.list.len());
    let truth = rec.truth().expect("readable").expect("--truth was given");
    for a in &anchors.list {
        let rip = a
            .registers
            .get("rip")
            .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok());
        assert_eq!(
            rip,
            truth.get(a.position as usize).copied(),
            "the anchor at {}",
            a.position
        );
    }
    // Each thread's fs_base, from the switches to it (it does not change once set).
    let signals = rec.signals().expect("signal entries");
    let schedule = rtit_replay_core::threads::Schedule::new(&signals, &rec.syscalls().expect("system calls"))
        .expect("threads switched");
    let hex = |v: Option<&String>| v.and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok());
    let fs_base: std::collections::HashMap<i64, u64> = signals
        .iter()
        .filter_map(|e| Some((e.switch?.to, hex(e.registers.get("fs_base"))?)))
        .collect();
    let mut checked = 0;
    for a in &anchors.list {
        let tid = schedule.running(a.position);
        if let Some(&expected) = fs_base.get(&tid) {
            let fs = hex(a.registers.get("fs_base"));
            assert_eq!(
                fs,
                Some(expected),
                "the anchor at {}: thread {tid}'s fs_base",
                a.position
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "{checked} anchors checked");
    common::check_values(&rec, 99.0, "compute");
}

/// execve while another thread lives (issue 43), from main and from the thread: the kernel
/// ends the other thread and the process becomes `/bin/echo`. Both programs are recorded,
/// each decoded to the plugin's log, the first with every value it knows right; replayed,
/// the first ends at the execve with both threads listed, the waiting one in its `read`.
#[test]
fn an_execve_while_another_thread_lives_is_followed() {
    let Some(qemu) = common::newer_qemu() else { return };
    let dir = common::scratch("qemu_threads", "exec");
    let exe = common::gcc("tests/programs/exec_threads.c", &["-O1", "-pthread"], &dir);
    for (arg, who) in [(None, "main"), (Some("thread"), "the thread")] {
        let out = dir.join(format!("rec-{}", arg.unwrap_or("main")));
        let mut argv = vec![s(&exe)];
        argv.extend(arg);
        let (rec, result) = record(&qemu, &out, &["--truth"], &argv);
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert_eq!(result.status.code(), Some(0), "{stderr}");
        assert_eq!(
            String::from_utf8_lossy(&result.stdout),
            format!("{who} execs\nafter exec\n"),
            "{stderr}"
        );
        assert!(
            matches!(&rec.manifest.end, EndState::Exec { program, next: Some(_) } if program == "/bin/echo"),
            "{:?}\n{stderr}",
            rec.manifest.end
        );
        let signals = rec.signals().expect("entries");
        let threads = rtit_replay_core::recording::threads_and_switches(&signals);
        assert!(threads.is_some_and(|(n, _)| n == 2), "{threads:?}");
        common::assert_decode_is_truth(&rec, "exec_threads", 10_000);
        common::check_values(&rec, 99.0, "exec_threads");
        let echo = Recording::open(&out.join("exec-1")).expect("the next program's recording");
        assert_eq!(echo.manifest.end, EndState::Exited { code: 0 });
        common::assert_decode_is_truth(&echo, "echo", 10_000);
        if arg.is_some() {
            continue;
        }
        let server = Server::start_with(&rec, &["--no-follow"]);
        let out = server.gdb(Some(&exe), &["continue", "info threads", "thread apply all bt"]);
        // `info threads`: a line a thread, its id first (the selected one marked `*`).
        let listed = (out.lines())
            .filter(|l| l.contains(" Thread 1."))
            .filter(|l| {
                l.trim_start_matches(['*', ' '])
                    .starts_with(|c: char| c.is_ascii_digit())
            })
            .count();
        assert_eq!(listed, 2, "{out}");
        assert!(out.contains("execve"), "{out}");
        let waiting = out.split("\nThread ").find(|b| b.contains("wait_forever"));
        assert!(waiting.is_some_and(|b| b.contains("read")), "{out}");
    }
}

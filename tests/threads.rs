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

/// Records workers.c (compiled into `dir`) from main with the step backend and the truth:
/// the recording and the program's output.
fn record_workers(dir: &Path) -> (Recording, PathBuf, String) {
    let exe = common::gcc("examples/c/workers.c", &["-pthread"], dir);
    let out = dir.join("rec");
    let result = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "step", "--truth", "--start", "main", "--out"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .output()
        .expect("rtit record");
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(0), "{stderr}");
    let rec = Recording::open(&out).expect("a recording");
    (rec, exe, String::from_utf8_lossy(&result.stdout).into_owned())
}

/// The values gdb printed (`$N = VALUE`), in order.
fn printed(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.starts_with('$'))
        .filter_map(|l| l.split_once(" = ").map(|(_, v)| v.trim().to_string()))
        .collect()
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
        .filter(|e| e.frame.data().is_some_and(|d| d.is_empty()))
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
    let values = printed(&out);
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

    let mut native = Command::new("gdb");
    native.args(["-batch", "-nx"]).arg(&exe);
    for c in ["break add", "run"].into_iter().chain(["p $rdi", "continue"].repeat(4)) {
        native.arg("-ex").arg(c);
    }
    let native_out = interleaved(&mut native);
    let mut native_values = printed(&native_out);
    native_values.sort();
    assert_eq!(native_values, ["1", "2", "3", "4"], "{native_out}");
}

//! The qemu backend on the newest QEMU `rtit build-qemu` built (QEMU 10 from Debian's source
//! package, plugin API version 4), beside Debian 12's 7.2 (API version 1) that the other tests
//! record with: the plugin loads in both, the fast path writes what the unit model writes,
//! the decode equals the plugin's independent log of every instruction, values are right,
//! and a crash replays in gdb as native gdb shows it.
//!
//! Skips, saying so, where no QEMU was built; CI builds one (`.ci/run`) and sets
//! `RTIT_REQUIRE_NEWER_QEMU`, which turns the skip into a failure. `RTIT_TEST_QEMU` names
//! another QEMU to test.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rtit_replay_core::recording::Recording;
use serde_json::Value;

/// `rtit ARGS` with the plugin of this build.
fn rtit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(args)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .env("PYTHONHASHSEED", "0")
        .output()
        .expect("run rtit")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Records `exe args` under `qemu` with `flags`; the recording, the exit status and stderr.
fn record(qemu: &Path, exe: &str, args: &[&str], flags: &[&str], out: &Path) -> (Recording, i32, String) {
    let mut all = vec!["record", "--qemu", s(qemu), "--out", s(out)];
    all.extend_from_slice(flags);
    all.push("--");
    all.push(exe);
    all.extend_from_slice(args);
    let result = rtit(&all);
    let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
    let rec = Recording::open(out).unwrap_or_else(|e| panic!("{}: {e}\n{stderr}", out.display()));
    assert_eq!(rec.manifest.backend, "qemu", "{stderr}");
    (rec, result.status.code().unwrap_or(-1), stderr)
}

/// A file of `n` numbers in a scrambled order, for `sort -n`.
fn numbers(dir: &Path, n: u64) -> PathBuf {
    let path = dir.join("numbers");
    let text: String = (0..n).map(|i| format!("{}\n", i * 2654435761 % 1_000_003)).collect();
    std::fs::write(&path, text).expect("input");
    path
}

/// The decode equals the plugin's independent log of every instruction.
fn check_truth(rec: &Recording, what: &str) {
    common::assert_decode_is_truth(rec, what, 1000);
}

#[test]
fn the_fast_path_writes_what_the_unit_model_writes() {
    let Some(qemu) = common::newer_qemu() else { return };
    let dir = common::scratch("newer_qemu", "fast-path");
    let input = numbers(&dir, 3000);
    let configs: [&[&str]; 3] = [
        &[],
        &["--no-ret-compression", "--psb-period", "2048"],
        &["--cycle-accurate", "--mtc", "--sts"],
    ];
    for (i, flags) in configs.into_iter().enumerate() {
        let flags = [flags, &["--check-fast-path"]].concat();
        let out = dir.join(format!("sort-{i}"));
        let (_, status, stderr) = record(
            &qemu,
            "/usr/bin/sort",
            &["-n", "-o", "/dev/null", s(&input)],
            &flags,
            &out,
        );
        assert_eq!(status, 0, "{flags:?}: {stderr}");
        assert!(
            stderr.contains("every byte is what the unit model wrote"),
            "{flags:?}: {stderr}"
        );
    }
}

#[test]
fn debian_programs_decode_to_the_plugins_log_with_right_values() {
    let Some(qemu) = common::newer_qemu() else { return };
    let dir = common::scratch("newer_qemu", "debian");
    let _removed = common::RemovedOnSuccess(dir.clone());
    let input = numbers(&dir, 1000);
    let runs: [(&str, &str, Vec<&str>); 3] = [
        ("sort", "/usr/bin/sort", vec!["-n", "-o", "/dev/null", s(&input)]),
        ("grep", "/usr/bin/grep", vec!["-c", "^1.*7$", s(&input)]),
        ("gzip", "/usr/bin/gzip", vec!["-c", s(&input)]),
    ];
    for (name, exe, args) in runs {
        let (rec, status, stderr) = record(&qemu, exe, &args, &["--truth"], &dir.join(name));
        assert_eq!(status, 0, "{name}: {stderr}");
        check_truth(&rec, name);
        // QEMU 9 and later give the program a vDSO of their own: it is an image.
        let images = rec.manifest.images.iter().map(|i| i.path.as_str()).collect::<Vec<_>>();
        assert!(images.contains(&"[vdso]"), "{name}: {images:?}");
        common::check_values(&rec, 99.0, name);
        // glibc's loader reads the time stamp counter: its results are logged.
        assert!(!unmodelled(&rec).contains("rdtsc"), "{name}: {}", unmodelled(&rec));
    }
}

/// The instructions `rtit check-values` lists as modelled by nobody.
fn unmodelled(rec: &Recording) -> String {
    let out = rtit(&["check-values", s(&rec.dir)]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    text.split("instructions nobody modelled")
        .nth(1)
        .map_or_else(String::new, |rest| {
            rest.lines().take_while(|l| l.starts_with("  ")).collect()
        })
}

#[test]
fn what_rdtsc_and_rdtscp_returned_is_logged_and_known() {
    let Some(qemu) = common::newer_qemu() else { return };
    let dir = common::scratch("newer_qemu", "timestamps");
    let exe = common::gcc("tests/programs/timestamps.c", &["-O1"], &dir);
    let (rec, status, stderr) = record(&qemu, s(&exe), &[], &["--truth", "--start", "main"], &dir.join("rec"));
    assert_eq!(status, 0, "{stderr}");
    // Every execution of each of the two, at its own address, in the history's order.
    let text = std::fs::read_to_string(rec.dir.join("results.jsonl")).expect("results logged");
    let results: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    assert_eq!(results.len(), 16, "{text}");
    let truth = rec.truth().expect("readable").expect("--truth");
    let mut last = None;
    for r in &results {
        let at = r["position"].as_u64().expect("position");
        let ip = u64::from_str_radix(r["ip"].as_str().expect("ip").trim_start_matches("0x"), 16).expect("hex");
        assert_eq!(truth.get(at as usize), Some(&ip), "{r}");
        assert!(last.map_or(true, |l| l < at), "in order: {text}");
        last = Some(at);
        let regs = r["after"].as_object().expect("registers").len();
        assert!(regs == 2 || regs == 3, "rax, rdx (and rcx for rdtscp): {r}");
    }
    common::check_values(&rec, 100.0, "timestamps");
    assert!(!unmodelled(&rec).contains("rdtsc"), "{}", unmodelled(&rec));
}

#[test]
fn a_signal_handler_using_movaps_runs_and_replays() {
    let Some(qemu) = common::newer_qemu() else { return };
    let dir = common::scratch("newer_qemu", "movaps");
    let exe = common::gcc("tests/programs/movaps_handler.c", &["-O1"], &dir);
    let (rec, status, stderr) = record(&qemu, s(&exe), &[], &["--truth"], &dir.join("rec"));
    // QEMU 7.2 misaligns the handler's frame and the movaps faults (status 139).
    assert_eq!(status, 0, "{stderr}");
    assert_eq!(rec.signals().expect("signal entries").len(), 3, "three handled signals");
    check_truth(&rec, "movaps");
    common::check_values(&rec, 99.0, "movaps");
}

#[test]
fn anchors_go_on_after_the_program_sets_the_sample_signals_action() {
    let Some(qemu) = common::newer_qemu() else { return };
    if common::skip_without_anchors() {
        return;
    }
    let dir = common::scratch("newer_qemu", "vtalrm");
    let exe = common::gcc("tests/programs/vtalrm_actions.c", &["-O1"], &dir);
    let (rec, status, stderr) = record(&qemu, s(&exe), &[], &["--anchor-every", "2000000"], &dir.join("rec"));
    assert_eq!(status, 0, "{stderr}");
    // Anchors on both sides of the half-way point, where the program sets the signal back
    // to its default (the first half runs with it ignored). How many depends on how fast
    // QEMU runs (the watch stops the program once an anchor is due): a debug build took 8.
    let anchors = rec.anchors().expect("readable").expect("anchors taken");
    let half = rec.manifest.instructions / 2;
    let before = anchors.list.iter().filter(|a| a.position < half).count();
    let after = anchors.list.len() - before;
    assert!(
        before >= 2 && after >= 2,
        "{before} anchors before {half}, {after} after"
    );
}

#[test]
fn python3s_crash_replays_as_native_gdb_shows_it() {
    let Some(qemu) = common::newer_qemu() else { return };
    let dir = common::scratch("newer_qemu", "python3-crash");
    let script = "import ctypes; ctypes.string_at(0)";
    let rec = common::record_python3_crash(&dir.join("rec"), script, &["--qemu", s(&qemu)]);
    assert_eq!(rec.manifest.backend, "qemu");
    let server = common::gdb::Server::start(&rec);
    let replayed = server.gdb(None, &["continue", "p/x $rdi", "p/x $rsp", "bt 7"]);
    let native = common::gdb::native_python3_crash(script);
    common::gdb::assert_same_python3_crash(&replayed, &native);
}

/// execve is followed under this QEMU too: the plugin starts it again on the program a
/// wrapper script runs, and both programs decode to the plugin's log.
#[test]
fn a_wrapper_script_is_followed_to_its_program() {
    use rtit_replay_core::recording::EndState;
    let Some(qemu) = common::newer_qemu() else { return };
    let dir = common::scratch("newer_qemu", "exec");
    let exe = common::gcc("tests/programs/exec_target.c", &["-O0"], &dir);
    let wrapper = dir.join("wrapper");
    std::fs::write(&wrapper, format!("#!/bin/sh\nexec {} \"$@\"\n", exe.display())).expect("write");
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let out = dir.join("rec");
    let (first, code, stderr) = record(&qemu, s(&wrapper), &["one"], &["--truth"], &out);
    assert_eq!(code, 4, "the target's status: {stderr}");
    let EndState::Exec { next: Some(next), .. } = &first.manifest.end else {
        panic!("{:?}\n{stderr}", first.manifest.end)
    };
    let target = Recording::open(&first.dir.join(next)).expect("the target's recording");
    assert_eq!(target.manifest.end, EndState::Exited { code: 4 });
    check_truth(&first, "sh to its execve");
    check_truth(&target, "the target");
}

/// On QEMU 9.0 and later the plugin parks the program for an anchor (no gdbstub stop), every
/// 2^22 positions by default. It reads the registers inside QEMU's execution loop, where QEMU
/// keeps the status flags apart from its `eflags` word: the anchors say those bits are not
/// known, and DF is known clear (python3 runs no `std`; left unknown, every `rep stos` after
/// an anchor would forget all memory). Just below each anchor the backward walk from it
/// meets the forward walk from the one before: an anchor that claimed the status flags
/// (0x202 where the program had 0x246) made the two disagree there.
#[test]
fn parked_anchors_hold_only_what_the_plugin_reads() {
    use rtit_replay_core::session::Session;
    use rtit_replay_core::state::flags::{DF, KNOWN_NAME, STATUS};
    use rtit_replay_core::timeline::cache::Policy;
    let Some(qemu) = common::newer_qemu() else { return };
    if common::skip_without_anchors() {
        return;
    }
    let dir = common::scratch("newer_qemu", "parked-anchors");
    let script = "import json\ns = 0\nfor i in range(1500): s += len(json.dumps({'a': i, 'b': [i, i * 2]}))\nprint(s)";
    let (rec, status, stderr) = record(&qemu, "/usr/bin/python3", &["-c", script], &[], &dir.join("rec"));
    assert_eq!(status, 0, "{stderr}");
    let anchors = rec.anchors().expect("readable").expect("anchors taken");
    let n = rec.manifest.instructions;
    // At least every PARKED_EVERY positions: a loaded machine polls late, and each is taken
    // where the program parked (2^25, through the gdbstub, would give 3).
    let spacing = rtit_recorder::qemu::gdbstub::PARKED_EVERY;
    assert!(
        anchors.list.len() as u64 >= n / spacing / 2,
        "{} anchors in {n} instructions",
        anchors.list.len()
    );
    let hex = |v: Option<&String>| v.and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok());
    for a in &anchors.list {
        let known = hex(a.registers.get(KNOWN_NAME)).unwrap_or_else(|| panic!("no {KNOWN_NAME} at {}", a.position));
        assert_eq!(known & STATUS, 0, "status flags claimed at {}", a.position);
        assert_ne!(known & DF, 0, "DF left unknown at {}", a.position);
    }
    let mut s = Session::open_cached(rec.clone(), false, Policy::Off, &mut |_| {}).expect("session");
    s.values().expect("the values").walk_back_everywhere();
    let mut flags_known = 0;
    for a in &anchors.list {
        for p in [a.position - 1, a.position] {
            s.set_position(p);
            s.settle(&mut || false);
            let eflags = s.register("eflags");
            flags_known += usize::from(p < a.position && eflags.is_some());
        }
    }
    let conflicts = s.values_stats().conflicts;
    assert_eq!(conflicts, 0, "the walks disagree next to the anchors");
    assert!(
        2 * flags_known >= anchors.list.len(),
        "eflags known below {flags_known} of {} anchors",
        anchors.list.len()
    );
}

//! The qemu backend end to end: every example of examples/c recorded with `--backend qemu`
//! decodes exactly to the plugin's truth; the step and qemu backends record the same
//! instructions (and the same packets) for a program whose instruction stream does not depend
//! on the CPU model; a program from the distribution records and decodes with no error; a
//! program interrupted by a timer's signals wherever it is records completely, and one that
//! dies on a block's last instruction ends with that instruction's fault; a program blocked
//! on a full pipe is not interrupted by rtit's sample signal.
//!
//! Needs `qemu-x86_64` (package qemu-user; `.ci/run` installs it) and gcc. The plugin library
//! is built here (cargo does not build a cdylib for tests).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rtit_replay_core::recording::{EndState, Recording};

fn compile(src: &Path, flags: &[&str], dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("output dir");
    let exe = dir.join(src.file_stem().expect("a name"));
    let status = Command::new("gcc")
        .args(["-O1", "-g"])
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(src)
        .status()
        .expect("gcc is needed (`.ci/run` installs it)");
    assert!(status.success(), "gcc failed on {}", src.display());
    exe
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/c/{name}.c"))
}

fn rtit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(args)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .env(
            "RTIT_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("qemu_backend/root"),
        )
        .output()
        .expect("run rtit")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn record(backend: &str, exe: &Path, out: &Path, flags: &[&str], args: &[&str]) -> (Recording, i32, String) {
    let mut all = vec!["record", "--backend", backend, "--truth", "--out", s(out)];
    all.extend_from_slice(flags);
    all.push("--");
    all.push(s(exe));
    all.extend_from_slice(args);
    let result = rtit(&all);
    let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
    let rec = Recording::open(out).unwrap_or_else(|e| panic!("{}: {e}\n{stderr}", out.display()));
    (rec, result.status.code().unwrap_or(-1), stderr)
}

/// `rtit insns --json` equals the truth, with no error event.
fn check_truth(rec: &Recording, what: &str) {
    common::assert_decode_is_truth(rec, what, 300);
    let truth = rec.truth().expect("readable").expect("--truth was given");
    // Each handler's entry is logged where the handler's first instruction is: after a fault
    // the faulting instruction did not retire (replay applies the entry's registers there).
    for entry in rec.signals().expect("signal entries") {
        assert_eq!(
            truth.get(entry.position as usize),
            Some(&entry.ip),
            "{what}: the handler entry at {} for {:#x}",
            entry.position,
            entry.ip
        );
    }
}

fn run_example(name: &str, expect: i32) {
    let dir = common::scratch("qemu_backend", name);
    for (link, flags) in [("static", &["-static"][..]), ("dynamic", &[][..])] {
        let exe = compile(&example(name), &[flags, &["-pthread"]].concat(), &dir.join(link));
        let configs: [(&str, &[&str]); 3] = [
            ("main", &["--start", "main"]),
            ("main-no-ret-compression", &["--start", "main", "--no-ret-compression"]),
            ("entry-psb-2048", &["--psb-period", "2048"]),
        ];
        for (config, flags) in configs {
            let what = format!("{name}/{link}/{config}");
            let (rec, status, stderr) = record("qemu", &exe, &dir.join(link).join(config), flags, &[]);
            assert_eq!(status, expect, "{what}: the program's status\n{stderr}");
            assert_eq!(rec.manifest.backend, "qemu");
            check_truth(&rec, &what);
        }
    }
}

#[test]
fn recursion() {
    run_example("recursion", 0);
}

#[test]
fn function_pointers_and_a_jump_table() {
    run_example("dispatch", 0);
}

#[test]
fn setjmp_longjmp() {
    run_example("longjmp", 0);
}

#[test]
fn signal_handlers_for_raise_and_sigsegv() {
    run_example("signals", 0);
}

#[test]
fn computed_goto_and_deep_recursion() {
    run_example("goto", 0);
    run_example("deep", 0);
}

#[test]
fn dynamic_linking() {
    run_example("dynamic", 0);
}

#[test]
fn a_crash_ends_with_the_signal_and_the_faulting_instruction() {
    run_example("crash", 139);
    let dir = common::scratch("qemu_backend", "crash-end");
    let exe = compile(&example("crash"), &["-static"], &dir);
    let (rec, _, _) = record("qemu", &exe, &dir.join("rec"), &["--start", "main"], &[]);
    let truth = rec.truth().expect("truth").expect("truth");
    match &rec.manifest.end {
        EndState::Signaled { name, ip, .. } => {
            assert_eq!(name, "SIGSEGV");
            // The faulting instruction did not retire: it follows the last one traced.
            let ip = u64::from_str_radix(ip.as_deref().expect("an ip").trim_start_matches("0x"), 16).expect("hex");
            assert_ne!(truth.last(), Some(&ip));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_crash_on_a_blocks_last_instruction_is_that_instructions_fault() {
    // `call *0x8(%rax)` with rax 0 reads memory and ends its block: nothing but the signal
    // the process died of tells that it faulted rather than retired.
    use object::{Object, ObjectSection};
    let dir = common::scratch("qemu_backend", "crash_call");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/crash_call.c");
    let exe = compile(&src, &["-static"], &dir);
    let (rec, status, stderr) = record("qemu", &exe, &dir.join("rec"), &[], &[]);
    assert_eq!(status, 139, "{stderr}");
    let EndState::Signaled { name, ip, .. } = &rec.manifest.end else {
        panic!("{:?}", rec.manifest.end)
    };
    assert_eq!(name, "SIGSEGV");
    let ip = u64::from_str_radix(ip.as_deref().expect("an ip").trim_start_matches("0x"), 16).expect("hex");
    let elf = std::fs::read(&exe).expect("the program");
    let file = object::File::parse(&*elf).expect("ELF");
    let text = file
        .sections()
        .find(|s| (s.address()..s.address() + s.size()).contains(&ip))
        .expect("ip in a section");
    let data = text.data().expect("section bytes");
    let at = (ip - text.address()) as usize;
    assert_eq!(&data[at..at + 3], [0xff, 0x50, 0x08], "call *0x8(%rax) at {ip:#x}");
    let truth = rec.truth().expect("truth").expect("truth");
    assert_ne!(truth.last(), Some(&ip), "the call did not retire");
    check_truth(&rec, "crash_call");
}

/// `rtit record --backend qemu --truth FLAGS --out OUT -- EXE`, as it went.
fn record_output(exe: &Path, out: &Path, flags: &[&str]) -> Output {
    let mut all = vec!["record", "--backend", "qemu", "--truth", "--out", s(out)];
    all.extend_from_slice(flags);
    all.extend(["--", s(exe)]);
    rtit(&all)
}

/// Under QEMU 7.2 a thread stops the recording before it is created; the program runs on
/// under QEMU to its end unrecorded (issue 43), with its output and its own exit status;
/// what was recorded decodes to the truth.
#[test]
fn threads_stop_the_recording_and_the_program_runs_on() {
    let Some(qemu) = common::qemu_before_9() else { return };
    let dir = common::scratch("qemu_backend", "threads");
    let exe = compile(&example("threads"), &["-static", "-pthread"], &dir);
    let out = dir.join("rec");
    let result = record_output(&exe, &out, &["--qemu", &qemu, "--start", "main"]);
    let rec = common::assert_ran_on(&result, &out, 7, "sum 500500\n", "the program creates a thread");
    check_truth(&rec, "threads");
    // A start point the thread reaches: nothing to record from there, and the program runs on.
    let later = dir.join("later");
    let result = record_output(&exe, &later, &["--qemu", &qemu, "--start", "work"]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(String::from_utf8_lossy(&result.stdout), "sum 500500\n", "{stderr}");
    assert!(
        stderr.contains(
            "--start work: the program created a thread before reaching it; it ran on unrecorded and exited with status 7"
        ),
        "{stderr}"
    );
    assert_ne!(result.status.code(), Some(0));
}

/// GNU sort sorts 300,000 lines on two threads: under QEMU 7.2 the recording stops at the
/// first, and the sorted output is the same as sort's without rtit (issue 43: it was left
/// empty when the program was killed there).
#[test]
fn gnu_sort_on_two_threads_writes_its_whole_output() {
    let Some(qemu) = common::qemu_before_9() else { return };
    let dir = common::scratch("qemu_backend", "sort_threads");
    let input = common::shuffled_numbers(&dir);
    let (native, recorded) = (dir.join("native"), dir.join("recorded"));
    let status = Command::new("sort")
        .args(["-n", "--parallel=2", "-o", s(&native), s(&input)])
        .status()
        .expect("sort");
    assert!(status.success());
    let out = dir.join("rec");
    let result = rtit(&[
        "record",
        "--backend",
        "qemu",
        "--qemu",
        &qemu,
        "--out",
        s(&out),
        "--",
        "sort",
        "-n",
        "--parallel=2",
        "-o",
        s(&recorded),
        s(&input),
    ]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("the program creates a thread"), "{stderr}");
    let (native, recorded) = (
        std::fs::read(&native).expect("native"),
        std::fs::read(&recorded).expect("recorded"),
    );
    assert_eq!(recorded.len(), native.len(), "the sorted output's length");
    assert!(recorded == native, "the sorted output differs from sort's own");
    let rec = Recording::open(&out).expect("a valid recording");
    assert!(rec.manifest.instructions > 1_000_000, "{}", rec.manifest.instructions);
}

/// Whether a logged `rax` (hex) is one of the kernel's restart codes (-512 to -516): the
/// system call is made again.
fn restart_errno(rax: &str) -> bool {
    u64::from_str_radix(rax.trim_start_matches("0x"), 16).is_ok_and(|v| (512..=516).contains(&v.wrapping_neg()))
}

/// Compiles tests/programs/NAME.c without libc (whose routines CPUID picks) and records it
/// with the step and the qemu backends: (step, qemu, the qemu recording's stderr), after
/// checking both exited 0.
fn record_both_without_libc(name: &str) -> (Recording, Recording, String) {
    let dir = common::scratch("qemu_backend", name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    let exe = compile(
        &src,
        &["-static", "-nostdlib", "-fno-builtin", "-fno-stack-protector"],
        &dir,
    );
    let (step, a, _) = record("step", &exe, &dir.join("step"), &[], &[]);
    let (qemu, b, stderr) = record("qemu", &exe, &dir.join("qemu"), &[], &[]);
    assert_eq!((a, b), (0, 0), "{name}: both ran to a 0 exit\n{stderr}");
    (step, qemu, stderr)
}

#[test]
fn step_and_qemu_record_the_same_instructions_for_a_cpu_independent_program() {
    let (step, qemu, _) = record_both_without_libc("loops");
    let (st, qt) = (
        step.truth().expect("t").expect("t"),
        qemu.truth().expect("t").expect("t"),
    );
    assert!(st.len() > 10_000, "{} instructions", st.len());
    // A sample signal (`--truth`) can interrupt QEMU's `write` to the test's pipe: the kernel
    // restarts it, and the `syscall` instruction runs again, as on any CPU (its log says
    // -ERESTARTSYS). The step backend's run had no such signal: such a run is the same
    // with the repeated instructions left out, and its packets differ by them.
    let restarted: Vec<u64> = (qemu.syscalls().expect("syscalls").iter())
        .filter(|r| r.after.get("rax").is_some_and(|v| restart_errno(v)))
        .map(|r| r.position)
        .collect();
    let once: Vec<u64> = (qt.iter().enumerate())
        .filter(|(i, _)| !restarted.contains(&(*i as u64)))
        .map(|(_, ip)| *ip)
        .collect();
    assert_eq!(st, once, "the same instructions in the same order");
    if restarted.is_empty() {
        assert_eq!(
            step.trace().expect("trace"),
            qemu.trace().expect("trace"),
            "the same packets"
        );
    }
    check_truth(&qemu, "loops");
}

#[test]
fn a_handlers_entry_after_a_fault_is_where_the_faulting_instruction_did_not_retire() {
    // On a block's last instruction (counted as started) and in the middle of one (counted
    // 0): rtit, counting from outside, is told the exact place by the engine, or finds it.
    let dir = common::scratch("qemu_backend", "segv_handled");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/segv_handled.c");
    let exe = compile(&src, &["-static"], &dir);
    let (rec, status, stderr) = record("qemu", &exe, &dir.join("rec"), &["--start", "main"], &[]);
    assert_eq!(status, 0, "{stderr}");
    assert_eq!(rec.signals().expect("entries").len(), 6, "six faults handled");
    check_truth(&rec, "segv_handled");
}

#[test]
fn a_store_into_the_running_block_re_runs_it_as_the_cpu_does() {
    // QEMU cuts the block short at the store and runs it again from there; the plugin
    // counts a block at once, so only the next block starting at the store says where it
    // stopped. The step backend sees the CPU run it (the page is mapped elsewhere there).
    // A 0 exit: every call ran the patched code.
    let (step, qemu, _) = record_both_without_libc("smc");
    // The written page's addresses as offsets in it, the program's own as they are.
    let image = |t: Vec<u64>| -> Vec<u64> {
        t.into_iter()
            .map(|ip| if ip >> 32 != 0 { ip & 0xfff } else { ip })
            .collect()
    };
    let (st, qt) = (
        image(step.truth().expect("t").expect("t")),
        image(qemu.truth().expect("t").expect("t")),
    );
    for (ip, what) in [(0, "the nop"), (1, "the patching store")] {
        assert_eq!(st.iter().filter(|&&i| i == ip).count(), 40, "{what}, once a call");
    }
    let at = st.iter().zip(&qt).position(|(a, b)| a != b);
    assert!(
        st.len() == qt.len() && at.is_none(),
        "the same instructions in the same order: {} vs {}, first difference at {at:?}",
        st.len(),
        qt.len()
    );
}

#[test]
fn sort_from_the_distribution_records_and_decodes_without_errors() {
    let dir = common::scratch("qemu_backend", "sort");
    let _removed = common::RemovedOnSuccess(dir.clone());
    let input = dir.join("input.txt");
    // 6,000 pseudo-random lines (a linear congruential generator: reproducible).
    let mut x: u64 = 12345;
    let mut text = String::new();
    for _ in 0..6_000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        text.push_str(&format!("{:016x} line\n", x >> 11));
    }
    std::fs::write(&input, text).expect("input");
    let (rec, status, stderr) = record("qemu", Path::new("/usr/bin/sort"), &dir.join("rec"), &[], &[s(&input)]);
    assert_eq!(status, 0, "{stderr}");
    assert!(rec.manifest.instructions > 1_000_000, "{}", rec.manifest.instructions);
    common::assert_decodes_completely(&rec);
    let truth = rec.truth().expect("truth").expect("truth");
    assert_eq!(truth.len() as u64, rec.manifest.instructions);
}

#[test]
fn asynchronous_signals_leave_no_gap() {
    // An interrupted block may end in a conditional or indirect branch that never ran: where
    // the program went on is the handler's signal frame, which the recorder reads (#20).
    let dir = common::scratch("qemu_backend", "timer_signals");
    let _removed = common::RemovedOnSuccess(dir.clone());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/timer_signals.c");
    let exe = compile(&src, &[], &dir);
    let out = dir.join("rec");
    let result = rtit(&[
        "record",
        "--backend",
        "qemu",
        "--truth",
        "--out",
        s(&out),
        "--",
        s(&exe),
    ]);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    // More may arrive between the loop's end and the timer's stop.
    let count: u32 = stdout.trim().trim_end_matches(" signals").parse().expect("a count");
    assert!(count >= 100, "{stdout}");
    let rec = Recording::open(&out).expect("a recording");
    common::assert_decodes_completely(&rec);
    check_truth(&rec, "timer_signals");
}

/// After each return from a signal handler the interrupted code has its own registers back in
/// replay: a computation a 1 ms timer interrupts a few hundred times ends, in gdb at `done`,
/// with the values it printed. QEMU hands `rt_sigreturn`'s callback its own -513, which was
/// logged as the call's result and shown in `rax` after every handler's return (the sums came
/// out wrong); the frame is what restores the registers.
#[test]
fn registers_after_a_handler_returns_are_the_interrupted_codes() {
    let dir = common::scratch("qemu_backend", "alarm_work");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/alarm_work.c");
    let exe = compile(&src, &[], &dir);
    let out = dir.join("rec");
    let result = rtit(&["record", "--backend", "qemu", "--out", s(&out), "--", s(&exe), s(&exe)]);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    let stdout = String::from_utf8_lossy(&result.stdout);
    let printed: Vec<&str> = stdout
        .split_whitespace()
        .filter_map(|kv| kv.split_once('=').map(|(_, v)| v))
        .collect();
    let [acc, nread, signals] = printed[..] else {
        panic!("acc=... nread=... signals=...: {stdout}")
    };
    assert!(signals.parse::<u32>().expect("a count") >= 20, "{stdout}");
    let syscalls = std::fs::read_to_string(out.join("syscalls.jsonl")).expect("syscalls.jsonl");
    let sigreturns: Vec<&str> = syscalls.lines().filter(|l| l.contains("\"nr\":15,")).collect();
    assert!(!sigreturns.is_empty(), "rt_sigreturn logged");
    assert!(
        sigreturns.iter().all(|l| !l.contains("0xfffffffffffffdff")),
        "QEMU's -513 is not rt_sigreturn's result: {}",
        sigreturns[0]
    );
    // `rtit info` counts the deliveries the recording logged (the decoded flow shows them as
    // the trace leaving user mode and coming back).
    let logged = std::fs::read_to_string(out.join("signals.jsonl")).expect("signals.jsonl");
    let info = rtit(&["info", s(&out)]);
    let expected = format!("{} signal deliveries to handlers", logged.lines().count());
    assert!(
        logged.lines().count() >= 20 && String::from_utf8_lossy(&info.stdout).contains(&expected),
        "{expected}:\n{}",
        String::from_utf8_lossy(&info.stdout)
    );
    let mut replay = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["replay", s(&out)])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("rtit replay");
    std::io::Write::write_all(
        &mut replay.stdin.take().expect("stdin"),
        b"break done\ncontinue\np acc\np nread\np signals\n",
    )
    .expect("gdb commands");
    let shown = replay.wait_with_output().expect("replay ends");
    let text = String::from_utf8_lossy(&shown.stdout);
    for (n, value) in [acc, nread, signals].iter().enumerate() {
        let line = format!("${} = {value}", n + 1);
        assert!(text.contains(&line), "{line} in gdb:\n{text}");
    }
}

/// The program's descriptors are numbered as without rtit: QEMU's gdbstub sockets, which took
/// 3 and 4 in the program's table before it ran, are moved out of the way (a user's check:
/// every `openat` returned two more than natively). python3 prints what it gets.
#[test]
fn the_programs_descriptors_are_numbered_as_without_rtit() {
    let script = "import os, socket; print(os.open('/dev/null', 0), socket.socket().fileno())";
    let native = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .output()
        .expect("python3");
    assert_eq!(String::from_utf8_lossy(&native.stdout), "3 4\n", "natively");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("qemu_backend/descriptors");
    let _ = std::fs::remove_dir_all(&out);
    let result = rtit(&[
        "record",
        "--backend",
        "qemu",
        "--out",
        s(&out),
        "--",
        "/usr/bin/python3",
        "-c",
        script,
    ]);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    assert_eq!(String::from_utf8_lossy(&result.stdout), "3 4\n", "under rtit record");
}

/// A program blocked writing to a full pipe while `rtit record --truth` samples it (a
/// signal every 0.1–0.7 ms, as anchors taken without parking are) writes its whole output:
/// the sample signal is sent only to a thread outside a system call. It was sent anywhere,
/// and QEMU's host handler, which has no `SA_RESTART`, made the blocked `write` fail
/// (`sed: couldn't write … items to stdout: Interrupted system call`, every run; sort's
/// stdio failed the same way). Debian's sed, with QEMU 7.2 and the newest `rtit build-qemu`
/// built, where there are.
#[test]
fn a_program_blocked_on_a_full_pipe_is_not_interrupted_by_samples() {
    let dir = common::scratch("qemu_backend", "full_pipe");
    let input = dir.join("input");
    let text: String = (0..30_000u64)
        .map(|i| format!("{:x} line\n", i * 2654435761 % 1_000_003))
        .collect();
    assert!(text.len() > 4 * 65536, "more than a pipe holds");
    std::fs::write(&input, &text).expect("input");
    let qemus: Vec<String> = (common::qemu_before_9().into_iter())
        .chain(common::newer_qemu().map(|p| p.display().to_string()))
        .collect();
    for (n, qemu) in qemus.iter().enumerate() {
        let out = dir.join(format!("rec{n}"));
        let child = Command::new(env!("CARGO_BIN_EXE_rtit"))
            .args([
                "record",
                "--backend",
                "qemu",
                "--qemu",
                qemu,
                "--truth",
                "--out",
                s(&out),
            ])
            .args(["--", "/usr/bin/sed", "-n", "p", s(&input)])
            .env("RTIT_QEMU_PLUGIN", common::plugin())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("rtit record");
        // The pipe fills while nobody reads: sed blocks in `write` for a second.
        std::thread::sleep(std::time::Duration::from_secs(1));
        let result = child.wait_with_output().expect("rtit record ends");
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(!stderr.contains("Interrupted system call"), "{qemu}: {stderr}");
        assert_eq!(result.status.code(), Some(0), "{qemu}: {stderr}");
        assert!(
            result.stdout == text.as_bytes(),
            "{qemu}: sed's output is not its input\n{stderr}"
        );
        let rec = Recording::open(&out).expect("a recording");
        // Samples were taken (some right), and none is wrong.
        common::check_values(&rec, 90.0, qemu);
    }
}

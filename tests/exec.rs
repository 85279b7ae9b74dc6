//! execve is followed (issue 43): a run that becomes another program through execve is
//! recorded program by program, each decoded exactly (against the recorder's truth), and
//! `rtit replay` serves the last program, where gdb shows what native gdb shows of the same
//! program; a call that fails leaves the recording going. With the step backend and the
//! default (qemu) one; a real pyenv shim where the machine has one.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::gdb::{frame_functions, interleaved, Server};
use rtit_replay_core::recording::{EndState, Recording};

fn rtit(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(args)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .envs(env.iter().copied())
        .output()
        .expect("rtit")
}

/// `rtit record --backend BACKEND --truth FLAGS --out OUT -- COMMAND` with `env`.
fn record(backend: &str, flags: &[&str], out: &Path, command: &[&str], env: &[(&str, &str)]) -> Output {
    let mut args = vec!["record", "--backend", backend, "--truth", "--out", s(out)];
    args.extend_from_slice(flags);
    args.push("--");
    args.extend_from_slice(command);
    rtit(&args, env)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A wrapper script in `dir` that `exec`s `exe` with its own arguments, as a pyenv shim or a
/// launcher script does.
fn wrapper(dir: &Path, exe: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("wrapper");
    std::fs::write(
        &path,
        format!("#!/bin/sh\n# runs the target\nexec {} \"$@\"\n", exe.display()),
    )
    .expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// The recordings of a run, first to last, following each execve's `next`.
fn chain(out: &Path) -> Vec<Recording> {
    let mut all = vec![Recording::open(out).expect("the first program's recording")];
    while let EndState::Exec { next: Some(next), .. } = &all.last().expect("one").manifest.end {
        let dir = all.last().expect("one").dir.join(next);
        all.push(Recording::open(&dir).expect("the next program's recording"));
    }
    all
}

/// What native gdb shows of `exe one` with SAID=hi at `twice`.
fn native(exe: &Path) -> String {
    let mut gdb = Command::new("gdb");
    gdb.env("SAID", "hi")
        .args([
            "-batch",
            "-nx",
            "-ex",
            "break twice",
            "-ex",
            "run",
            "-ex",
            "bt",
            "-ex",
            "p x",
        ])
        .args(["-ex", "finish", "--args"])
        .arg(exe)
        .arg("one");
    interleaved(&mut gdb)
}

/// Records `wrapper one` (SAID=hi) with `backend`, then checks the run and its recordings:
/// the program's output and status are the target's; the wrapper's shell and the target are
/// each a recording, decoded exactly; the replay serves the target, where a breakpoint,
/// `bt`, an argument and `finish` equal native gdb's; `--no-follow` serves the shell.
fn a_wrapper_is_followed_to_its_program(backend: &str) {
    let dir = common::scratch("exec", backend);
    let exe = common::gcc("tests/programs/exec_target.c", &["-O0"], &dir);
    let wrapper = wrapper(&dir, &exe);
    let out = dir.join("rec");
    let result = record(backend, &[], &out, &[s(&wrapper), "one"], &[("SAID", "hi")]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    // twice(2 + 20) = 44, and 44 & 7 = 4.
    assert_eq!(result.status.code(), Some(4), "the target's status\n{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&result.stdout),
        "target 44 one hi\n",
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("the program ran execve of {}", exe.display())),
        "{stderr}"
    );
    let parts = chain(&out);
    assert_eq!(parts.len(), 2, "the shell, then the target\n{stderr}");
    assert_eq!(parts[0].manifest.command, [s(&wrapper), "one"]);
    assert_eq!(parts[1].manifest.command, [s(&exe), "one"]);
    assert!(
        matches!(&parts[0].manifest.end, EndState::Exec { program, next: Some(n) } if program == s(&exe) && n == "exec-1"),
        "{:?}",
        parts[0].manifest.end
    );
    assert_eq!(parts[1].manifest.end, EndState::Exited { code: 4 });
    for (k, part) in parts.iter().enumerate() {
        common::assert_decode_is_truth(part, &format!("{backend} part {k}"), 10_000);
    }
    // `rtit info` of the first names the program it ran and which one a replay serves.
    let info = rtit(&["info", s(&out)], &[]);
    let info = String::from_utf8_lossy(&info.stdout);
    let then = format!("then          exec-1: {} one (exited with status 4)", exe.display());
    assert!(info.contains(&then), "{info}");
    assert!(info.contains("`rtit replay` serves exec-1"), "{info}");
    let native = native(&exe);
    assert!(native.contains("x=22") && native.contains("= 44"), "native: {native}");
    let server = Server::start(&parts[0]);
    let replayed = server.gdb(None, &["break twice", "continue", "bt", "p x", "finish"]);
    assert!(replayed.contains("twice (x=22) at"), "{replayed}");
    assert_eq!(
        frame_functions(&replayed),
        frame_functions(&native),
        "{replayed}\n---\n{native}"
    );
    assert!(replayed.contains("$1 = 22"), "{replayed}");
    assert!(replayed.contains("Value returned is $2 = 44"), "{replayed}");
    drop(server);
    // The shell's own recording, asked for: gdb is given the shell as the program.
    let server = Server::start_with(&parts[0], &["--no-follow"]);
    let shell = server.gdb(None, &["info inferiors"]);
    assert!(shell.contains("dash") || shell.contains("/sh"), "{shell}");
    assert!(!shell.contains("exec_target"), "{shell}");
}

#[test]
fn a_wrapper_script_is_followed_to_its_program_step() {
    a_wrapper_is_followed_to_its_program("step");
}

#[test]
fn a_wrapper_script_is_followed_to_its_program_qemu() {
    a_wrapper_is_followed_to_its_program("qemu");
}

/// A failing execve (no such file) returns its error and the recording goes on; the next one
/// runs `sh -c 'echo ran; exit 5'`, recorded in its own directory, with its output and status;
/// both programs decode exactly.
fn a_failing_execve_goes_on_and_a_working_one_is_followed(backend: &str) {
    let dir = common::scratch("exec", &format!("failing-{backend}"));
    let exe = common::gcc("tests/programs/exec.c", &[], &dir);
    let out = dir.join("rec");
    let result = record(backend, &["--start", "main"], &out, &[s(&exe)], &[]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(5), "sh's status\n{stderr}");
    assert_eq!(String::from_utf8_lossy(&result.stdout), "ran\n", "{stderr}");
    let parts = chain(&out);
    assert_eq!(parts.len(), 2, "{stderr}");
    // The failed call is logged as an ordinary one, with its error. (Under QEMU a call
    // interrupted by rtit's sample signal returns -ERESTARTSYS first and runs again: both
    // are in the history, as QEMU ran them.)
    let calls = parts[0].syscalls().expect("syscalls");
    let restarted = |c: &&rtit_replay_core::syscall::SyscallRecord| {
        (c.after.get("rax")).is_some_and(|r| {
            [
                "0xfffffffffffffe00",
                "0xfffffffffffffdff",
                "0xfffffffffffffdfe",
                "0xfffffffffffffdfc",
            ]
            .contains(&r.as_str())
        })
    };
    let failed: Vec<_> = calls.iter().filter(|c| c.nr == 59).filter(|c| !restarted(c)).collect();
    assert_eq!(failed.len(), 1, "one execve returned: {failed:?}");
    assert_eq!(
        failed[0].after.get("rax").map(String::as_str),
        Some("0xfffffffffffffffe"),
        "ENOENT"
    );
    assert!(
        matches!(&parts[0].manifest.end, EndState::Exec { program, .. } if program == "/bin/sh"),
        "{:?}",
        parts[0].manifest.end
    );
    assert_eq!(parts[1].manifest.end, EndState::Exited { code: 5 });
    assert_eq!(parts[1].manifest.command, ["/bin/sh", "-c", "echo ran; exit 5"]);
    common::assert_decode_is_truth(&parts[0], &format!("{backend}: the program to its execve"), 20);
    common::assert_decode_is_truth(&parts[1], &format!("{backend}: sh"), 10_000);
}

#[test]
fn a_failing_execve_goes_on_and_a_working_one_is_followed_step() {
    a_failing_execve_goes_on_and_a_working_one_is_followed("step");
}

#[test]
fn a_failing_execve_goes_on_and_a_working_one_is_followed_qemu() {
    a_failing_execve_goes_on_and_a_working_one_is_followed("qemu");
}

/// A real pyenv shim, where the machine has one on PATH (a user's `rtit record -- python3`):
/// bash and pyenv's scripts, then python; the replay serves python, where a breakpoint in
/// the interpreter shows the command it was given, as native gdb shows it.
#[test]
fn a_pyenv_shim_is_followed_to_python() {
    let shim = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
        .filter(|p| std::fs::read_to_string(p).is_ok_and(|t| t.starts_with("#!") && t.contains("pyenv")));
    let Some(shim) = shim else {
        eprintln!("skipped: python3 on PATH is not a pyenv shim here");
        return;
    };
    let dir = common::scratch("exec", "pyenv");
    let out = dir.join("rec");
    let script = "import sys; print('hi', len(sys.argv))";
    // Without site (-S): the same path through pyenv, a fifth of the instructions.
    let result = rtit(&["record", "--out", s(&out), "--", s(&shim), "-S", "-c", script], &[]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&result.stdout), "hi 1\n", "{stderr}");
    let parts = chain(&out);
    let last = parts.last().expect("one");
    assert!(parts.len() >= 3, "env, pyenv's scripts, python: {stderr}");
    assert!(
        last.manifest.command.ends_with(&["-c".to_string(), script.to_string()]),
        "{:?}",
        last.manifest.command
    );
    assert_eq!(last.manifest.end, EndState::Exited { code: 0 });
    let server = Server::start(&parts[0]);
    let replayed = server.gdb(None, &["break PyRun_SimpleStringFlags", "continue", "p command"]);
    assert!(replayed.contains("Breakpoint 1, PyRun_SimpleStringFlags"), "{replayed}");
    assert!(replayed.contains(&format!("\"{script}\\n\"")), "{replayed}");
}

/// `--start SYMBOL` applies to every program of the run that defines it: the wrapper's shell
/// (no `twice`) is recorded whole, the target from `twice`.
#[test]
fn start_applies_to_each_program_that_defines_it() {
    let dir = common::scratch("exec", "start");
    let exe = common::gcc("tests/programs/exec_target.c", &["-O0"], &dir);
    let wrapper = wrapper(&dir, &exe);
    let out = dir.join("rec");
    let result = record(
        "qemu",
        &["--start", "twice"],
        &out,
        &[s(&wrapper), "one"],
        &[("SAID", "hi")],
    );
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(4), "{stderr}");
    let parts = chain(&out);
    assert_eq!(parts.len(), 2, "{stderr}");
    // By name, as `rtit ls` lists it, under the directory recordings go to.
    let insns = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["insns", "rec/exec-1"])
        .env("RTIT_DIR", &dir)
        .output()
        .expect("rtit insns");
    let text = String::from_utf8_lossy(&insns.stdout);
    let first = text
        .lines()
        .find(|l| l.trim_start().starts_with('0'))
        .unwrap_or_default();
    assert!(
        first.contains("twice"),
        "the target's first instruction is twice's: {first}\n{text}"
    );
    assert!(
        parts[1].manifest.instructions < 20_000,
        "twice to the exit, not the loader: {}",
        parts[1].manifest.instructions
    );
    assert!(
        parts[0].manifest.instructions > 10_000,
        "the shell, whole: {}",
        parts[0].manifest.instructions
    );
    common::assert_decode_is_truth(&parts[1], "the target from twice", 20);
}

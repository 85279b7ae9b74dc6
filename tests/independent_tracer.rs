//! The step backend checked against an independent tracer: a minimal ptrace single-stepper,
//! written here with no code shared with `recorder::step`, follows each static example from
//! `main` to its end by the retirement rules of issue #5 (a REP instruction once; a fault or a
//! signal-delivery stop retires nothing; entering a handler retires nothing), and its list of
//! instructions must equal what `rtit insns` decodes from a recording of the same program.
//! Only deterministic programs qualify: two runs of a program whose control flow depends on
//! timing (the vDSO's clock_gettime retries its seqlock) differ under any tracer.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use object::{Object, ObjectSymbol};

fn compile(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("independent").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    let exe = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/c/{name}.c"));
    assert!(Command::new("gcc")
        .args(["-O1", "-static", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc")
        .success());
    exe
}

fn read_byte(pid: Pid, addr: u64) -> u8 {
    ptrace::read(pid, addr as ptrace::AddressType).expect("PEEKTEXT") as u8
}

fn caught(pid: Pid, sig: Signal) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    mask >> (sig as i32 - 1) & 1 == 1
}

/// Single-steps `exe` from `main` to its end; returns the retired instruction addresses.
fn trace(exe: &Path) -> Vec<u64> {
    let bytes = std::fs::read(exe).expect("exe");
    let file = object::File::parse(&*bytes).expect("ELF");
    let main = file.symbols().find(|s| s.name() == Ok("main")).expect("main").address();
    let path = CString::new(exe.to_str().expect("utf-8")).expect("path");
    // SAFETY: the child only calls async-signal-safe functions (ptrace, personality, open,
    // dup2, execv) before replacing itself.
    #[allow(unsafe_code)]
    let child = match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let _ = ptrace::traceme();
            let _ = nix::sys::personality::set(nix::sys::personality::Persona::ADDR_NO_RANDOMIZE);
            if let Ok(null) = nix::fcntl::open("/dev/null", nix::fcntl::OFlag::O_WRONLY, nix::sys::stat::Mode::empty())
            {
                let _ = nix::unistd::dup2(null, 1);
            }
            let _ = nix::unistd::execv(&path, &[&path]);
            std::process::exit(127);
        }
        ForkResult::Parent { child } => child,
    };
    waitpid(child, None).expect("exec stop");
    // Run to main with a breakpoint.
    let word = ptrace::read(child, main as ptrace::AddressType).expect("peek");
    ptrace::write(child, main as ptrace::AddressType, (word & !0xff) | 0xcc).expect("poke");
    ptrace::cont(child, None).expect("cont");
    waitpid(child, None).expect("breakpoint");
    ptrace::write(child, main as ptrace::AddressType, word).expect("poke");
    let mut regs = ptrace::getregs(child).expect("regs");
    regs.rip = main;
    ptrace::setregs(child, regs).expect("setregs");

    let mut out = Vec::new();
    let mut signal = None;
    let mut entering_handler = false;
    loop {
        let rip = ptrace::getregs(child).expect("regs").rip;
        let rep = matches!(read_byte(child, rip), 0xf2 | 0xf3);
        ptrace::step(child, signal.take()).expect("step");
        match waitpid(child, None).expect("wait") {
            WaitStatus::Exited(..) => {
                out.push(rip); // the exit system call
                break;
            }
            WaitStatus::Signaled(..) => break,
            WaitStatus::Stopped(_, Signal::SIGTRAP) => {
                let now = ptrace::getregs(child).expect("regs").rip;
                if std::mem::take(&mut entering_handler) || (rep && now == rip) {
                    continue;
                }
                out.push(rip);
            }
            WaitStatus::Stopped(_, sig) => {
                // A fault or a signal arriving before the instruction leaves RIP where it was;
                // one arriving after it (a system call that raised it) finds RIP moved on.
                if ptrace::getregs(child).expect("regs").rip != rip {
                    out.push(rip);
                }
                signal = Some(sig);
                entering_handler = caught(child, sig);
            }
            other => panic!("unexpected stop {other:?}"),
        }
    }
    out
}

fn decoded(exe: &Path) -> Vec<u64> {
    let out = exe.with_extension("rec");
    let _ = std::fs::remove_dir_all(&out);
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "step", "--start", "main", "--out"])
        .arg(&out)
        .arg("--")
        .arg(exe)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.code().is_some());
    let insns = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .arg("insns")
        .arg("--json")
        .arg(&out)
        .output()
        .expect("insns");
    String::from_utf8_lossy(&insns.stdout)
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            v.get("i")?;
            u64::from_str_radix(v["ip"].as_str()?.trim_start_matches("0x"), 16).ok()
        })
        .collect()
}

#[test]
fn the_step_backend_agrees_with_an_independent_tracer() {
    for name in ["recursion", "dispatch", "longjmp", "signals", "crash", "goto", "deep"] {
        let exe = compile(name);
        let independent = trace(&exe);
        let ours = decoded(&exe);
        let at = independent.iter().zip(&ours).position(|(a, b)| a != b);
        assert!(
            independent == ours,
            "{name}: {} by the independent tracer, {} decoded; first difference at {at:?}",
            independent.len(),
            ours.len()
        );
    }
}

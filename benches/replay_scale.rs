//! Replay at scale (issue 19): recordings of a real program (`sha256sum` under the qemu
//! backend) of about 1e7, 1e8 and 1e9 instructions, and for each:
//! - the time until `rtit replay --no-gdb` listens (process start included), and its peak
//!   memory then;
//! - on a session opened in a process of its own (so its peak memory is its own):
//!   `continue` across the whole history (a breakpoint that never hits), `reverse-continue`
//!   back to the start, `reverse-stepi` at the end with the registers gdb then reads, and a
//!   `bt`'s reads (registers and 256 bytes of stack) at random positions, first while the
//!   values are still being worked out in the background, then once they are final; how
//!   long the values take to be final and the peak memory then.
//!
//! Each measurement is taken three times and given as a range. Needs qemu-x86_64 and a
//! release build of the plugin (`cargo build --release`). Run with
//! `cargo bench --bench replay_scale`; `RTIT_SCALE_SIZES=1e7,1e8` picks sizes.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use rtit_replay_core::recording::Recording;
use rtit_replay_core::session::Session;

/// Instructions sha256sum runs per MiB of input, about.
const PER_MIB: f64 = 55.5e6;

/// The process's peak resident memory, in MiB.
fn peak_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN);
    kib / 1024.0
}

/// A recording of about `n` instructions, made once and kept.
fn recording(dir: &Path, plugin: &Path, n: f64) -> PathBuf {
    let out = dir.join(format!("sha256sum-{n:e}"));
    if Recording::open(&out).is_ok() {
        return out;
    }
    let input = dir.join(format!("input-{n:e}"));
    std::fs::write(&input, vec![0u8; (n / PER_MIB * f64::from(1 << 20)) as usize]).expect("input");
    let _ = std::fs::remove_dir_all(&out);
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .env("RTIT_QEMU_PLUGIN", plugin)
        .args(["record", "--backend", "qemu", "--out"])
        .arg(&out)
        .args(["--", "/usr/bin/sha256sum"])
        .arg(&input)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.success());
    out
}

/// Seconds until `rtit replay --no-gdb` listens, and its peak memory then.
fn listen(rec: &Path) -> (f64, f64) {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["replay", "--no-gdb", "--port", "0"])
        .arg(rec)
        .stderr(Stdio::piped())
        .spawn()
        .expect("rtit replay");
    let stderr = child.stderr.take().expect("stderr");
    for line in BufReader::new(stderr).lines() {
        if line.expect("utf-8").starts_with("listening on ") {
            break;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let peak = peak_mib(child.id());
    let _ = child.kill();
    let _ = child.wait();
    (secs, peak)
}

/// A `bt`'s questions at the current position: the registers gdb unwinds with and the stack.
fn backtrace_reads(s: &mut Session) -> usize {
    let mut known = 0;
    for r in ["rip", "rsp", "rbp", "rbx", "r12", "r13", "r14", "r15"] {
        known += usize::from(s.register(r).is_some());
    }
    if let Some(sp) = s.register("rsp") {
        known += s.read_memory_prefix(sp, 256).len();
    }
    known
}

/// Milliseconds `f` takes.
fn ms<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let t = Instant::now();
    let v = f();
    (t.elapsed().as_secs_f64() * 1e3, v)
}

/// The measurements on one session, in this process (run as a child of the bench).
fn one(rec: &Path) {
    let rec = Recording::open(rec).expect("recording");
    let (open, s) = ms(|| Session::open(rec).expect("session"));
    let mut s = s;
    let peak_open = peak_mib(std::process::id());
    let last = s.last();
    let never: HashSet<u64> = [1].into();
    let (cont, _) = ms(|| s.continue_forward(&never, || false));
    assert_eq!(s.position(), last);
    let (rcont, _) = ms(|| s.continue_backward(&never, || false));
    assert_eq!(s.position(), 0);
    s.set_position(last);
    let (rstepi, _) = ms(|| {
        s.step_backward();
        backtrace_reads(&mut s)
    });
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let mut random = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % (last + 1)
    };
    let mut early = 0.0_f64;
    for _ in 0..5 {
        s.set_position(random());
        early = early.max(ms(|| backtrace_reads(&mut s)).0);
    }
    let (fin, _) = ms(|| s.prepare(|_, _| {}));
    let mut late = 0.0_f64;
    for _ in 0..5 {
        s.set_position(random());
        late = late.max(ms(|| backtrace_reads(&mut s)).0);
    }
    let peak = peak_mib(std::process::id());
    println!(
        "{open} {peak_open} {cont} {rcont} {rstepi} {early} {} {late} {peak}",
        fin / 1e3
    );
}

/// `min–max` of a column.
fn range(v: &[f64], digits: usize) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.digits$}–{hi:.digits$}")
}

fn main() {
    if let Ok(rec) = std::env::var("RTIT_SCALE_ONE") {
        return one(Path::new(&rec));
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("replay_scale");
    std::fs::create_dir_all(&dir).expect("dir");
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/librtit_qemu_plugin.so");
    assert!(plugin.is_file(), "build the plugin first: cargo build --release");
    let sizes = std::env::var("RTIT_SCALE_SIZES").unwrap_or_else(|_| "1e7,1e8,1e9".into());
    println!(
        "| instructions | listening | peak then | continue, whole history | reverse-continue | reverse-stepi + regs | bt while values come | values final after | bt then | peak with final values |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for n in sizes
        .split(',')
        .map(|s| s.trim().parse::<f64>().expect("a size such as 1e8"))
    {
        let rec = recording(&dir, &plugin, n);
        let positions = Recording::open(&rec).expect("recording").manifest.instructions;
        let mut listened = (Vec::new(), Vec::new());
        let mut cols: Vec<Vec<f64>> = vec![Vec::new(); 9];
        for _ in 0..3 {
            let (secs, peak) = listen(&rec);
            listened.0.push(secs);
            listened.1.push(peak);
            let out = Command::new(std::env::current_exe().expect("the bench"))
                .env("RTIT_SCALE_ONE", &rec)
                .output()
                .expect("the measuring child");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let line = String::from_utf8_lossy(&out.stdout);
            let nums = line.lines().last().unwrap_or("");
            for (c, v) in cols.iter_mut().zip(nums.split_whitespace()) {
                c.push(v.parse().expect("a number"));
            }
        }
        let per = |mib: &[f64]| {
            let bytes: Vec<f64> = mib.iter().map(|m| m * f64::from(1 << 20) / positions as f64).collect();
            format!("{} MiB ({} B/insn)", range(mib, 0), range(&bytes, 2))
        };
        println!(
            "| {positions} | {} s | {} | {} ms | {} ms | {} ms | {} ms | {} s | {} ms | {} |",
            range(&listened.0, 2),
            per(&listened.1),
            range(&cols[2], 1),
            range(&cols[3], 1),
            range(&cols[4], 2),
            range(&cols[5], 1),
            range(&cols[6], 1),
            range(&cols[7], 1),
            per(&cols[8]),
        );
    }
}

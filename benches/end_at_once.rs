//! The first look at a crash (issue 40, "the end at once"): seconds from the moment
//! `rtit replay --no-gdb` listens to the end of a real gdb's `continue`, `bt` and `p $rdi`
//! at the crash, against native gdb running the same program to the same crash (`run`,
//! `bt`, `p $rdi`). Each replay first fresh (nothing decoded or stored: the first replay of a
//! recording), then with the history stored beside the recording (`timeline.cache`).
//!
//! The programs, recorded once with the qemu backend and kept in target/bench/end_at_once:
//! `tests/programs/crash_after.c` (gcc -O0), a loop then a NULL store three calls deep, at
//! about 1e8, 1e9 and 3e9 instructions; python3 crashing in ctypes after a loop (about 1e9),
//! whose `import ctypes` loads a library right before the crash, so gdb's loader breakpoint
//! stops it in a late stretch and that `continue` waits for the decode.
//!
//! And runs that exit (python3 loops of about 1e9 and 4e9 instructions): QEMU 7.2 reads no
//! registers at `exit_group`, so the end's values come from the last anchor over the end of
//! the history decoded alone from a sync point; native gdb stops there with `catch syscall
//! exit_group`.
//!
//! Three runs each, given as a range. Needs gcc, gdb, qemu-x86_64 and a release build
//! (`cargo build --release`: the plugin). `RTIT_END_SIZES=1e8,1e9` picks the C program's
//! sizes, `RTIT_END_PYTHON=0` leaves python3 out, `RTIT_END_EXITS=0` the runs that exit.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use rtit_replay_core::recording::Recording;
use rtit_replay_core::session::Session;
use rtit_replay_core::timeline::cache::{self, Policy};

/// Instructions one round of crash_after's loop takes at -O0, about.
const PER_ROUND: f64 = 30.0;

/// What the replay and native gdb are asked at the crash.
const LOOK: [&str; 3] = ["bt", "p $rdi", "p $rsp"];

/// `rtit record` of `args` into `out`, once (kept while sealed).
fn record(plugin: &Path, out: &Path, args: &[&str], crashes: bool) -> Recording {
    if let Some(r) = Recording::open(out).ok().filter(|r| r.sealed()) {
        return r;
    }
    let _ = std::fs::remove_dir_all(out);
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .env("RTIT_QEMU_PLUGIN", plugin)
        .args(["record", "--backend", "qemu", "--out"])
        .arg(out)
        .arg("--")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert_eq!(!status.success(), crashes, "{args:?} crashes: {crashes}");
    Recording::open(out).expect("a recording")
}

/// Seconds from listening to gdb's last answer at the crash; and what gdb printed.
fn replay(rec: &Path) -> (f64, String) {
    let mut server = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["replay", "--no-gdb", "--port", "0"])
        .arg(rec)
        .stderr(Stdio::piped())
        .spawn()
        .expect("rtit replay");
    let mut lines = BufReader::new(server.stderr.take().expect("stderr")).lines();
    let port: u16 = loop {
        let line = lines.next().expect("it listens").expect("utf-8");
        if let Some(addr) = line.strip_prefix("listening on ") {
            break addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let t = Instant::now();
    let out = gdb(&[format!("target remote :{port}"), "continue".into()], &[]);
    let took = t.elapsed().as_secs_f64();
    let _ = server.kill();
    let _ = server.wait();
    (took, out)
}

/// Runs gdb in batch mode: `first` commands, then [`LOOK`], with `args` (`--args …`).
fn gdb(first: &[String], args: &[&str]) -> String {
    let mut cmd = Command::new("gdb");
    cmd.args(["-batch", "-nx"]);
    for c in first.iter().map(String::as_str).chain(LOOK) {
        cmd.arg("-ex").arg(c);
    }
    if !args.is_empty() {
        cmd.arg("--args").args(args);
    }
    let out = cmd.output().expect("gdb");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Native gdb to the crash (`first`: how it gets there): seconds, and what it printed.
fn native(first: &[String], args: &[&str]) -> (f64, String) {
    let t = Instant::now();
    let out = gdb(first, args);
    (t.elapsed().as_secs_f64(), out)
}

fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    format!("{lo:.2}–{hi:.2}")
}

/// The frames' count of a `bt`.
fn frames(out: &str) -> usize {
    out.lines().filter(|l| l.starts_with('#')).count()
}

fn row(name: &str, rec: &Recording, args: &[&str]) {
    row_to(name, rec, args, &["run".into()]);
}

/// A row whose native run gets to the end with `first`.
fn row_to(name: &str, rec: &Recording, args: &[&str], first: &[String]) {
    let dir = &rec.dir;
    let mut fresh = Vec::new();
    let mut seen = String::new();
    for _ in 0..3 {
        let _ = std::fs::remove_file(dir.join(cache::FILE));
        let (t, out) = replay(dir);
        fresh.push(t);
        seen = out;
    }
    // The history stored, as the first replay leaves it.
    let _ = std::fs::remove_file(dir.join(cache::FILE));
    let mut s = Session::open_cached(rec.clone(), false, Policy::Always, &mut |_| {}).expect("opens");
    s.stored().expect("storing").expect("stored");
    drop(s);
    let stored: Vec<f64> = (0..3).map(|_| replay(dir).0).collect();
    let natives: Vec<(f64, String)> = (0..3).map(|_| native(first, args)).collect();
    let native_frames = frames(&natives[0].1);
    println!(
        "{name} | {} | {} | {} | {} | {}/{}",
        rec.manifest.instructions,
        range(&fresh),
        range(&stored),
        range(&natives.iter().map(|n| n.0).collect::<Vec<_>>()),
        frames(&seen),
        native_frames,
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let plugin = root.join("target/release/librtit_qemu_plugin.so");
    let dir = root.join("target/bench/end_at_once");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let exe: PathBuf = dir.join("crash_after");
    let status = Command::new("gcc")
        .args(["-O0", "-g", "-o"])
        .arg(&exe)
        .arg(root.join("tests/programs/crash_after.c"))
        .status()
        .expect("gcc");
    assert!(status.success(), "gcc");
    let exe = exe.to_str().expect("a path").to_string();
    println!("seconds from `rtit replay` listening to gdb's continue, bt, p at the crash (3 runs)");
    println!("program | instructions | first replay | history stored | native gdb run | frames (replay/native)");
    let sizes = std::env::var("RTIT_END_SIZES").unwrap_or_else(|_| "1e8,1e9,3e9".into());
    for size in sizes.split(',') {
        let n: f64 = size.parse().expect("a size such as 1e9");
        let rounds = ((n / PER_ROUND) as u64).to_string();
        let args = [exe.as_str(), rounds.as_str()];
        let rec = record(&plugin, &dir.join(format!("crash_after-{size}")), &args, true);
        row(&format!("crash_after {size}"), &rec, &args);
    }
    if std::env::var("RTIT_END_PYTHON").as_deref() != Ok("0") {
        let script = "s = 0\nfor i in range(900000): s += i * i\nimport ctypes; ctypes.string_at(0)";
        let args = ["/usr/bin/python3", "-c", script];
        let rec = record(&plugin, &dir.join("python3-ctypes-1e9"), &args, true);
        row("python3 ctypes 1e9", &rec, &args);
    }
    if std::env::var("RTIT_END_EXITS").as_deref() != Ok("0") {
        let exit = ["catch syscall exit_group".to_string(), "run".to_string()];
        for (size, rounds) in [("1e9", "800000"), ("4e9", "3000000")] {
            let script = format!("s = 0\nfor i in range({rounds}): s += i * i\nprint(s)");
            let args = ["/usr/bin/python3", "-S", "-c", script.as_str()];
            let rec = record(&plugin, &dir.join(format!("python3-exit-{size}")), &args, false);
            row_to(&format!("python3 exit {size}"), &rec, &args, &exit);
        }
    }
}

//! Values at once (issue 40): how long a stop waits before what gdb reads there is final, on
//! python3 recordings (the qemu backend, anchors by default every 2^25 instructions on QEMU 7.2,
//! every 2^22 on QEMU 9.0 and later) of about
//! 1e7, 1e8 and 1e9 instructions. For each, in a process of its own (so its peak memory is
//! its own), with the anchors and again without them (the passes' chains, as a recording
//! without anchors gets its values):
//! - the time to open the recording (the stored history when there is one);
//! - from there, the time until the values at the end are final and a `bt`'s reads
//!   (registers, 256 bytes of stack) are answered; the same at the middle, then at five
//!   random positions one after another (the slowest and the mean);
//! - with anchors, the time from opening until the background fill has kept states along
//!   the whole history (the chains: until they are complete), then five more random
//!   positions (the slowest);
//! - the peak memory, per instruction.
//!
//! Each measurement three times, given as a range. Needs qemu-x86_64 and a release build of
//! the plugin (`cargo build --release`). Run with `cargo bench --bench values_at_once`;
//! `RTIT_VALUES_SIZES=1e7,1e8` picks sizes, `RTIT_VALUES_MODES=anchors,one-core` the modes
//! (`one-core`: with the anchors, the process held to one core) and
//! `RTIT_VALUES_PROGRAM=sort` another program (`sort`, `sha256sum`); `RTIT_QEMU=PATH` records
//! with that QEMU (on QEMU 9.0 and later anchors are parked, every 2^22 instructions).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use rtit_replay_core::recording::Recording;
use rtit_replay_core::session::Session;
use rtit_replay_core::timeline::cache::Policy;

#[path = "common/memory.rs"]
mod memory;
#[path = "common/recordings.rs"]
mod recordings;

use memory::peak_mib;

/// What one child measured, in seconds (memory in MiB).
#[derive(Default, Clone, Copy)]
struct Measured {
    open: f64,
    end: f64,
    middle: f64,
    random_max: f64,
    random_mean: f64,
    filled: f64,
    random_after: f64,
    peak: f64,
    /// Stretches whose backward walk the fill skipped, of those between two exact states.
    settled: (f64, f64),
}

/// Seconds until the values at `p` are final and a `bt`'s reads are answered.
fn look(s: &mut Session, p: u64) -> f64 {
    let t = Instant::now();
    s.set_position(p);
    s.settle(&mut || false);
    let rsp = s.register("rsp");
    let _ = s.register("rbp");
    let _ = s.register("rip");
    if let Some(sp) = rsp {
        let _ = s.read_memory_prefix(sp, 256);
    }
    t.elapsed().as_secs_f64()
}

/// The child: measures one recording in one mode and prints the figures.
fn child(dir: &Path, ignore_anchors: bool) {
    if std::env::var("RTIT_VALUES_ONE_CORE").as_deref() == Ok("1") {
        // Every thread it starts inherits this: the fill sizes itself to what it may use.
        let mut one = nix::sched::CpuSet::new();
        one.set(0).expect("CPU 0");
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &one).expect("pinned to CPU 0");
    }
    let t = Instant::now();
    let mut rec = Recording::open(dir).expect("a recording");
    if ignore_anchors {
        rec = rec.ignoring_anchors();
    }
    let mut s = Session::open_cached(rec, false, Policy::Auto, &mut |_| {}).expect("a session");
    let open = t.elapsed().as_secs_f64();
    let last = s.last();
    let end = look(&mut s, last);
    let middle = look(&mut s, last / 2 + 777);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let randoms: Vec<f64> = (0..5)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            look(&mut s, (x >> 11) % last)
        })
        .collect();
    let random_max = randoms.iter().cloned().fold(0.0, f64::max);
    let random_mean = randoms.iter().sum::<f64>() / randoms.len() as f64;
    while !matches!(s.values_walked(), (done, total) if done >= total) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let filled = t.elapsed().as_secs_f64();
    let after: Vec<f64> = (0..5)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            look(&mut s, (x >> 11) % last)
        })
        .collect();
    let random_after = after.iter().cloned().fold(0.0, f64::max);
    let (settled, stretches) = s.values_stats().settled;
    println!(
        "MEASURED {open} {end} {middle} {random_max} {random_mean} {filled} {random_after} {} {settled} {stretches}",
        peak_mib(std::process::id())
    );
}

/// Runs the child for `dir`, `ignore_anchors` and on one core or all, and reads what it
/// measured.
fn measure(dir: &Path, ignore_anchors: bool, one_core: bool) -> Measured {
    let exe = std::env::current_exe().expect("this benchmark");
    let out = Command::new(exe)
        .env("RTIT_VALUES_CHILD", dir)
        .env("RTIT_VALUES_IGNORE", if ignore_anchors { "1" } else { "0" })
        .env("RTIT_VALUES_ONE_CORE", if one_core { "1" } else { "0" })
        .output()
        .expect("the child");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("MEASURED "))
        .unwrap_or_else(|| panic!("the child measured nothing: {}", String::from_utf8_lossy(&out.stderr)));
    let v: Vec<f64> = line.split_whitespace().map(|w| w.parse().unwrap_or(f64::NAN)).collect();
    Measured {
        open: v[0],
        end: v[1],
        middle: v[2],
        random_max: v[3],
        random_mean: v[4],
        filled: v[5],
        random_after: v[6],
        peak: v[7],
        settled: (v[8], v[9]),
    }
}

/// `min–max` of `values`, with `digits` decimals.
fn range(values: impl Iterator<Item = f64>, digits: usize) -> String {
    let v: Vec<f64> = values.collect();
    let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
    format!("{lo:.digits$}–{hi:.digits$}")
}

fn main() {
    if let Ok(dir) = std::env::var("RTIT_VALUES_CHILD") {
        child(
            Path::new(&dir),
            std::env::var("RTIT_VALUES_IGNORE").as_deref() == Ok("1"),
        );
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let plugin = root.join("target/release/librtit_qemu_plugin.so");
    // Each QEMU version's recordings are kept apart (`recordings::recording`).
    let qemu = rtit_recorder::qemu::find::find_qemu(None).ok();
    let dir = root.join("target/bench/values_at_once");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let sizes = std::env::var("RTIT_VALUES_SIZES").unwrap_or_else(|_| "1e7,1e8,1e9".into());
    let program = std::env::var("RTIT_VALUES_PROGRAM").unwrap_or_else(|_| "python3".into());
    let which = qemu.map_or("no qemu-x86_64 found".into(), |q| {
        rtit_recorder::qemu::find::described(&q)
    });
    println!(
        "{program}, qemu backend ({which}): seconds until a stop's values are final and a bt's reads answered (3 runs)"
    );
    println!("size | insns | anchors | mode | open | end | middle | 5 random: slowest | mean | all kept (s from open) | 5 random after: slowest | peak MiB | bytes/insn | stretches settled");
    for size in sizes.split(',') {
        let n: f64 = size.parse().expect("a size such as 1e8");
        let out = recordings::recording(&dir, &plugin, &program, n);
        let rec = Recording::open(&out).expect("a recording");
        let insns = rec.manifest.instructions;
        let anchors = rec.anchors().ok().flatten().map_or(0, |a| a.list.len());
        let modes = std::env::var("RTIT_VALUES_MODES").unwrap_or_else(|_| "anchors,chains".into());
        for mode in ["anchors", "one-core", "chains"] {
            if !modes.split(',').any(|m| m == mode) {
                continue;
            }
            let (ignore, one_core) = (mode == "chains", mode == "one-core");
            let runs: Vec<Measured> = (0..3).map(|_| measure(&out, ignore, one_core)).collect();
            let peak_per = |m: &Measured| m.peak * 1048576.0 / insns as f64;
            println!(
                "{size} | {insns} | {anchors} | {mode} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} of {:.0}",
                range(runs.iter().map(|m| m.open), 2),
                range(runs.iter().map(|m| m.end), 3),
                range(runs.iter().map(|m| m.middle), 3),
                range(runs.iter().map(|m| m.random_max), 3),
                range(runs.iter().map(|m| m.random_mean), 3),
                range(runs.iter().map(|m| m.filled), 1),
                range(runs.iter().map(|m| m.random_after), 3),
                range(runs.iter().map(|m| m.peak), 0),
                range(runs.iter().map(peak_per), 2),
                runs[0].settled.0,
                runs[0].settled.1,
            );
        }
    }
}

//! Recording with the qemu backend against QEMU alone (issue 20), side by side in one run:
//! for each workload (Debian's `sort`, `gzip` and `python3` on generated inputs), the time of
//! plain `qemu-x86_64` running it and of `rtit record --backend qemu` recording it, three runs
//! each, interleaved; the ratio of the medians, the recorded instructions per second, and
//! the trace's bytes per instruction. Each workload's instructions are what the recording
//! counts (the same program and input under plain QEMU runs the same ones). Beside them, the
//! API's floor: QEMU with the plugin's `floor=on`, an empty callback at every block and
//! nothing else, which no recording through QEMU 7.2's plugin API can beat (the plugin's
//! `floor` module says why).
//!
//! Runs against each QEMU that can load plugins: the one on PATH and each `rtit build-qemu`
//! built (QEMU 7.2's API needs a call per block; later ones are compared on the same terms).
//!
//! Needs qemu-x86_64 and a release build of the plugin (`cargo build --release`). Run with
//! `cargo bench --bench qemu_record`; `RTIT_QEMU_BENCH=sort,gzip` picks workloads.

use std::path::{Path, PathBuf};
use std::process::Command;

use rtit_replay_core::recording::Recording;

#[path = "common/timing.rs"]
mod timing;
use timing::time;

/// Runs each.
const RUNS: usize = 3;

/// A workload: a name, the program and its arguments.
struct Workload {
    name: &'static str,
    program: &'static str,
    args: Vec<String>,
}

/// Pseudo-random text of `bytes` bytes in lines (a linear congruential generator:
/// reproducible).
fn text(path: &Path, bytes: usize) {
    let mut x: u64 = 12345;
    let mut s = String::with_capacity(bytes + 64);
    while s.len() < bytes {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        s.push_str(&format!("{:016x} {:08x} line\n", x >> 11, x >> 40));
    }
    std::fs::write(path, s).expect("input");
}

fn workloads(dir: &Path) -> Vec<Workload> {
    let sort_in = dir.join("sort-1mb.txt");
    text(&sort_in, 1 << 20);
    let numbers = dir.join("numbers.txt");
    let n: String = (0..400_000u64)
        .map(|i| format!("{}\n", i.wrapping_mul(2654435761) % 1_000_003))
        .collect();
    std::fs::write(&numbers, n).expect("input");
    let gzip_in = dir.join("gzip-8mb.txt");
    text(&gzip_in, 8 << 20);
    let s = |p: &PathBuf| p.display().to_string();
    let json = |passes: u32| {
        format!(
            "import json\ns = 0\nfor i in range({passes}): s += len(json.dumps({{'a': i, 'b': [i, i * 2]}}))\nprint(s)"
        )
    };
    vec![
        Workload {
            name: "sort 1 MB",
            program: "/usr/bin/sort",
            args: vec![s(&sort_in)],
        },
        Workload {
            name: "sort -n 400,000 numbers",
            program: "/usr/bin/sort",
            args: vec!["-n".into(), "--parallel=1".into(), s(&numbers)],
        },
        Workload {
            name: "gzip -c 8 MB",
            program: "/usr/bin/gzip",
            args: vec!["-c".into(), s(&gzip_in)],
        },
        Workload {
            name: "python3 startup",
            program: "/usr/bin/python3",
            args: vec!["-c".into(), "print(sum(range(10)))".into()],
        },
        Workload {
            name: "python3 json loop",
            program: "/usr/bin/python3",
            args: vec!["-c".into(), json(20_000)],
        },
    ]
}

fn range(v: &[f64]) -> String {
    let (lo, hi) = (
        v.iter().copied().fold(f64::MAX, f64::min),
        v.iter().copied().fold(0.0, f64::max),
    );
    if hi - lo < 0.005 {
        format!("{lo:.2} s")
    } else {
        format!("{lo:.2}–{hi:.2} s")
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The QEMUs to compare: PATH's and those `rtit build-qemu` built, each with its version.
fn qemus() -> Vec<(PathBuf, String)> {
    let mut found: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("qemu-x86_64"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.is_file() && rtit_recorder::qemu::find::loads_plugins(p))
        .take(1)
        .collect();
    found.extend(rtit_recorder::qemu::find::built());
    found
        .into_iter()
        .map(|q| {
            let out = Command::new(&q).arg("--version").output().expect("qemu --version");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let version = text.split_whitespace().nth(2).unwrap_or("?").to_string();
            (q, version)
        })
        .collect()
}

fn main() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("qemu_record");
    std::fs::create_dir_all(&dir).expect("dir");
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/librtit_qemu_plugin.so");
    assert!(plugin.is_file(), "build the plugin first: cargo build --release");
    let chosen = std::env::var("RTIT_QEMU_BENCH").ok();
    println!(
        "| QEMU | workload | instructions | plain qemu-x86_64 | API floor | rtit record --backend qemu | ratio | floor ratio | recorded | trace |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let floor = format!("{},floor=on", plugin.display());
    let workloads = workloads(&dir);
    for ((qemu, version), w) in qemus().iter().flat_map(|q| workloads.iter().map(move |w| (q, w))) {
        if chosen
            .as_deref()
            .is_some_and(|c| !c.split(',').any(|k| w.name.starts_with(k)))
        {
            continue;
        }
        let out = dir.join("rec");
        let (mut plain, mut floored, mut rtit) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..RUNS {
            plain.push(time(Command::new(qemu).arg(w.program).args(&w.args)));
            floored.push(time(
                Command::new(qemu)
                    .args(["-plugin", &floor])
                    .arg(w.program)
                    .args(&w.args),
            ));
            let _ = std::fs::remove_dir_all(&out);
            rtit.push(time(
                Command::new(env!("CARGO_BIN_EXE_rtit"))
                    .env("RTIT_QEMU_PLUGIN", &plugin)
                    .args(["record", "--backend", "qemu", "--qemu"])
                    .arg(qemu)
                    .arg("--out")
                    .arg(&out)
                    .arg("--")
                    .arg(w.program)
                    .args(&w.args),
            ));
        }
        let rec = Recording::open(&out).expect("the recording");
        let n = rec.manifest.instructions;
        println!(
            "| {version} | {} | {n} | {} | {} | {} | {:.1}× | {:.2}× | {:.0} M/s | {:.2} B/insn |",
            w.name,
            range(&plain),
            range(&floored),
            range(&rtit),
            median(&rtit) / median(&plain),
            median(&floored) / median(&plain),
            n as f64 / median(&rtit) / 1e6,
            rec.manifest.trace_bytes as f64 / n as f64
        );
    }
}

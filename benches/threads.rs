//! What recording threads costs under the qemu backend (issue 43), side by side in one run:
//! for each multi-threaded workload (GNU sort on two threads, xz on two, python3's
//! `threading` with three), the time natively, under plain `qemu-x86_64` (which runs the
//! threads in parallel, one vCPU each) and under `rtit record` (which runs them one at a
//! time), five runs each, interleaved; the ratio of the medians to plain QEMU, and the
//! switches between threads the recording holds.
//!
//! Runs against each QEMU `rtit build-qemu` built (threads need QEMU 9.0 or later). Needs a
//! release build of the plugin (`cargo build --release`). Run with `cargo bench --bench
//! threads`.

use std::path::Path;
use std::process::Command;

use rtit_replay_core::recording::Recording;

#[path = "common/timing.rs"]
mod timing;
use timing::time;

const RUNS: usize = 5;

fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::MAX, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    format!("{lo:.2}–{hi:.2} s")
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("threads_bench");
    std::fs::create_dir_all(&dir).expect("dir");
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/librtit_qemu_plugin.so");
    assert!(plugin.is_file(), "build the plugin first: cargo build --release");
    let numbers = dir.join("numbers.txt");
    let n: String = (0..300_000u64)
        .map(|i| format!("{}\n", i.wrapping_mul(2654435761) % 1_000_003))
        .collect();
    std::fs::write(&numbers, n).expect("input");
    let text = dir.join("text.txt");
    let mut x: u64 = 12345;
    let mut t = String::new();
    while t.len() < 4 << 20 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        t.push_str(&format!("{:016x} {:08x} line\n", x >> 11, x >> 40));
    }
    std::fs::write(&text, t).expect("input");
    let script = dir.join("threads.py");
    std::fs::write(
        &script,
        "import threading\nout = []\ndef work(n):\n    out.append(sum(i * i for i in range(n)))\n\
         ts = [threading.Thread(target=work, args=(200000 * (k + 1),)) for k in range(3)]\n\
         for t in ts: t.start()\nfor t in ts: t.join()\nprint(sorted(out))\n",
    )
    .expect("script");
    let s = |p: &Path| p.display().to_string();
    let workloads: [(&str, Vec<String>); 3] = [
        (
            "sort -n --parallel=2, 300,000 numbers",
            vec!["/usr/bin/sort".into(), "-n".into(), "--parallel=2".into(), s(&numbers)],
        ),
        (
            "xz -T2 -c, 4 MB",
            vec!["/usr/bin/xz".into(), "-T2".into(), "-c".into(), s(&text)],
        ),
        ("python3, 3 threads", vec!["/usr/bin/python3".into(), s(&script)]),
    ];
    println!(
        "| QEMU | workload | native | plain qemu-x86_64 | rtit record | ratio to QEMU | instructions | switches |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for qemu in rtit_recorder::qemu::find::built() {
        let out = Command::new(&qemu).arg("--version").output().expect("qemu --version");
        let version = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .nth(2)
            .unwrap_or("?")
            .to_string();
        for (name, argv) in &workloads {
            let rec = dir.join("rec");
            let (mut native, mut plain, mut rtit) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..RUNS {
                native.push(time(Command::new(&argv[0]).args(&argv[1..])));
                plain.push(time(Command::new(&qemu).args(argv)));
                let _ = std::fs::remove_dir_all(&rec);
                rtit.push(time(
                    Command::new(env!("CARGO_BIN_EXE_rtit"))
                        .env("RTIT_QEMU_PLUGIN", &plugin)
                        .args(["record", "--qemu"])
                        .arg(&qemu)
                        .arg("--out")
                        .arg(&rec)
                        .arg("--")
                        .args(argv),
                ));
            }
            let r = Recording::open(&rec).expect("the recording");
            let switches = (r.signals().expect("entries").iter())
                .filter(|e| e.switch.is_some_and(|s| s.from != s.to))
                .count();
            println!(
                "| {version} | {name} | {} | {} | {} | {:.1}× | {} | {switches} |",
                range(&native),
                range(&plain),
                range(&rtit),
                median(&rtit) / median(&plain),
                r.manifest.instructions
            );
        }
    }
}

//! Recording throughput of the qemu backend on a real workload (GNU sort on 1 MB of text),
//! against the same workload under plain `qemu-x86_64` (no plugin) and natively, and the flow
//! decoder on the recording. Throughput is in instructions as the recording counts them (the
//! native run executes a different stream: glibc picks routines for the real CPU).
//!
//! Needs qemu-x86_64 and a release build of the plugin (`cargo build --release`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use criterion::{criterion_main, Criterion, Throughput};
use rtit_replay_core::flow::{FlowDecoder, FlowItem};
use rtit_replay_core::recording::Recording;

fn workload(dir: &Path) -> PathBuf {
    let input = dir.join("input.txt");
    let mut x: u64 = 12345;
    let mut text = String::new();
    while text.len() < 1 << 20 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        text.push_str(&format!("{:016x} {:08x} line\n", x >> 11, x >> 40));
    }
    std::fs::write(&input, text).expect("input");
    input
}

fn run(cmd: &mut Command) {
    let status = cmd.stdout(Stdio::null()).status().expect("run");
    assert!(status.success());
}

fn record(plugin: &Path, input: &Path, out: &Path) {
    let _ = std::fs::remove_dir_all(out);
    run(Command::new(env!("CARGO_BIN_EXE_rtit"))
        .env("RTIT_QEMU_PLUGIN", plugin)
        .args(["record", "--backend", "qemu", "--out"])
        .arg(out)
        .args(["--", "/usr/bin/sort"])
        .arg(input)
        .stderr(Stdio::null()));
}

fn bench(c: &mut Criterion) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("qemu_record");
    std::fs::create_dir_all(&dir).expect("dir");
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/librtit_qemu_plugin.so");
    assert!(plugin.is_file(), "build the plugin first: cargo build --release");
    let input = workload(&dir);
    let out = dir.join("rec");
    record(&plugin, &input, &out);
    let rec = Recording::open(&out).expect("recording");
    let instructions = rec.manifest.instructions;
    eprintln!(
        "sort 1 MB: {instructions} instructions, {} bytes of trace ({:.3} bytes/instruction)",
        rec.manifest.trace_bytes,
        rec.manifest.trace_bytes as f64 / instructions as f64
    );

    let mut g = c.benchmark_group("sort_1mb");
    g.sample_size(10);
    g.throughput(Throughput::Elements(instructions));
    g.bench_function("native", |b| b.iter(|| run(Command::new("/usr/bin/sort").arg(&input))));
    g.bench_function("qemu_plain", |b| {
        b.iter(|| run(Command::new("qemu-x86_64").arg("/usr/bin/sort").arg(&input)))
    });
    g.bench_function("rtit_record_qemu", |b| b.iter(|| record(&plugin, &input, &out)));
    let space = rec.address_space().expect("images");
    let trace = rec.trace().expect("trace");
    g.bench_function("flow_decode", |b| {
        b.iter(|| {
            let mut items: Vec<FlowItem> = Vec::new();
            FlowDecoder::new(&trace, rec.flow_config(), &space).decode(&mut items);
            items.len()
        })
    });
    g.finish();
}

#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}
criterion_main!(group::benches);

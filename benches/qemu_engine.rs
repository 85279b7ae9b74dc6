//! The qemu backend's engine alone (issue 20): what the plugin's feeder thread does per block,
//! measured on one core without QEMU beside it, against QEMU's own time per instruction on
//! the same program. For each workload `rtit record --backend qemu` runs once with the plugin
//! capturing what it hands the engine (`RTIT_QEMU_CAPTURE`, the first 50 M entries); the
//! captured stream is then fed to a fresh `Engine` five times (best and range), and once a
//! block at a time to check that the batch loop writes the same bytes. The feeder keeps up
//! with QEMU's thread only while its time per instruction is below QEMU's own.
//!
//! Needs qemu-x86_64 and a release build of the plugin (`cargo build --release`). Run with
//! `cargo bench --bench qemu_engine`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use rtit_recorder::model::{ModelOptions, RtitConfig};
use rtit_recorder::qemu::block::Block;
use rtit_recorder::qemu::capture::{self, Entry, Translation};
use rtit_recorder::qemu::engine::{Call, Engine, Start};

/// Feeds of the captured stream timed.
const RUNS: usize = 5;

/// An engine holding the captured translations.
fn engine(translations: &[Translation]) -> Engine {
    let mut e = Engine::new(
        ModelOptions::default(),
        RtitConfig::user_process(0x1000),
        Start::Entry,
        false,
    );
    for (id, insns) in translations {
        let block = Block::translate(insns.iter().map(|(ip, b)| (*ip, &b[..]))).expect("a captured block translates");
        assert_eq!(e.add_block(block), *id, "ids as the plugin gave them");
    }
    e
}

/// Feeds `entries` a batch of up to 1024 at a time, as the feeder takes them (or one at a
/// time); the trace bytes and the final position.
fn feed(e: &mut Engine, entries: &[Entry], batch: usize) -> (Vec<u8>, u64) {
    let mut trace = Vec::new();
    let mut rest = entries;
    if let Some((Entry::Block(first), tail)) = rest.split_first() {
        e.executed(first.id, first.before).expect("tracing starts");
        rest = tail;
    }
    while !rest.is_empty() {
        let end = rest
            .iter()
            .take(batch)
            .position(|x| matches!(x, Entry::Syscall(..)))
            .unwrap_or(batch.min(rest.len()));
        if end > 0 {
            e.executed_all(rest[..end].iter().map(|x| match x {
                Entry::Block(s) => (s.id, s.before),
                Entry::Syscall(..) => unreachable!("cut before"),
            }));
        }
        if let Some(Entry::Syscall(nr, counts)) = rest.get(end) {
            let _ = e.syscall(*nr, Call::Returns, *counts);
            rest = &rest[end + 1..];
        } else {
            rest = &rest[end..];
        }
        if trace.len() < 1 << 30 {
            trace.extend(e.take_trace());
        }
    }
    trace.extend(e.take_trace());
    (trace, e.position())
}

fn time(cmd: &mut Command) -> f64 {
    let t = Instant::now();
    let status = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().expect("runs");
    assert!(status.success(), "{cmd:?}");
    t.elapsed().as_secs_f64()
}

fn main() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("qemu_engine");
    std::fs::create_dir_all(&dir).expect("dir");
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/librtit_qemu_plugin.so");
    assert!(plugin.is_file(), "build the plugin first: cargo build --release");
    let input = dir.join("numbers.txt");
    let text: String = (0..600_000u64)
        .map(|i| format!("{} {}\n", i.wrapping_mul(2654435761) % 1_000_003, i % 977))
        .collect();
    std::fs::write(&input, text).expect("input");
    let input = input.display().to_string();
    let json = "import json\ns = 0\nfor i in range(60000): s += len(json.dumps({'a': i, 'b': [i, i * 2]}))\nprint(s)";
    let workloads: [(&str, &str, Vec<&str>); 3] = [
        ("gzip -c 8 MB", "/usr/bin/gzip", vec!["-c", &input]),
        (
            "sort -n 600,000 lines",
            "/usr/bin/sort",
            vec!["-n", "--parallel=1", &input],
        ),
        ("python3 JSON loop", "/usr/bin/python3", vec!["-c", json]),
    ];
    println!("| workload | blocks fed | instructions a block | engine, ns a block | engine, ns an instruction | QEMU alone, ns an instruction | engine / QEMU |");
    println!("|---|---|---|---|---|---|---|");
    for (name, program, args) in workloads {
        let cap = dir.join("capture");
        let out = dir.join("rec");
        let _ = std::fs::remove_dir_all(&cap);
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&cap).expect("capture dir");
        time(
            Command::new(env!("CARGO_BIN_EXE_rtit"))
                .env("RTIT_QEMU_PLUGIN", &plugin)
                .env(capture::ENV, &cap)
                .args(["record", "--backend", "qemu", "--out"])
                .arg(&out)
                .arg("--")
                .arg(program)
                .args(&args),
        );
        let rec = rtit_replay_core::recording::Recording::open(&out).expect("the recording");
        let mut plain: Vec<f64> = (0..3)
            .map(|_| time(Command::new("qemu-x86_64").arg(program).args(&args)))
            .collect();
        plain.sort_by(f64::total_cmp);
        let qemu_per_insn = plain[1] / rec.manifest.instructions as f64;

        let (translations, entries) = capture::load(&cap).expect("the capture");
        let blocks = entries.iter().filter(|e| matches!(e, Entry::Block(_))).count();
        let mut times = Vec::new();
        let mut fed = None;
        for _ in 0..RUNS {
            let mut e = engine(&translations);
            let t = Instant::now();
            let result = feed(&mut e, &entries, 1024);
            times.push(t.elapsed().as_secs_f64());
            fed = Some(result);
        }
        let (bytes, position) = fed.expect("fed");
        let (one_bytes, one_position) = feed(&mut engine(&translations), &entries, 1);
        assert!(
            bytes == one_bytes && position == one_position,
            "{name}: batches and single blocks differ ({} bytes at {position}, {} at {one_position})",
            bytes.len(),
            one_bytes.len()
        );
        times.sort_by(f64::total_cmp);
        let (best, worst) = (times[0], times[RUNS - 1]);
        let per_block = |s: f64| s * 1e9 / blocks as f64;
        let per_insn = best / position.max(1) as f64;
        println!(
            "| {name} | {blocks} | {:.1} | {:.2}–{:.2} | {:.2} | {:.2} | {:.1}× |",
            position as f64 / blocks as f64,
            per_block(best),
            per_block(worst),
            per_insn * 1e9,
            qemu_per_insn * 1e9,
            per_insn / qemu_per_insn
        );
    }
}

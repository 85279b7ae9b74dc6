//! What checking a recording's seal costs (issue 38): on the largest recordings the benchmarks
//! make (`sha256sum` and `python3` under the qemu backend, about 1e9 instructions each, as
//! `replay_scale` makes them) and on one with a trace of gigabytes (`sort --parallel=1` of
//! 10 MB of text, about 2e9 instructions), the time `rtit replay --no-gdb` takes until it listens, and
//! `rtit info --decode`, on the sealed recording and on a copy of it without its seal (as an
//! older rtit wrote recordings: nothing is checked against hashes), alternating, three times
//! each; and what sealing costs at the end of `rtit record` (every file hashed).
//!
//! Needs qemu-x86_64 and a release build (`cargo build --release`). Run with
//! `cargo bench --bench integrity`; `RTIT_INTEGRITY_SIZE=1e8` picks a smaller size (the sort
//! input shrinks with it).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use rtit_replay_core::recording::{seal, Recording};

#[path = "common/recordings.rs"]
mod recordings;

/// A copy of `rec` as an older rtit wrote it: its files linked, its manifest without a seal.
fn unsealed_copy(rec: &Path) -> PathBuf {
    let copy = rec.with_file_name(format!("{}-unsealed", rec.file_name().expect("name").to_string_lossy()));
    let _ = std::fs::remove_dir_all(&copy);
    let status = Command::new("cp").arg("-al").arg(rec).arg(&copy).status().expect("cp");
    assert!(status.success());
    let manifest = copy.join("manifest.json");
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).expect("manifest")).expect("json");
    doc.as_object_mut().expect("an object").remove("seal");
    doc["version"] = 2.into();
    // A new file, not the one linked to the sealed recording's.
    std::fs::remove_file(&manifest).expect("unlink");
    std::fs::write(&manifest, serde_json::to_vec_pretty(&doc).expect("json")).expect("write");
    let _ = std::fs::remove_file(copy.join("timeline.cache"));
    copy
}

/// Seconds from the start of `rtit replay --no-gdb` on `rec` until it listens (with no
/// timeline stored: it decodes in the background, after waiting a moment for a short decode).
fn listening(rec: &Path) -> f64 {
    let _ = std::fs::remove_file(rec.join("timeline.cache"));
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["replay", "--no-gdb", "--port", "0"])
        .arg(rec)
        .stderr(Stdio::piped())
        .spawn()
        .expect("rtit replay");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let line = lines
        .find(|l| l.as_ref().is_ok_and(|l| l.starts_with("listening on ")))
        .is_some();
    let secs = started.elapsed().as_secs_f64();
    assert!(line, "rtit replay listens");
    let _ = child.kill();
    let _ = child.wait();
    secs
}

/// Seconds `rtit info --decode` takes on `rec`.
fn info_decode(rec: &Path) -> f64 {
    let started = Instant::now();
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["info", "--decode"])
        .arg(rec)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit info");
    assert!(status.success());
    started.elapsed().as_secs_f64()
}

fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    format!("{lo:.2}–{hi:.2}")
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("integrity");
    std::fs::create_dir_all(&dir).expect("dir");
    let n: f64 = std::env::var("RTIT_INTEGRITY_SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1e9);
    println!("| recording | trace | listening, sealed | listening, no seal | info --decode, sealed | info --decode, no seal | sealing (all files) |");
    println!("|---|---|---|---|---|---|---|");
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/librtit_qemu_plugin.so");
    assert!(plugin.is_file(), "build the plugin first: cargo build --release");
    for program in ["sha256sum", "python3", "sort"] {
        let rec = recordings::recording(&dir, &plugin, program, n);
        let unsealed = unsealed_copy(&rec);
        let manifest = Recording::open(&rec).expect("recording").manifest;
        let mut cols: Vec<Vec<f64>> = vec![Vec::new(); 5];
        for _ in 0..3 {
            cols[0].push(listening(&rec));
            cols[1].push(listening(&unsealed));
            cols[2].push(info_decode(&rec));
            cols[3].push(info_decode(&unsealed));
            let started = Instant::now();
            seal::seal(&rec).expect("seal");
            cols[4].push(started.elapsed().as_secs_f64());
        }
        println!(
            "| {program}, {} instructions | {} MB | {} s | {} s | {} s | {} s | {} s |",
            manifest.instructions,
            manifest.trace_bytes / 1_000_000,
            range(&cols[0]),
            range(&cols[1]),
            range(&cols[2]),
            range(&cols[3]),
            range(&cols[4]),
        );
        let _ = std::fs::remove_dir_all(&unsealed);
    }
}

//! What following execve costs (issue 43), side by side in one run: recording a program
//! directly, and through a wrapper that `exec`s it (`sh -c 'exec …'`, and a real pyenv shim
//! where PATH has one), with the qemu backend; beside them the same commands run natively and
//! the program under plain `qemu-x86_64` (which runs a wrapper's program natively after its
//! execve, so it has no wrapper row). Five runs each, interleaved; the range and the number of
//! programs the recording holds.
//!
//! Needs qemu-x86_64 and a release build of the plugin (`cargo build --release`). Run with
//! `cargo bench --bench exec`.

use std::path::{Path, PathBuf};
use std::process::Command;

use rtit_replay_core::recording::{EndState, Recording};

#[path = "common/timing.rs"]
mod timing;
use timing::time;

const RUNS: usize = 5;

fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::MAX, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    format!("{lo:.3}–{hi:.3} s")
}

/// How many programs the recording at `out` holds, and their instructions.
fn programs(out: &Path) -> (usize, u64) {
    let mut rec = Recording::open(out).expect("recording");
    let (mut n, mut insns) = (1, rec.manifest.instructions);
    while let EndState::Exec { next: Some(next), .. } = &rec.manifest.end {
        rec = Recording::open(&rec.dir.join(next)).expect("next recording");
        n += 1;
        insns += rec.manifest.instructions;
    }
    (n, insns)
}

fn main() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("exec_bench");
    std::fs::create_dir_all(&dir).expect("dir");
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/librtit_qemu_plugin.so");
    assert!(plugin.is_file(), "build the plugin first: cargo build --release");
    let python = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .expect("python3");
    let py = python.display().to_string();
    let shim = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
        .filter(|p| std::fs::read_to_string(p).is_ok_and(|t| t.starts_with("#!") && t.contains("pyenv")));
    let mut rows: Vec<(&str, Vec<String>, bool)> = vec![
        ("true", vec!["/bin/true".into()], true),
        (
            "sh -c 'exec true'",
            vec!["/bin/sh".into(), "-c".into(), "exec /bin/true".into()],
            false,
        ),
        (
            "python3 -S -c pass",
            vec![py.clone(), "-S".into(), "-c".into(), "pass".into()],
            true,
        ),
        (
            "sh -c 'exec python3 -S -c pass'",
            vec!["/bin/sh".into(), "-c".into(), format!("exec {py} -S -c pass")],
            false,
        ),
    ];
    if let Some(shim) = &shim {
        rows.push((
            "pyenv shim python3 -S -c pass",
            vec![shim.display().to_string(), "-S".into(), "-c".into(), "pass".into()],
            false,
        ));
    }
    println!("| command | programs | instructions | native | plain qemu-x86_64 | rtit record |");
    println!("|---|---|---|---|---|---|");
    let out = dir.join("rec");
    for (name, argv, direct) in rows {
        let (mut native, mut qemu, mut rtit) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..RUNS {
            native.push(time(Command::new(&argv[0]).args(&argv[1..])));
            if direct {
                qemu.push(time(Command::new("qemu-x86_64").args(&argv)));
            }
            let _ = std::fs::remove_dir_all(&out);
            rtit.push(time(
                Command::new(env!("CARGO_BIN_EXE_rtit"))
                    .env("RTIT_QEMU_PLUGIN", &plugin)
                    .args(["record", "--backend", "qemu", "--out"])
                    .arg(&out)
                    .arg("--")
                    .args(&argv),
            ));
        }
        let (n, insns) = programs(&out);
        let qemu = if direct { range(&qemu) } else { "—".into() };
        println!(
            "| {name} | {n} | {insns} | {} | {qemu} | {} |",
            range(&native),
            range(&rtit)
        );
    }
}

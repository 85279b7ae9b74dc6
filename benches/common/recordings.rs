//! The recordings of real programs the benchmarks share (`replay_scale`, `integrity`,
//! `values_at_once`): made
//! once under the qemu backend and kept in the benchmark's directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rtit_replay_core::recording::Recording;

/// Instructions sha256sum runs per MiB of input, about.
const PER_MIB: f64 = 55.5e6;
/// Instructions python3 runs per pass of the loop below, and to start and end, about.
const PER_PASS: f64 = 21_000.0;
const PYTHON_START: f64 = 30e6;

/// A recording of `program` (`sha256sum`, `python3` or `sort`) running about `n`
/// instructions under the qemu backend with `plugin`, made once in `dir` and kept, apart
/// for each QEMU version `rtit record` takes (`$RTIT_QEMU`, or the newer of PATH's and the
/// one `rtit build-qemu` built): anchors differ between 7.2 and later ones.
pub fn recording(dir: &Path, plugin: &Path, program: &str, n: f64) -> PathBuf {
    let version = rtit_recorder::qemu::find::find_qemu(None)
        .ok()
        .and_then(|q| rtit_recorder::qemu::find::version(&q))
        .map_or_else(
            || "unknown".to_string(),
            |v| v.iter().map(u64::to_string).collect::<Vec<_>>().join("."),
        );
    let dir = dir.join(format!("qemu-{version}"));
    std::fs::create_dir_all(&dir).expect("the recordings' directory");
    let out = dir.join(format!("{program}-{n:e}"));
    // One made before anchors were taken (past 2^25 instructions) is made again.
    let anchored = |r: &Recording| r.manifest.instructions < 1 << 25 || r.anchors().is_ok_and(|a| a.is_some());
    if Recording::open(&out).is_ok_and(|r| r.sealed() && anchored(&r)) {
        return out;
    }
    let _ = std::fs::remove_dir_all(&out);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rtit"));
    cmd.env("RTIT_QEMU_PLUGIN", plugin)
        .args(["record", "--backend", "qemu", "--out"])
        .arg(&out)
        .arg("--");
    match program {
        "sha256sum" => {
            let input = dir.join(format!("input-{n:e}"));
            std::fs::write(&input, vec![0u8; (n / PER_MIB * f64::from(1 << 20)) as usize]).expect("input");
            cmd.arg("/usr/bin/sha256sum").arg(&input);
        }
        "sort" => {
            // Lines of 16 hex digits and a word, in pseudo-random order: 13.75 MB at 1e9.
            let input = dir.join(format!("lines-{n:e}"));
            let mut x: u64 = 12345;
            let text: String = (0..(n / 1600.0) as u64)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    format!("{:016x} line\n", x >> 11)
                })
                .collect();
            std::fs::write(&input, text).expect("input");
            cmd.args(["/usr/bin/sort", "--parallel=1", "-o", "/dev/null"])
                .arg(&input);
        }
        "python3" => {
            let passes = ((n - PYTHON_START) / PER_PASS).max(1.0) as u64;
            cmd.args([
                "/usr/bin/python3",
                "-c",
                &format!("import json\ns = 0\nfor i in range({passes}): s += len(json.dumps({{'a': i, 'b': [i, i * 2]}}))\nprint(s)"),
            ]);
        }
        _ => panic!("a recording of sha256sum, python3 or sort, not {program}"),
    }
    let status = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.success());
    out
}

//! Timing a command from outside, for the benchmarks that run whole commands side by side
//! (`qemu_record`, `exec`).

use std::process::{Command, Stdio};
use std::time::Instant;

/// Seconds `cmd` takes, which must succeed (its output thrown away).
pub fn time(cmd: &mut Command) -> f64 {
    let started = Instant::now();
    let status = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status().expect("run");
    assert!(status.success(), "{cmd:?}: {status}");
    started.elapsed().as_secs_f64()
}

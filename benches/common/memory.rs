//! A process's peak resident memory, for the benchmarks that report it (`replay_scale`,
//! `values_at_once`).

/// The peak resident memory (VmHWM) of process `pid`, in MiB; NaN if it cannot be read.
pub fn peak_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN);
    kib / 1024.0
}

//! `rtit check-values [REC]`: compares the state layer's register values with the registers
//! the recorder sampled (`rtit record --truth`), per register: known and right, known and
//! wrong, unknown. Any wrong value is an error: the state layer must never show one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use rtit_replay_core::session::Session;
use rtit_replay_core::state::Why;

use super::recordings;

/// Arguments of `rtit check-values`.
#[derive(Debug, Args)]
pub struct CheckValuesArgs {
    /// The recording, made with `rtit record --truth` (default: the latest).
    #[arg(value_name = "REC")]
    recording: Option<PathBuf>,
    /// Print every wrong value, not just the first ten.
    #[arg(long)]
    verbose: bool,
}

/// Per-register tallies.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    right: u64,
    wrong: u64,
    unknown: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.right += other.right;
        self.wrong += other.wrong;
        self.unknown += other.unknown;
    }

    fn line(&self, name: &str) -> String {
        let total = (self.right + self.wrong + self.unknown).max(1);
        format!(
            "{name:<10} {:>8} {:>8} {:>8} {:>8.1}%",
            self.right,
            self.wrong,
            self.unknown,
            100.0 * self.right as f64 / total as f64
        )
    }
}

/// Why the unknown GPR samples are unknown (the forward pass's cause, else the backward's).
#[derive(Debug, Default)]
struct Causes {
    by_kind: BTreeMap<&'static str, u64>,
    by_cause: BTreeMap<String, u64>,
    /// The earliest position each cause struck at (where to look with `monitor goto`).
    first: BTreeMap<String, u64>,
}

impl Causes {
    fn add(&mut self, why: Option<Why>) {
        let (kind, detail) = match why {
            Some(w) => (w.cause.kind(), w.cause.to_string()),
            None => ("conflict between the passes", "conflict".to_string()),
        };
        *self.by_kind.entry(kind).or_default() += 1;
        if let Some(w) = why {
            let first = self.first.entry(detail.clone()).or_insert(w.position);
            *first = (*first).min(w.position);
        }
        *self.by_cause.entry(detail).or_default() += 1;
    }

    fn print(&self, unknown: u64, limit: usize) {
        if unknown == 0 {
            return;
        }
        let share = |n: u64| 100.0 * n as f64 / unknown as f64;
        fn sorted<K: std::fmt::Display>(m: &BTreeMap<K, u64>) -> Vec<(u64, String)> {
            let mut v: Vec<_> = m.iter().map(|(k, &n)| (n, k.to_string())).collect();
            v.sort_by(|a, b| b.cmp(a));
            v
        }
        println!("why GPR samples are unknown (forward pass's cause)");
        for (n, kind) in sorted(&self.by_kind) {
            println!("  {kind:<40} {n:>8} {:>6.1}%", share(n));
        }
        println!("largest causes (and the first position each struck at)");
        for (n, cause) in sorted(&self.by_cause).into_iter().take(limit) {
            let first = self.first.get(&cause).map_or(String::new(), |p| format!("  @{p}"));
            println!("  {cause:<60} {n:>8} {:>6.1}%{first}", share(n));
        }
    }
}

/// The registers compared, in gdb's order.
const NAMES: [&str; 26] = [
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
    "rip", "eflags", "cs", "ss", "ds", "es", "fs", "gs", "fs_base", "gs_base",
];

/// Compares xmm0–15 (all 16 bytes known and right, or unknown) and MXCSR where the sample
/// has them.
fn compare_vectors(
    session: &mut Session,
    sample: &rtit_replay_core::recording::TruthSample,
    (xmm, mxcsr): &mut (Tally, Tally),
    wrong: &mut Vec<String>,
) -> Result<()> {
    let hex = |name: &str, v: &str| {
        u128::from_str_radix(v.trim_start_matches("0x"), 16)
            .with_context(|| format!("truth at position {}: {name} = {v:?}", sample.position))
    };
    for i in 0..16 {
        let name = format!("xmm{i}");
        let Some(truth) = sample.registers.get(&name) else {
            continue;
        };
        let truth = hex(&name, truth)?.to_le_bytes();
        let got = session.vector_register(i);
        if got[..16].iter().zip(truth).any(|(g, t)| g.is_some_and(|g| g != t)) {
            xmm.wrong += 1;
            let shown: String = got[..16]
                .iter()
                .rev()
                .map(|b| b.map_or("??".to_string(), |b| format!("{b:02x}")))
                .collect();
            wrong.push(format!(
                "position {} (rip {:#x}): {name} is {:#x}, the state layer says 0x{shown}",
                sample.position,
                session.pc(),
                u128::from_le_bytes(truth)
            ));
        } else if got[..16].iter().all(Option::is_some) {
            xmm.right += 1;
        } else {
            xmm.unknown += 1;
        }
    }
    if let Some(truth) = sample.registers.get("mxcsr") {
        let truth = hex("mxcsr", truth)? as u32;
        match session.mxcsr() {
            None => mxcsr.unknown += 1,
            Some(v) if v == truth => mxcsr.right += 1,
            Some(v) => {
                mxcsr.wrong += 1;
                wrong.push(format!(
                    "position {} (rip {:#x}): mxcsr is {truth:#x}, the state layer says {v:#x}",
                    sample.position,
                    session.pc()
                ));
            }
        }
    }
    Ok(())
}

/// Runs `rtit check-values`.
pub fn run(args: &CheckValuesArgs) -> Result<()> {
    let rec = recordings::open(args.recording.as_deref())?;
    let samples = rec.truth_registers()?.with_context(|| {
        format!(
            "{}: no sampled registers; record with `rtit record --truth`",
            rec.dir.display()
        )
    })?;
    let started = Instant::now();
    let mut session = Session::open(rec.clone()).context("cannot decode the recording")?;
    let opened = started.elapsed();
    let mut tallies = vec![Tally::default(); NAMES.len()];
    let mut wrong = Vec::new();
    let mut compared = 0;
    let mut causes = Causes::default();
    let mut vectors = (Tally::default(), Tally::default());
    for sample in &samples {
        if sample.position > session.last() {
            continue;
        }
        compared += 1;
        session.set_position(sample.position);
        compare_vectors(&mut session, sample, &mut vectors, &mut wrong)?;
        for (i, name) in NAMES.iter().enumerate() {
            let Some(truth) = sample.registers.get(*name) else {
                continue;
            };
            let truth = u64::from_str_radix(truth.trim_start_matches("0x"), 16)
                .with_context(|| format!("truth at position {}: {name} = {truth:?}", sample.position))?;
            match session.register(name) {
                None => {
                    tallies[i].unknown += 1;
                    if i < 16 {
                        let why = session.why_register(name).and_then(|(f, b)| f.or(b));
                        causes.add(why);
                    }
                }
                Some(v) if v == truth => tallies[i].right += 1,
                Some(v) => {
                    tallies[i].wrong += 1;
                    wrong.push(format!(
                        "position {} (rip {:#x}): {name} is {truth:#x}, the state layer says {v:#x}",
                        sample.position,
                        session.pc()
                    ));
                }
            }
        }
    }
    let elapsed = started.elapsed();
    let (xmm, mxcsr) = (vectors.0, vectors.1);
    println!(
        "{} samples of {} positions compared ({} backend, {})",
        compared,
        session.len(),
        rec.manifest.backend,
        rec.dir.display()
    );
    println!(
        "{:<10} {:>8} {:>8} {:>8} {:>9}",
        "register", "right", "wrong", "unknown", "right"
    );
    let mut gprs = Tally::default();
    for (i, name) in NAMES.iter().enumerate() {
        println!("{}", tallies[i].line(name));
        if i < 16 {
            gprs.add(tallies[i]);
        }
    }
    println!("{}", gprs.line("all GPRs"));
    // The qemu backend's samples carry xmm0–15 and MXCSR too.
    if xmm.right + xmm.wrong + xmm.unknown > 0 {
        println!("{}", xmm.line("xmm0-15"));
        println!("{}", mxcsr.line("mxcsr"));
    }
    causes.print(gprs.unknown, if args.verbose { usize::MAX } else { 12 });
    let stats = session.values().stats();
    let unmodelled = session.values().unmodelled();
    if !unmodelled.is_empty() {
        println!("instructions nobody modelled, as often as the forward pass met them");
        let limit = if args.verbose { usize::MAX } else { 12 };
        for (m, n) in unmodelled.iter().take(limit) {
            println!("  {:<20} {n:>10}", format!("{m:?}").to_lowercase());
        }
    }
    println!(
        "decode {:.1} ms; values {:.1} ms ({} forward and {} backward steps, {} checkpoints, {} conflicts)",
        opened.as_secs_f64() * 1e3,
        (elapsed - opened).as_secs_f64() * 1e3,
        stats.forward_steps,
        stats.backward_steps,
        stats.checkpoints,
        stats.conflicts
    );
    let limit = if args.verbose { usize::MAX } else { 10 };
    for w in wrong.iter().take(limit) {
        println!("WRONG {w}");
    }
    if !wrong.is_empty() {
        bail!("{} wrong values", wrong.len());
    }
    if stats.conflicts > 0 {
        bail!("{} conflicts between the forward and backward passes", stats.conflicts);
    }
    Ok(())
}

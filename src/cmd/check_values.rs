//! `rtit check-values [REC]`: compares the state layer's register values with the registers
//! the recorder sampled (`rtit record --truth`), per register: known and right, known and
//! wrong, unknown. Any wrong value is an error: the state layer must never show one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use rtit_replay_core::session::Session;
use rtit_replay_core::state::vector::named::Named;
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
    /// Leave the recording's anchors unread: the values from the passes' chains, as
    /// without anchors (to compare what each knows).
    #[arg(long, hide = true)]
    ignore_anchors: bool,
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

/// Tallies of the vector state: xmm0–15, the upper parts of ymm/zmm0–15, zmm16–31, the
/// opmasks and MXCSR, where the samples carry them.
#[derive(Debug, Default)]
struct Vectors {
    xmm: Tally,
    upper: Tally,
    high: Tally,
    opmasks: Tally,
    mxcsr: Tally,
}

impl Vectors {
    fn print(&self) {
        for (t, name) in [
            (self.xmm, "xmm0-15"),
            (self.upper, "ymm/zmm hi"),
            (self.high, "zmm16-31"),
            (self.opmasks, "k0-7"),
            (self.mxcsr, "mxcsr"),
        ] {
            if t.right + t.wrong + t.unknown > 0 {
                println!("{}", t.line(name));
            }
        }
    }
}

/// Counts one compared part: right if every byte is known and right, wrong if a known byte is
/// not, else unknown.
fn tally_bytes(t: &mut Tally, got: &[Option<u8>], truth: &[u8]) -> bool {
    if got.iter().zip(truth).any(|(g, t)| g.is_some_and(|g| g != *t)) {
        t.wrong += 1;
        return false;
    }
    if got.iter().all(Option::is_some) {
        t.right += 1;
    } else {
        t.unknown += 1;
    }
    true
}

fn shown(bytes: &[Option<u8>]) -> String {
    let digits: String = bytes
        .iter()
        .rev()
        .map(|b| b.map_or("??".to_string(), |b| format!("{b:02x}")))
        .collect();
    format!("0x{digits}")
}

/// Compares the vector and opmask registers (each part all known and right, or unknown) and
/// MXCSR where the sample has them.
fn compare_vectors(
    session: &mut Session,
    sample: &rtit_replay_core::recording::TruthSample,
    t: &mut Vectors,
    wrong: &mut Vec<String>,
) -> Result<()> {
    for (name, value) in &sample.registers {
        let Some(n) = Named::parse(name) else { continue };
        let truth = n
            .value(value)
            .with_context(|| format!("truth at position {}: {name} = {value:?}", sample.position))?;
        let got: Vec<Option<u8>> = match n {
            Named::Vector { index, bytes } => session.vector_register(index)[..bytes].to_vec(),
            Named::Opmask(i) => match session.opmask(i) {
                Some(v) => v.to_le_bytes().map(Some).to_vec(),
                None => vec![None; 8],
            },
        };
        let right = match n {
            Named::Vector { index, bytes } if index < 16 => {
                let low = tally_bytes(&mut t.xmm, &got[..16], &truth[..16]);
                let upper = bytes <= 16 || tally_bytes(&mut t.upper, &got[16..], &truth[16..]);
                low && upper
            }
            Named::Vector { .. } => tally_bytes(&mut t.high, &got, &truth),
            Named::Opmask(_) => tally_bytes(&mut t.opmasks, &got, &truth),
        };
        if !right {
            wrong.push(format!(
                "position {} (rip {:#x}): {name} is {value}, the state layer says {}",
                sample.position,
                session.pc(),
                shown(&got)
            ));
        }
    }
    if let Some(truth) = sample.registers.get("mxcsr") {
        let truth = u32::from_str_radix(truth.trim_start_matches("0x"), 16)
            .with_context(|| format!("truth at position {}: mxcsr = {truth:?}", sample.position))?;
        match session.mxcsr() {
            None => t.mxcsr.unknown += 1,
            Some(v) if v == truth => t.mxcsr.right += 1,
            Some(v) => {
                t.mxcsr.wrong += 1;
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
    let mut rec = recordings::open(args.recording.as_deref())?;
    if args.ignore_anchors {
        rec = rec.ignoring_anchors();
    }
    let samples = rec.truth_registers()?.with_context(|| {
        format!(
            "{}: no sampled registers; record with `rtit record --truth`",
            rec.dir.display()
        )
    })?;
    let started = Instant::now();
    let mut session = Session::open(rec.clone()).context("cannot decode the recording")?;
    let opened = started.elapsed();
    // The final answers everywhere: a long history's are worked out in the background.
    session.prepare(|_, _| {});
    let mut tallies = vec![Tally::default(); NAMES.len()];
    let mut wrong = Vec::new();
    let mut compared = 0;
    let mut causes = Causes::default();
    let mut vectors = Vectors::default();
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
    vectors.print();
    causes.print(gprs.unknown, if args.verbose { usize::MAX } else { 12 });
    let stats = session.values_stats();
    let unmodelled = session.values().map(|v| v.unmodelled()).unwrap_or_default();
    if !unmodelled.is_empty() {
        println!("instructions nobody modelled, as often as the forward pass met them");
        let limit = if args.verbose { usize::MAX } else { 12 };
        for (m, n) in unmodelled.iter().take(limit) {
            println!("  {:<20} {n:>10}", format!("{m:?}").to_lowercase());
        }
    }
    println!(
        "decode {:.1} ms; values {:.1} ms ({} forward and {} backward steps, {} checkpoints holding {:.1} MiB, {} conflicts)",
        opened.as_secs_f64() * 1e3,
        (elapsed - opened).as_secs_f64() * 1e3,
        stats.forward_steps,
        stats.backward_steps,
        stats.checkpoints,
        stats.bytes as f64 / (1 << 20) as f64,
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

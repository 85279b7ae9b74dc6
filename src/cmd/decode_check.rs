//! `rtit info --decode`: decodes a whole recording without keeping it, counting what the
//! decoder met: a check that a recording decodes cleanly, and the decoder's speed on it.

use std::time::Instant;

use anyhow::Result;
use rtit_replay_core::flow::{EventKind, FlowEvent, FlowSink};
use rtit_replay_core::recording::Recording;
use rtit_replay_core::timeline::parallel::{self, Split};

/// What decoding a trace met.
#[derive(Debug, Default)]
struct Tally {
    instructions: u64,
    interrupts: u64,
    gaps: u64,
    errors: u64,
    first_errors: Vec<String>,
    /// Instructions that ran but are not in the history (a spin at the end).
    unshown: u64,
    /// Whether the program spun an unknown number of times somewhere.
    spun: bool,
    notes: Vec<String>,
}

impl FlowSink for Tally {
    fn run(&mut self, _ip: u64, count: u64) {
        self.instructions += count;
    }

    fn event(&mut self, event: FlowEvent) {
        match event.kind {
            EventKind::Interrupt { .. } => self.interrupts += 1,
            EventKind::Gap { .. } | EventKind::Lost { .. } => self.gaps += 1,
            EventKind::Spins { instructions, .. } => {
                match instructions {
                    Some(n) => self.unshown += n,
                    None => self.spun = true,
                }
                if self.notes.len() < 5 {
                    self.notes.push(format!("at position {}: {event}", event.position));
                }
            }
            EventKind::Error { .. } => {
                self.errors += 1;
                if self.first_errors.len() < 5 {
                    self.first_errors
                        .push(format!("at position {}: {event}", event.position));
                }
            }
            _ => {}
        }
    }
}

/// Decodes `rec` on `threads` (default every core) and prints one summary line (and the
/// first errors, if any); with `verify`, checks the history against a plain decode's. An
/// incomplete recording is an error after the summary, unless `partial`.
pub fn run(rec: &Recording, partial: bool, threads: Option<usize>, verify: bool) -> Result<()> {
    let space = rec.address_space()?;
    let trace = rec.trace()?;
    let mut tally = Tally::default();
    let gaps = rec.gaps();
    let input = rec.decode_input(&trace, &space, &gaps);
    let split = match threads {
        Some(n) if n <= 1 => Split::sequential(),
        Some(n) => Split {
            threads: n,
            ..Split::all_cores()
        },
        None => Split::all_cores(),
    };
    let started = Instant::now();
    let built = parallel::build(&input, split, &mut |_| {});
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    tally.instructions = built.timeline.len();
    for e in built.timeline.events() {
        tally.event(e.clone());
    }
    let spinning = match tally.unshown {
        0 => String::new(),
        n => format!(" (and {n} in a spin loop at the end, not shown)"),
    };
    let n = |count: u64, what: &str| format!("{count} {what}{}", if count == 1 { "" } else { "s" });
    println!(
        "decoded       {} instructions{spinning}, {}, {}, {} in {:.1} ms ({:.1} M instructions/s, {:.1} MiB/s of trace)",
        tally.instructions,
        n(tally.errors, "error"),
        n(tally.gaps, "gap"),
        n(tally.interrupts, "interrupt"),
        secs * 1e3,
        tally.instructions as f64 / secs / 1e6,
        trace.len() as f64 / secs / (1 << 20) as f64
    );
    println!(
        "              on {} stretch{} of the trace, {} joined where they met",
        built.stretches,
        if built.stretches == 1 { "" } else { "es" },
        built.joins
    );
    for e in tally.first_errors.iter().chain(&tally.notes) {
        println!("  {e}");
    }
    if verify {
        let started = Instant::now();
        let plain = parallel::build(&input, Split::sequential(), &mut |_| {});
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        if let Some(d) = built.timeline.first_difference(&plain.timeline) {
            anyhow::bail!("the history decoded in parallel differs from one plain decode's: {d}");
        }
        println!(
            "verified      the same history as one plain decode ({:.1} ms, {:.1} M instructions/s)",
            secs * 1e3,
            plain.timeline.len() as f64 / secs / 1e6
        );
    }
    let ran = tally.instructions + tally.unshown;
    super::recordings::complete_or_partial(rec, trace.len(), ran, tally.spun, partial)
}

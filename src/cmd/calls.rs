//! `rtit calls`: the function-call history, one line per function segment, indented by call
//! depth, with its position range and instruction count, like GDB's
//! `record function-call-history /ilc`.
//!
//! A segment ends at a call (the next is one deeper), a return (one shallower), a far
//! transfer or an event (same depth), or where execution moves to another function without
//! a call (a tail jump). Depths are shifted so the shallowest segment is at 0: a trace may
//! start deep in the stack and return above where it started.

use std::io::{self, BufWriter, Write};

use anyhow::Result;
use clap::Args;
use rtit_replay_core::cofi::Cofi;
use serde::Serialize;

use super::history::{Entry, History, TraceArgs};

/// Arguments of `rtit calls`.
#[derive(Debug, Args)]
pub struct CallsArgs {
    #[command(flatten)]
    trace: TraceArgs,
    /// One JSON object per segment.
    #[arg(long)]
    json: bool,
}

/// A run of instructions in one function between calls, returns and events.
#[derive(Debug, Serialize)]
struct Segment {
    depth: i64,
    function: String,
    first: u64,
    last: u64,
    count: u64,
    /// Source file and line of the first instruction, where DWARF says.
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_line: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_line: Option<u32>,
}

fn function_of(history: &History, ip: u64) -> String {
    match history.space.locate(ip) {
        Some(loc) => match &loc.symbol {
            Some(name) => name.clone(),
            None => format!("?? ({loc})"),
        },
        None => format!("?? ({ip:#x})"),
    }
}

fn segments(history: &History) -> Result<Vec<Segment>> {
    let mut out: Vec<Segment> = Vec::new();
    let mut depth = 0i64;
    // Set when the current segment is over: the depth of the next one.
    let mut next_depth: Option<i64> = Some(0);
    for entry in history.entries(0..u64::MAX) {
        let insn = match entry? {
            Entry::Event(_) => {
                next_depth.get_or_insert(depth);
                continue;
            }
            Entry::Insn(i) => i,
        };
        let ip = insn.insn.ip();
        let function = function_of(history, ip);
        let line = history.space.source_line(ip);
        let new_depth = match (next_depth.take(), out.last()) {
            (Some(d), _) => Some(d),
            (None, Some(seg)) if seg.function != function => Some(depth),
            (None, None) => Some(depth),
            (None, Some(_)) => None,
        };
        match (new_depth, out.last_mut()) {
            (None, Some(seg)) => {
                seg.last = insn.position;
                seg.count += 1;
                if let Some(l) = &line {
                    seg.last_line = Some(l.line);
                }
            }
            (d, _) => {
                depth = d.unwrap_or(depth);
                out.push(Segment {
                    depth,
                    function,
                    first: insn.position,
                    last: insn.position,
                    count: 1,
                    file: line.as_ref().map(|l| l.file.clone()),
                    first_line: line.as_ref().map(|l| l.line),
                    last_line: line.as_ref().map(|l| l.line),
                });
            }
        }
        next_depth = match insn.cofi {
            Cofi::DirectCall | Cofi::IndirectCall => Some(depth + 1),
            Cofi::Return => Some(depth - 1),
            Cofi::Far(_) => Some(depth),
            _ => None,
        };
    }
    let min = out.iter().map(|s| s.depth).min().unwrap_or(0);
    for s in &mut out {
        s.depth -= min;
    }
    Ok(out)
}

/// Runs `rtit calls`.
pub fn run(args: &CallsArgs) -> Result<()> {
    let history = args.trace.load()?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for (n, s) in segments(&history)?.iter().enumerate() {
        if args.json {
            serde_json::to_writer(&mut out, s)?;
            writeln!(out)?;
        } else {
            let indent = "  ".repeat(s.depth as usize);
            write!(
                out,
                "{:>6}\t{indent}{}\tinst {},{} ({})",
                n + 1,
                s.function,
                s.first,
                s.last,
                s.count
            )?;
            if let (Some(file), Some(a), Some(b)) = (&s.file, s.first_line, s.last_line) {
                write!(out, "\tat {file}:{a},{b}")?;
            }
            writeln!(out)?;
        }
    }
    out.flush()?;
    Ok(())
}

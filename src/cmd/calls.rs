//! `rtit calls`: the function-call history, one line per function segment, indented by call
//! depth, with its position range and instruction count, like GDB's
//! `record function-call-history /ilc`.
//!
//! A segment ends at a call (the next is one deeper), a return (one shallower), a far
//! transfer or an event (same depth), or where execution moves to another function without
//! a call (a tail jump). Depths are shifted so the shallowest segment is at 0: a trace may
//! start deep in the stack and return above where it started.
//!
//! Code without symbols (a stripped program) is grouped by function entry: a call's target
//! starts a function named `?? (FILE+OFFSET)` of that entry, which lasts until it returns;
//! where the trace starts (or returns) into code whose entry it never saw, the first address
//! seen stands for it. A jump between unnamed functions is not told apart from a jump inside
//! one.

use std::io::{self, BufWriter, Write};
use std::ops::Range;

use anyhow::Result;
use clap::Args;
use rtit_replay_core::cofi::Cofi;
use serde::Serialize;

use super::history::{positions, Entry, History, TraceArgs};

/// Arguments of `rtit calls`.
#[derive(Debug, Args)]
pub struct CallsArgs {
    #[command(flatten)]
    trace: TraceArgs,
    /// One JSON object per segment.
    #[arg(long)]
    json: bool,
    /// Only the segments of positions A to B (B excluded), cut to that range; either side
    /// may be left out. Depths stay those of the whole history.
    #[arg(long, value_name = "A..B")]
    range: Option<String>,
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

/// The function `ip` is in, by its symbol, or by the entry of the frame it runs in.
fn function_of(history: &History, ip: u64, entry: Option<&str>) -> String {
    match history.space.locate(ip) {
        Some(loc) => match &loc.symbol {
            Some(name) => name.clone(),
            None => entry.map_or_else(|| format!("?? ({loc})"), str::to_string),
        },
        None => entry.map_or_else(|| format!("?? ({ip:#x})"), str::to_string),
    }
}

/// The name of a function without a symbol, by its entry.
fn entry_name(history: &History, ip: u64) -> Option<String> {
    match history.space.locate(ip) {
        Some(loc) if loc.symbol.is_some() => None,
        Some(loc) => Some(format!("?? ({loc})")),
        None => Some(format!("?? ({ip:#x})")),
    }
}

fn segments(history: &History, range: &Range<u64>) -> Result<Vec<Segment>> {
    let mut out: Vec<Segment> = Vec::new();
    let mut depth = 0i64;
    // Set when the current segment is over: the depth of the next one.
    let mut next_depth: Option<i64> = Some(0);
    // The entry of each unnamed frame, innermost last (`None`: not seen, or named).
    let mut entries: Vec<Option<String>> = vec![None];
    let mut pending_call = false;
    let mut pending_return = false;
    let mut min_depth = 0i64;
    for entry in history.entries(0..u64::MAX) {
        let insn = match entry? {
            Entry::Event(_) => {
                next_depth.get_or_insert(depth);
                continue;
            }
            Entry::Insn(i) => i,
        };
        let ip = insn.insn.ip();
        if std::mem::take(&mut pending_call) {
            entries.push(entry_name(history, ip));
        } else if std::mem::take(&mut pending_return) {
            entries.pop();
            if entries.is_empty() {
                entries.push(None);
            }
        }
        let frame = entries.last_mut().expect("one frame at least");
        if frame.is_none() {
            *frame = entry_name(history, ip);
        }
        let function = function_of(history, ip, frame.as_deref());
        let new_depth = match (next_depth.take(), out.last()) {
            (Some(d), _) => Some(d),
            (None, Some(seg)) if seg.function != function => Some(depth),
            (None, None) => Some(depth),
            (None, Some(_)) => None,
        };
        depth = new_depth.unwrap_or(depth);
        min_depth = min_depth.min(depth);
        next_depth = match insn.cofi {
            Cofi::DirectCall | Cofi::IndirectCall => {
                pending_call = true;
                Some(depth + 1)
            }
            Cofi::Return => {
                pending_return = true;
                Some(depth - 1)
            }
            Cofi::Far(_) => Some(depth),
            _ => None,
        };
        if !range.contains(&insn.position) {
            // Outside the range: no segment, but the next one in range starts afresh.
            next_depth.get_or_insert(depth);
            continue;
        }
        let line = history.space.source_line(ip);
        match (new_depth, out.last_mut()) {
            (None, Some(seg)) => {
                seg.last = insn.position;
                seg.count += 1;
                if let Some(l) = &line {
                    seg.last_line = Some(l.line);
                }
            }
            _ => out.push(Segment {
                depth,
                function,
                first: insn.position,
                last: insn.position,
                count: 1,
                file: line.as_ref().map(|l| l.file.clone()),
                first_line: line.as_ref().map(|l| l.line),
                last_line: line.as_ref().map(|l| l.line),
            }),
        }
    }
    for s in &mut out {
        s.depth -= min_depth;
    }
    Ok(out)
}

/// Runs `rtit calls`.
pub fn run(args: &CallsArgs) -> Result<()> {
    let range = positions(args.range.as_deref())?;
    let history = args.trace.load()?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for (n, s) in segments(&history, &range)?.iter().enumerate() {
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

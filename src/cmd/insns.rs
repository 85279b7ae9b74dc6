//! `rtit insns`: every executed instruction in order, with its position, address, symbol and
//! disassembly, like GDB's `record instruction-history` and libipt's ptxed; or JSON lines.

use std::io::{self, BufWriter, Write};

use anyhow::Result;
use clap::{Args, ValueEnum};
use iced_x86::{Formatter, GasFormatter, IntelFormatter};
use rtit_replay_core::flow::{EventKind, FlowEvent};
use serde::Serialize;

use super::history::{positions, Entry, TraceArgs};

/// Disassembly syntax.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Syntax {
    /// Intel (`mov rax, [rbx]`).
    Intel,
    /// AT&T, as GNU as and gdb print it (`mov (%rbx),%rax`).
    Att,
}

/// Arguments of `rtit insns`.
#[derive(Debug, Args)]
pub struct InsnsArgs {
    #[command(flatten)]
    trace: TraceArgs,
    /// One JSON object per line: instructions have "i" and "ip"; events have "event".
    #[arg(long)]
    json: bool,
    /// Only positions A to B (B excluded); either side may be left out.
    #[arg(long, value_name = "A..B")]
    range: Option<String>,
    /// Disassembly syntax.
    #[arg(long, value_enum, default_value = "intel")]
    syntax: Syntax,
}

#[derive(Serialize)]
struct InsnLine<'a> {
    i: u64,
    ip: String,
    sym: Option<String>,
    insn: &'a str,
}

#[derive(Serialize)]
struct EventLine<'a> {
    event: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<String>,
    position: u64,
    offset: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
}

fn event_line(e: &FlowEvent) -> EventLine<'_> {
    let (at, message) = match &e.kind {
        EventKind::Enabled { ip } | EventKind::Gap { ip } | EventKind::Interrupt { ip, .. } => (Some(*ip), None),
        EventKind::Disabled { ip } => (*ip, None),
        EventKind::Error { ip, message } => (*ip, Some(message.as_str())),
        EventKind::Stop | EventKind::Lost { .. } => (None, None),
        EventKind::Spins { ip, .. } => (Some(*ip), None),
    };
    EventLine {
        event: e.kind.name(),
        at: at.map(|ip| format!("{ip:#x}")),
        position: e.position,
        offset: e.offset,
        message,
    }
}

/// Runs `rtit insns`.
pub fn run(args: &InsnsArgs) -> Result<()> {
    let range = positions(args.range.as_deref())?;
    let history = args.trace.load()?;
    let mut formatter: Box<dyn Formatter> = match args.syntax {
        Syntax::Intel => Box::new(IntelFormatter::new()),
        Syntax::Att => Box::new(GasFormatter::new()),
    };
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut text = String::new();
    let result = (|| -> Result<()> {
        for entry in history.entries(range) {
            match entry? {
                Entry::Insn(i) => {
                    text.clear();
                    formatter.format(&i.insn, &mut text);
                    let ip = i.insn.ip();
                    let sym = history.space.locate(ip).map(|l| l.to_string());
                    if args.json {
                        let line = InsnLine {
                            i: i.position,
                            ip: format!("{ip:#x}"),
                            sym,
                            insn: &text,
                        };
                        serde_json::to_writer(&mut out, &line)?;
                        writeln!(out)?;
                    } else {
                        writeln!(
                            out,
                            "{:>10}  {ip:#018x}  {:<32} {text}",
                            i.position,
                            sym.unwrap_or_default()
                        )?;
                    }
                }
                // Interrupts show in the flow itself; the JSON event vocabulary is the five
                // kinds users filter on.
                Entry::Event(e) if args.json && matches!(e.kind, EventKind::Interrupt { .. }) => {}
                Entry::Event(e) if args.json => {
                    serde_json::to_writer(&mut out, &event_line(e))?;
                    writeln!(out)?;
                }
                Entry::Event(e) => writeln!(out, "{:>10}  {e}", "")?,
            }
        }
        out.flush()?;
        Ok(())
    })();
    match result {
        Err(e)
            if e.downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        other => other,
    }
}

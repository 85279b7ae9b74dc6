//! `rtit info [REC]`: a summary of a recording.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use rtit_replay_core::recording::files;
use rtit_replay_core::recording::EndState;
use rtit_replay_core::regs::ctl;

use super::recordings;

/// Arguments of `rtit info`.
#[derive(Debug, Args)]
pub struct InfoArgs {
    /// The recording (default: the latest).
    #[arg(value_name = "REC")]
    recording: Option<PathBuf>,
    /// Also decode the whole trace and report instructions, errors and gaps, and the speed.
    #[arg(long)]
    decode: bool,
    /// Threads to decode on with `--decode` (default: every core; 1: one plain decode).
    #[arg(long, value_name = "N", requires = "decode")]
    threads: Option<usize>,
    /// With `--decode`: also decode on one thread and check that both give the same history.
    #[arg(long, requires = "decode")]
    verify_parallel: bool,
    /// Report an incomplete recording (a trace cut short) as a warning, not an error.
    #[arg(long)]
    partial: bool,
}

/// Runs `rtit info`.
pub fn run(args: &InfoArgs) -> Result<()> {
    let rec = recordings::open(args.recording.as_deref())?;
    let m = &rec.manifest;
    println!("recording     {}", rec.dir.display());
    println!("command       {}", m.command.join(" "));
    println!("backend       {}", m.backend);
    println!("ended         {}", m.end);
    // The programs its execve calls ran after it, each a recording of its own: `rtit replay`
    // serves the last.
    let mut then = rec.manifest.end.clone();
    let mut dir = rec.dir.clone();
    let mut after = Vec::new();
    while let EndState::Exec { next: Some(next), .. } = then {
        dir = dir.join(next);
        match rtit_replay_core::recording::Recording::open(&dir) {
            Ok(r) => {
                let name = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
                after.push((name, format!("{} ({})", r.manifest.command.join(" "), r.manifest.end)));
                then = r.manifest.end;
            }
            Err(e) => {
                after.push((dir.display().to_string(), format!("unreadable: {e}")));
                break;
            }
        }
    }
    for (k, (name, line)) in after.iter().enumerate() {
        let label = if k == 0 { "then" } else { "" };
        println!("{label:<14}{name}: {line}");
    }
    if let Some((last, _)) = after.last() {
        println!("{:<14}`rtit replay` serves {last}; `--no-follow`, this one", "");
    }
    println!("instructions  {}", m.instructions);
    println!("trace         {} bytes", m.trace_bytes);
    println!("started at    {:#x}", m.start_ip);
    // What the recorder logged beside the trace. A signal shows in the decoded flow as the
    // trace leaving user mode and coming back, not as an interrupt (which is a handler the
    // trace holds), so its count is here.
    let signals = rec.signals()?;
    let switches = signals.iter().filter(|e| e.switch.is_some()).count();
    println!(
        "logged        {} system calls, {} signal deliveries to handlers",
        rec.syscalls()?.len(),
        signals.len() - switches
    );
    if let Some((threads, real)) = rtit_replay_core::recording::threads_and_switches(&signals) {
        println!("threads       {threads}, one at a time, {real} switches");
    }
    for warning in &m.warnings {
        println!("warning       {warning}");
    }
    if !m.children.is_empty() {
        println!("children      {} (ran unrecorded)", m.children.len());
        for c in &m.children {
            let pid = c.pid.map(|p| format!(", pid {p}")).unwrap_or_default();
            println!("  {} at position {}{pid}", c.syscall, c.position);
        }
    }
    if let Some(text) = m.kernel_text {
        println!("kernel _text  {text:#x} (kallsyms)");
    }
    let bits = [
        (ctl::USER, "User"),
        (ctl::OS, "OS"),
        (ctl::CR3_EN, "CR3En"),
        (ctl::CMPRS_RET, "Cmprs_Ret"),
        (ctl::CYCLE_ACC, "Cycle_Acc"),
        (ctl::MTC_EN, "MTC_En"),
        (ctl::STS_EN, "STS_En"),
    ];
    let on: Vec<&str> = bits
        .iter()
        .filter(|(b, _)| m.rtit.ctl & b != 0)
        .map(|(_, n)| *n)
        .collect();
    println!("RTIT_CTL      {:#x} ({})", m.rtit.ctl, on.join(", "));
    println!("CR3 filter    {:#x}", m.rtit.cr3_match);
    println!(
        "CPU           {} (family {} model {})",
        m.cpu.model_name, m.cpu.family, m.cpu.model
    );
    println!("images");
    for image in &m.images {
        println!(
            "  {:#014x}  {}  ({})",
            image.load_address,
            image.path,
            image.sha256.get(..16).unwrap_or(&image.sha256)
        );
    }
    // A trace shorter than the manifest says is decoded too, so the report says how much of
    // the history is there.
    let trace_len = std::fs::metadata(rec.dir.join(files::TRACE)).map_or(0, |m| m.len());
    let short = trace_len != m.trace_bytes;
    if !short {
        // Every file as the recorder wrote it, whichever command reads it later.
        match rec.check_seal()? {
            Some(checked) => {
                println!(
                    "seal          every file as the recorder wrote it ({} files, {:.1} MB)",
                    checked.files,
                    checked.bytes as f64 / 1e6
                );
                if !checked.foreign.is_empty() {
                    println!(
                        "              also there, not part of the recording (nothing reads it): {}",
                        checked.foreign.join(", ")
                    );
                }
            }
            None => {
                rec.verify_images()?;
                println!("seal          none (made by an rtit that did not seal recordings)");
            }
        }
    }
    if args.decode || short {
        super::decode_check::run(&rec, args.partial, args.threads, args.verify_parallel)?;
    }
    Ok(())
}

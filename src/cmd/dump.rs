//! `rtit dump`: print the packets of a raw RTIT trace, one per line, as libipt's ptdump does,
//! or as JSON lines for scripts and tests.
//!
//! A bad byte gives one `error` line at its offset; decoding then resumes at the next PSB and
//! the bytes skipped to reach it are not printed. Decode errors are part of the output, not a
//! failure of the command: the exit status is 0 once the trace was read.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use rtit_replay_core::ip::IpPayload;
use rtit_replay_core::packet::{DecodeError, Decoded, DecoderConfig, Packet, PacketDecoder};
use serde::Serialize;

/// Arguments of `rtit dump`.
#[derive(Debug, Args)]
pub struct DumpArgs {
    /// One JSON object per line instead of the human-readable listing.
    #[arg(long)]
    json: bool,
    /// The trace was written with RTIT_CTL.Cycle_Acc set: cycle-count packets follow TIP, FUP,
    /// PIP, MTC, STS and full TNT packets.
    #[arg(long)]
    cycle_accurate: bool,
    /// Print at most N packets (error lines count).
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// A recording directory (default: the latest), or a raw RTIT trace file: the bytes of
    /// the output region, starting at a packet boundary.
    #[arg(value_name = "SOURCE")]
    source: Option<PathBuf>,
}

/// Runs `rtit dump`.
pub fn run(args: &DumpArgs) -> Result<()> {
    let (trace, cycle_accurate, name) = match &args.source {
        Some(file) if !file.is_dir() => {
            let trace = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
            (trace, args.cycle_accurate, file.display().to_string())
        }
        dir => {
            let rec = super::recordings::open(dir.as_deref())?;
            let from_ctl = DecoderConfig::from_rtit_ctl(rec.manifest.rtit.ctl).cycle_accurate;
            (
                rec.trace()?,
                from_ctl || args.cycle_accurate,
                rec.dir.display().to_string(),
            )
        }
    };
    let config = DecoderConfig { cycle_accurate };
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let errors = match print_packets(&trace, config, args, &mut out).and_then(|n| out.flush().map(|()| n)) {
        Ok(errors) => errors,
        // `rtit dump … | head` closes the pipe early: that is not a failure.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        Err(e) => return Err(e).context("cannot write to standard output"),
    };
    if errors > 0 {
        eprintln!(
            "rtit dump: {errors} decode error{} in {name}",
            if errors == 1 { "" } else { "s" },
        );
    }
    Ok(())
}

/// Prints the listing; returns the number of decode errors.
fn print_packets(trace: &[u8], config: DecoderConfig, args: &DumpArgs, out: &mut impl Write) -> io::Result<usize> {
    let mut errors = 0;
    let limit = args.limit.unwrap_or(usize::MAX);
    for item in PacketDecoder::new(trace, config).take(limit) {
        if item.is_err() {
            errors += 1;
        }
        if args.json {
            serde_json::to_writer(&mut *out, &JsonLine::new(&item))?;
            writeln!(out)?;
        } else {
            write_human(trace, &item, out)?;
        }
    }
    Ok(errors)
}

/// One line of `--json` output. Field names are part of the interface (see the README).
#[derive(Debug, Default, Serialize)]
struct JsonLine {
    offset: usize,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ip: Option<String>,
    /// For TIP/FUP: payload bytes sent (CNT) and the Zext bit, as transmitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    ip_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    zext: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bits: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cr3: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pg: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rng: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tsc: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    acbr: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ecbr: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    btc: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cycles: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

impl JsonLine {
    fn new(item: &Result<Decoded, DecodeError>) -> Self {
        let d = match item {
            Ok(d) => d,
            Err(e) => {
                return Self {
                    offset: e.offset,
                    kind: "error",
                    message: Some(e.kind.to_string()),
                    ..Self::default()
                }
            }
        };
        let mut line = Self {
            offset: d.offset,
            kind: d.packet.name(),
            size: Some(d.packet.encoded_len()),
            ip: d.ip.map(|ip| format!("{ip:#x}")),
            ..Self::default()
        };
        match d.packet {
            Packet::Tnt(tnt) => line.bits = Some(tnt_string(tnt.iter())),
            Packet::Tip(p) | Packet::Fup(_, p) => {
                line.ip_bytes = Some(p.size.bytes());
                line.zext = Some(p.zext);
            }
            Packet::Pip(pip) => {
                line.cr3 = Some(format!("{:#x}", pip.cr3));
                line.pg = Some(pip.pg);
            }
            Packet::Mtc(mtc) => {
                line.rng = Some(mtc.rng);
                line.tsc = Some(mtc.tsc);
            }
            Packet::Sts(sts) => {
                line.acbr = Some(sts.acbr);
                line.ecbr = Some(sts.ecbr);
                line.btc = Some(sts.btc);
            }
            Packet::Cyc(c) => line.cycles = Some(c.value()),
            Packet::Psb | Packet::TraceStop => {}
        }
        line
    }
}

fn tnt_string(bits: impl Iterator<Item = bool>) -> String {
    bits.map(|t| if t { 'T' } else { 'N' }).collect()
}

/// ptdump-like: offset, raw bytes, packet name, payload, expanded IP.
fn write_human(trace: &[u8], item: &Result<Decoded, DecodeError>, out: &mut impl Write) -> io::Result<()> {
    let d = match item {
        Ok(d) => d,
        Err(e) => return writeln!(out, "{:016x}  {:<27}  error    {}", e.offset, "", e.kind),
    };
    let raw = &trace[d.offset..d.offset + d.packet.encoded_len()];
    let hex: Vec<String> = raw.iter().map(|b| format!("{b:02x}")).collect();
    let details = match d.packet {
        Packet::Tnt(tnt) => tnt_string(tnt.iter()),
        Packet::Tip(p) | Packet::Fup(_, p) => match d.ip {
            Some(ip) => format!("{ip:#018x}  {}", describe_payload(p)),
            None => describe_payload(p),
        },
        Packet::Pip(pip) => format!("cr3={:#012x} pg={}", pip.cr3, u8::from(pip.pg)),
        Packet::Mtc(mtc) => format!("rng={} tsc={:#04x}", mtc.rng, mtc.tsc),
        Packet::Sts(s) => format!("acbr={} ecbr={} btc={:#012x}", s.acbr, s.ecbr, s.btc),
        Packet::Cyc(c) => c.value().to_string(),
        Packet::Psb | Packet::TraceStop => String::new(),
    };
    let name = d.packet.name();
    let line = format!("{:016x}  {:<27}  {name:<8} {details}", d.offset, hex.join(" "));
    writeln!(out, "{}", line.trim_end())
}

fn describe_payload(p: IpPayload) -> String {
    let how = if p.zext {
        "zero-extended"
    } else if p.needs_last_lip() {
        "upper bytes from last IP"
    } else {
        "full"
    };
    format!("({} bytes, {how})", p.size.bytes())
}

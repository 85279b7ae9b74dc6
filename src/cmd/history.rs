//! What `rtit insns` and `rtit calls` share: a trace and the images it ran from, named on the
//! command line, decoded into the history, and that history one instruction at a time.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use iced_x86::Instruction;
use rtit_replay_core::cofi::{classify, Cofi};
use rtit_replay_core::flow::{decode_insn, FlowConfig, FlowDecoder, FlowEvent, FlowItem};
use rtit_replay_core::image::{AddressSpace, Image};
use rtit_replay_core::packet::DecoderConfig;

/// The trace and its code.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// A recording directory (default: the latest) or a raw RTIT trace file.
    #[arg(value_name = "REC|TRACE")]
    source: Option<PathBuf>,
    /// An ELF file the traced code ran from; for a PIE or shared object, @ the address its
    /// first segment was mapped at (hex, as /proc/PID/maps shows). Repeatable.
    #[arg(long = "image", value_name = "FILE[@ADDR]")]
    images: Vec<String>,
    /// Raw code bytes (no ELF headers) at an address. Repeatable.
    #[arg(long = "raw", value_name = "FILE@ADDR")]
    raw: Vec<String>,
    /// The trace was written with RTIT_CTL.Cycle_Acc set.
    #[arg(long)]
    cycle_accurate: bool,
    /// Use what an incomplete recording holds (a trace cut short), with a warning.
    #[arg(long)]
    partial: bool,
}

/// A decoded history with its address space.
pub struct History {
    pub space: AddressSpace,
    pub items: Vec<FlowItem>,
}

/// The positions `--range A..B` selects (all of them without it).
pub fn positions(spec: Option<&str>) -> Result<Range<u64>> {
    spec.map_or(Ok(0..u64::MAX), parse_range)
}

/// `A..B` positions on the command line; either side may be left out.
fn parse_range(spec: &str) -> Result<Range<u64>> {
    let Some((a, b)) = spec.split_once("..") else {
        bail!("--range {spec}: expected A..B")
    };
    let num = |s: &str, default: u64| -> Result<u64> {
        if s.is_empty() {
            Ok(default)
        } else {
            s.parse()
                .with_context(|| format!("--range {spec}: `{s}` is not a position"))
        }
    };
    Ok(num(a, 0)?..num(b, u64::MAX)?)
}

fn split_at_address(spec: &str) -> Result<(&Path, Option<u64>)> {
    match spec.rsplit_once('@') {
        Some((file, addr)) => {
            let digits = addr.trim_start_matches("0x").trim_start_matches("0X");
            let addr = u64::from_str_radix(digits, 16)
                .with_context(|| format!("{spec}: `{addr}` is not a hexadecimal address"))?;
            Ok((Path::new(file), Some(addr)))
        }
        None => Ok((Path::new(spec), None)),
    }
}

impl TraceArgs {
    /// Loads the images and decodes the trace.
    pub fn load(&self) -> Result<History> {
        let (mut space, trace, mut config, gaps, rec) = match &self.source {
            // A file that is there is a raw trace; anything else names a recording (a
            // directory, or a name `rtit ls` lists, such as `sort-0/exec-1`).
            Some(file) if file.is_file() => {
                if self.images.is_empty() && self.raw.is_empty() {
                    bail!("no code to decode a raw trace against: give --image FILE[@ADDR] or --raw FILE@ADDR");
                }
                let trace = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
                (AddressSpace::new(), trace, FlowConfig::default(), Vec::new(), None)
            }
            dir => {
                let rec = super::recordings::open(dir.as_deref())?;
                (
                    rec.address_space()?,
                    rec.trace()?,
                    rec.flow_config(),
                    rec.gaps(),
                    Some(rec),
                )
            }
        };
        for spec in &self.images {
            let (file, addr) = split_at_address(spec)?;
            space.add(Image::load_at(file, addr)?)?;
        }
        for spec in &self.raw {
            let (file, addr) = split_at_address(spec)?;
            let Some(addr) = addr else {
                bail!("--raw {spec}: the address is missing (FILE@ADDR)")
            };
            let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
            space.add(Image::from_raw(&file.display().to_string(), addr, bytes))?;
        }
        if self.cycle_accurate {
            config.packets = DecoderConfig { cycle_accurate: true };
        }
        let mut items = Vec::new();
        let end = rec.as_ref().and_then(|r| r.trace_end(trace.len()));
        FlowDecoder::new(&trace, config, &space)
            .with_gaps(&gaps)
            .with_end(end)
            .decode(&mut items);
        if let Some(rec) = &rec {
            // Shown and, for a spin at the end, counted.
            let ran = items
                .iter()
                .map(|i| match i {
                    FlowItem::Run { count, .. } => *count,
                    FlowItem::Event(e) => e.unshown(),
                })
                .sum();
            let spun = items
                .iter()
                .any(|i| matches!(i, FlowItem::Event(e) if e.unshown_unknown()));
            super::recordings::complete_or_partial(rec, trace.len(), ran, spun, self.partial)?;
        }
        Ok(History { space, items })
    }
}

/// One executed instruction.
pub struct Insn {
    /// Its position in the history.
    pub position: u64,
    /// The decoded instruction (its `ip()` is its address).
    pub insn: Instruction,
    /// How it changes the flow.
    pub cofi: Cofi,
}

/// An instruction or an event.
pub enum Entry<'a> {
    Insn(Insn),
    Event(&'a FlowEvent),
}

impl History {
    /// The history one instruction at a time; `range` selects positions.
    pub fn entries(&self, range: Range<u64>) -> impl Iterator<Item = Result<Entry<'_>>> + '_ {
        let mut cache: HashMap<u64, (Instruction, Cofi)> = HashMap::new();
        let mut position = 0u64;
        self.items.iter().flat_map(move |item| -> Vec<Result<Entry<'_>>> {
            match item {
                FlowItem::Event(e) => {
                    if range.contains(&e.position) || e.position == range.end {
                        vec![Ok(Entry::Event(e))]
                    } else {
                        Vec::new()
                    }
                }
                // A run wholly outside the range is skipped without decoding it.
                FlowItem::Run { count, .. } if position + count <= range.start || position >= range.end => {
                    position += count;
                    Vec::new()
                }
                FlowItem::Run { ip, count } => {
                    let mut out = Vec::new();
                    let mut ip = *ip;
                    for _ in 0..*count {
                        let here = position;
                        position += 1;
                        let (insn, cofi) = match cache.get(&ip) {
                            Some(hit) => *hit,
                            None => match decode_insn(&self.space, ip) {
                                Ok(insn) => {
                                    let entry = (insn, classify(&insn));
                                    cache.insert(ip, entry);
                                    entry
                                }
                                Err(e) => {
                                    out.push(Err(e.into()));
                                    break;
                                }
                            },
                        };
                        if range.contains(&here) {
                            out.push(Ok(Entry::Insn(Insn {
                                position: here,
                                insn,
                                cofi,
                            })));
                        }
                        ip = insn.next_ip();
                    }
                    out
                }
            }
        })
    }
}

//! One recording with the unit: take it, find the target's CR3, program it, let the target
//! run while copying the trace out, stop, and give the unit back.
//!
//! The target and rtit's drain loop run on the same logical processor (§3.3.1: the MSRs are
//! per logical processor), so whenever rtit pauses the unit the target is off the CPU:
//! PacketEn is already 0 (the context switch away from it left ContextEn), its last TNT bits
//! went out before that FUP.PGD, and pausing and resuming lose nothing. Resuming sends a PSB
//! (TriggerEn 0 → 1).

use std::time::Duration;

use rtit_replay_core::recording::{EndState, TraceGap};
use rtit_replay_core::regs::{ctl, events, EventId};

use super::collect::{Collector, WrapMode};
use super::cr3::{cr3_entering, Cr3Error};
use super::device::{Msrs, OutputRegion};
use super::program::{ProgramError, Unit};
use crate::model::RtitConfig;

/// The traced program, as the session drives it.
pub trait Target {
    /// The error of its operations.
    type Error: std::error::Error + Send + Sync + 'static;
    /// The address of the next instruction the stopped target executes.
    fn next_ip(&mut self) -> Result<u64, Self::Error>;
    /// Lets the stopped target execute one instruction and stops it again.
    fn step(&mut self) -> Result<(), Self::Error>;
    /// Lets the target run (it keeps running across calls) for about `slice`, until it stops
    /// where its sideband changed, or until it ends.
    fn run(&mut self, slice: Duration) -> Result<Ran, Self::Error>;
    /// Ends the target (after an error or an interruption).
    fn kill(&mut self);
    /// Tracing is about to start with the target stopped: the moment to read its start state.
    fn starting(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// Why [`Target::run`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    /// The time slice is over; the target keeps running.
    Slice,
    /// The target is stopped where its sideband changed (a system call changed its memory
    /// map): the session marks the place in the trace, then lets it run on.
    Sideband,
    /// The target ended.
    Ended(EndState),
}

/// How to record.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The configuration; with CR3En set, RTIT_CR3_MATCH is found by discovery.
    pub config: RtitConfig,
    /// What to do when the trace outgrows the region.
    pub wrap: WrapMode,
    /// How long the target runs between drains (in [`WrapMode::Drain`]).
    pub slice: Duration,
    /// Set by a signal handler: stop and keep what was recorded.
    pub interrupted: crate::interrupt::Interrupt,
}

/// What the unit recorded.
#[derive(Debug, Clone)]
pub struct Traced {
    /// The packet bytes.
    pub trace: Vec<u8>,
    /// Where bytes were lost.
    pub gaps: Vec<TraceGap>,
    /// The configuration programmed (with the CR3 found).
    pub config: RtitConfig,
    /// The CR3 found, if the configuration filters on CR3.
    pub cr3: Option<u64>,
    /// Where tracing started.
    pub start_ip: u64,
    /// How the target ended.
    pub end: EndState,
    /// Times the unit had wrapped when rtit copied the region.
    pub wraps: u64,
    /// Where in `trace` each [`Ran::Sideband`] stop happened, in order; `None` for a stop
    /// before the first byte kept (a flight recorder keeps only the end).
    pub marks: Vec<Option<u64>>,
}

/// A failed session; the unit was restored and the target ended.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Programming the unit failed.
    #[error(transparent)]
    Program(#[from] ProgramError),
    /// The target's CR3 was not found.
    #[error("finding the target's CR3: {0}")]
    Cr3(#[from] Cr3Error),
    /// The target failed.
    #[error("the target: {0}")]
    Target(Box<dyn std::error::Error + Send + Sync>),
}

/// The configuration of the CR3 discovery trace: every context, both rings, no IP filter.
pub fn discovery_config(pkt_cnt: u64) -> RtitConfig {
    RtitConfig {
        ctl: ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::OS | ctl::USER | ctl::DEST,
        cr3_match: 0,
        events: events(EventId::AlwaysOn, EventId::AlwaysOff),
        lip: [0; 4],
        pkt_cnt,
    }
}

/// Records `target` with the unit behind `msrs`, writing to `region`. Whatever happens, the
/// unit is stopped and restored before this returns (or unwinds), and on an error the target
/// is ended.
pub fn record<M: Msrs, R: OutputRegion, T: Target>(
    msrs: M,
    region: &mut R,
    target: &mut T,
    opts: &SessionOptions,
) -> Result<Traced, SessionError> {
    let mut unit = Unit::open(msrs)?;
    let result = run(&mut unit, region, target, opts);
    let released = unit.release();
    if result.is_err() || released.is_err() {
        target.kill();
    }
    let traced = result?;
    released?;
    Ok(traced)
}

fn target_err<E: std::error::Error + Send + Sync + 'static>(e: E) -> SessionError {
    SessionError::Target(Box::new(e))
}

fn run<M: Msrs, R: OutputRegion, T: Target>(
    unit: &mut Unit<M>,
    region: &mut R,
    target: &mut T,
    opts: &SessionOptions,
) -> Result<Traced, SessionError> {
    let mut config = opts.config;
    let cr3 = if config.ctl & ctl::CR3_EN != 0 {
        let first = target.next_ip().map_err(target_err)?;
        let discovery = discovery_config(config.pkt_cnt);
        Collector::new(region);
        unit.start(&discovery, region)?;
        let stepped = target.step().map_err(target_err);
        let offset = unit.stop()?;
        stepped?;
        let mut found = Collector::default();
        found.drain(region, offset);
        let bytes = found.finish().trace;
        let cr3 = cr3_entering(&bytes, discovery.ctl, first)?;
        // RTIT_CR3_MATCH holds CR3[35:5] (§3.3.8).
        config.cr3_match = cr3 & (((1 << 36) - 1) & !0x1f);
        Some(cr3)
    } else {
        None
    };
    let start_ip = target.next_ip().map_err(target_err)?;
    target.starting().map_err(target_err)?;
    let mut collector = match opts.wrap {
        WrapMode::Drain => Collector::new(region),
        WrapMode::FlightRecorder => Collector::keeping_last(region),
    };
    let mut marks = Vec::new();
    unit.start(&config, region)?;
    let end = loop {
        if opts.interrupted.is_set() {
            target.kill();
            break opts.interrupted.end_state();
        }
        let ran = target.run(opts.slice).map_err(target_err)?;
        let sideband = match ran {
            Ran::Ended(end) => break end,
            Ran::Sideband => true,
            Ran::Slice => false,
        };
        // A sideband stop needs its trace offset, so even a flight recorder drains there.
        if sideband || opts.wrap == WrapMode::Drain {
            let offset = unit.pause()?;
            collector.drain(region, offset);
            if sideband {
                marks.push(collector.mark());
            }
            unit.resume(0)?;
        }
    };
    let offset = unit.stop()?;
    collector.drain(region, offset);
    let wraps = collector.wraps;
    let collected = collector.finish();
    let marks = marks.into_iter().map(|m| collected.offset_of(m)).collect();
    Ok(Traced {
        trace: collected.trace,
        gaps: collected.gaps,
        config,
        cr3,
        start_ip,
        end,
        wraps,
        marks,
    })
}

//! `rtit record --backend msr`: everything put together on a Linux RTIT machine.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use rtit_replay_core::recording::Maps;
use rtit_replay_core::regs::{ctl, events, EventId};

use super::collect::WrapMode;
use super::linux::{pin, CpuLock, HugePage};
use super::session::{self, SessionOptions};
use super::target::PtraceTarget;
use crate::model::RtitConfig;
use crate::outcome::{Module, Outcome};
use crate::step::StartAt;

/// What to record, and how.
pub struct MsrOptions {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Leave ASLR on.
    pub aslr: bool,
    /// Where tracing starts.
    pub start: StartAt,
    /// The configuration (CR3_MATCH is found).
    pub config: RtitConfig,
    /// The logical processor to trace on.
    pub cpu: usize,
    /// Flight recorder or periodic drain.
    pub wrap: WrapMode,
    /// Time between drains.
    pub slice: Duration,
    /// A kernel module whose code to trace (OS=1, IP filter on its text).
    pub module: Option<Module>,
    /// The IP filter ranges for the module (its `.text`, and `.init.text` if asked).
    pub module_ranges: Vec<(u64, u64)>,
    /// Where lock files go (`/run`).
    pub lock_dir: PathBuf,
    /// Set on SIGINT/SIGTERM.
    pub interrupted: Arc<AtomicBool>,
}

/// Records with the hardware. Every failure is one line naming what is wrong.
pub fn record(mut opts: MsrOptions) -> Result<Outcome, String> {
    let msrs = super::detect::detect(opts.cpu)?;
    let _lock = CpuLock::take(&opts.lock_dir, opts.cpu)?;
    let mut region = HugePage::new()?;
    if let Some(module) = &opts.module {
        // OS code of the module only: IP filter ranges (§2.4.3), RANGE0 and RANGE1.
        if opts.module_ranges.len() > 2 {
            return Err(format!("module {}: RTIT has two IP ranges", module.name));
        }
        opts.config.ctl |= ctl::OS;
        for (n, &(a, b)) in opts.module_ranges.iter().enumerate() {
            opts.config.lip[n] = a;
            opts.config.lip[n + 2] = b;
        }
        let filter = if opts.module_ranges.len() == 2 {
            EventId::Either
        } else {
            EventId::Range0
        };
        opts.config.events = events(filter, EventId::AlwaysOff);
    }
    let mut target =
        PtraceTarget::spawn(&opts.program, &opts.args, opts.aslr, opts.cpu, &opts.start).map_err(|e| e.to_string())?;
    // The drain loop runs where the target runs (§3.3.1).
    pin(nix::unistd::Pid::from_raw(0), opts.cpu)?;
    let session = SessionOptions {
        config: opts.config,
        wrap: opts.wrap,
        slice: opts.slice,
        interrupted: opts.interrupted.clone(),
    };
    let traced = session::record(msrs, &mut region, &mut target, &session).map_err(|e| e.to_string())?;
    let start = target.start.clone().unwrap_or_default();
    let end = target.end.clone().unwrap_or_default();
    let mut images = target.images(&start.maps);
    images.note(&end.maps);
    Ok(Outcome {
        trace: traced.trace,
        // Known once the trace is decoded; the writer's manifest takes the decoder's count.
        instructions: 0,
        truth: None,
        memory_start: start.memory,
        memory_end: end.memory,
        maps: Maps {
            initial: start.maps,
            changes: Vec::new(),
        },
        images,
        registers_start: start.registers,
        registers_end: end.registers,
        start_ip: traced.start_ip,
        cr3: traced.cr3.unwrap_or(0),
        end: traced.end,
        config: traced.config,
        modules: opts.module.into_iter().collect(),
        gaps: traced.gaps,
        syscalls: Vec::new(),
    })
}

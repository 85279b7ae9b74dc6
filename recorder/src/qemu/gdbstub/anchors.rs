//! Anchors while the program runs (issue 40; the format is `rtit_replay_core::recording::
//! anchors`): every `every` positions (the first sooner: [`FIRST`]) the watch stops the program as it does for a register
//! sample, reads every register QEMU's gdbstub gives and the pages written since the anchor
//! before (`crate::qemu::written`), and appends them to the anchor files in the scratch
//! directory, which the writer moves into the recording. Only while the plugin tracks the
//! written pages: without it an anchor could not say every page written.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use nix::unistd::Pid;
use rtit_replay_core::recording::anchors::{encode_page, Anchor};
use rtit_replay_core::recording::files;

use super::guest;
use super::remote::{register, registers, Remote};
use super::GdbstubError;
use crate::qemu::report::Counters;
use crate::qemu::written::Pagemap;

/// What the watch is to do about anchors.
#[derive(Debug, Clone)]
pub struct AnchorPlan {
    /// Positions from one anchor to the next, at least.
    pub every: AnchorEvery,
    /// Where the anchor files go.
    pub dir: PathBuf,
}

/// How far apart anchors are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnchorEvery {
    /// As the QEMU allows: [`PARKED_EVERY`] where its plugin parks the program for one,
    /// else [`STOPPED_EVERY`].
    Auto,
    /// Every this many positions.
    Positions(u64),
}

/// Positions between anchors taken through QEMU's gdbstub (QEMU 7.2 and 8.x): each stop
/// costs QEMU its translated code (its gdbstub flushes it), about 20 ms on python3.
pub const STOPPED_EVERY: u64 = 1 << 25;

/// Positions between anchors taken by parking the program (QEMU 9.0 and later, whose plugin
/// API reads registers): about 1 ms each, and nothing retranslated, so a stop anywhere walks
/// at most this far from one (about 0.2 s on python3) before any background pass. Denser
/// costs more pages than trace: python3's 1e9 instructions wrote 84 MB of anchor pages at
/// 2^22 and 148 MB at 2^21, beside 114 MB of trace.
pub const PARKED_EVERY: u64 = 1 << 22;

/// The next spacing of parked anchors by default, from `every` now and the bytes the anchors
/// and the trace took so far: doubled (up to [`STOPPED_EVERY`]) while the anchors take more
/// than three quarters of the trace, 32 MB aside ([`SMALL`]), halved (down to
/// [`PARKED_EVERY`]) under three eighths. A program that rewrites its buffers over and over
/// makes each anchor large (GNU sort of 13.8 MB: 922 MB of pages at 2^22 beside 645 MB of
/// trace, 274 MB at 2^25); python3's JSON loop stays at 2^22, its pages 0.73 of its trace.
fn spacing(every: u64, anchors: u64, trace: u64) -> u64 {
    // A short run's anchors hold what its start wrote (python3's startup: 12 MB of pages
    // beside 9 MB of trace), small however it compares.
    let trace = trace + SMALL;
    if anchors > trace / 4 * 3 {
        (every * 2).min(STOPPED_EVERY)
    } else if anchors < trace / 8 * 3 {
        (every / 2).max(PARKED_EVERY)
    } else {
        every
    }
}

/// Bytes of anchors counted as trace besides the trace ([`spacing`]).
const SMALL: u64 = 32 << 20;

impl AnchorEvery {
    /// The spacing to start with (before it is known whether parking works).
    fn first(self) -> u64 {
        match self {
            Self::Auto => STOPPED_EVERY,
            Self::Positions(n) => n,
        }
    }
}

/// Positions before the first anchor, at most: a stop in a program's first instructions,
/// where the dynamic loader stops gdb at each library it loads, walks at most this far for
/// its values before the history is decoded. One anchor: each stops QEMU, whose gdbstub
/// then translates the program's code afresh (anchors at 2^20, 2^21, 2^22 … made python3's
/// recording 11 % slower).
const FIRST: u64 = 1 << 22;

/// The plugin's `TRACKING` word: the written pages are tracked.
const TRACKING_ON: u64 = 1;

/// Anchors being taken.
pub(super) struct Anchors {
    every: u64,
    /// Whether the spacing becomes [`PARKED_EVERY`] once a park works.
    auto: bool,
    /// Whether the spacing follows what the anchors take against the trace ([`spacing`]).
    adapts: bool,
    /// The trace being written, beside the anchor files.
    trace: PathBuf,
    pid: Pid,
    counters: Counters,
    tracking: u64,
    pagemap: Pagemap,
    next: u64,
    index: BufWriter<File>,
    pages: BufWriter<File>,
    offset: u64,
    /// Why no more anchors are taken, once that is so.
    pub(super) ended: Option<String>,
    buf: Vec<u8>,
    /// Whether the plugin may park the program for an anchor with its registers (until a
    /// park shows it reads none).
    pub(super) parks: bool,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> GdbstubError + '_ {
    move |e| GdbstubError::Anchors(format!("{}: {e}", path.display()))
}

impl Anchors {
    /// Starts anchors for QEMU's process `pid`, whose plugin publishes `counters`; `None`
    /// where the plugin does not say whether it tracks written pages.
    pub(super) fn new(plan: &AnchorPlan, pid: Pid, counters: Counters) -> Result<Option<Self>, GdbstubError> {
        let Some(tracking) = counters.tracking else {
            return Ok(None);
        };
        let pagemap = Pagemap::open(pid).map_err(|e| GdbstubError::Anchors(format!("QEMU's pagemap: {e}")))?;
        let create = |name: &str| -> Result<BufWriter<File>, GdbstubError> {
            let path = plan.dir.join(name);
            Ok(BufWriter::with_capacity(
                1 << 20,
                File::create(&path).map_err(io(&path))?,
            ))
        };
        Ok(Some(Self {
            every: plan.every.first(),
            auto: plan.every == AnchorEvery::Auto,
            adapts: false,
            trace: plan.dir.join(crate::qemu::report::files::TRACE),
            pid,
            counters,
            tracking,
            pagemap,
            next: plan.every.first().min(FIRST),
            index: create(files::ANCHORS)?,
            pages: create(files::ANCHOR_PAGES)?,
            offset: 0,
            ended: None,
            buf: Vec::new(),
            parks: true,
        }))
    }

    /// Whether an anchor is due: the program has got `every` positions past the last one
    /// (as far as the plugin's position, read without stopping it, says) and the written
    /// pages are still tracked.
    pub(super) fn due(&mut self) -> bool {
        if self.ended.is_some() {
            return false;
        }
        match guest::word(self.pid, self.counters.position) {
            Some(p) if p != u64::MAX && p >= self.next => {}
            _ => return false,
        }
        match guest::word(self.pid, self.tracking) {
            Some(TRACKING_ON) => true,
            _ => {
                self.ended = Some("the plugin stopped tracking the pages the program writes".into());
                false
            }
        }
    }

    /// Takes an anchor while the program is stopped for it: its registers, and the pages
    /// written since the last. Nothing if the stop is not at a position of the trace.
    pub(super) fn take(&mut self, remote: &mut Remote) -> Result<(), GdbstubError> {
        let regs = registers(&remote.request("g")?)?;
        let Some(position) = guest::position(self.pid, self.counters, register(&regs, "rip")) else {
            return Ok(());
        };
        self.take_at(position, regs)
    }

    /// Takes an anchor with the running thread parked by the plugin (`guest::park`): the
    /// program stops at a block's start for about a millisecond, without QEMU's gdbstub,
    /// which flushes QEMU's translated code (QEMU 10.0 in an exclusive section, which never
    /// ends while a thread waits inside QEMU for its turn); true if it did. Where the plugin
    /// reads no registers (QEMU 7.2 and 8.x) it never parks again ([`Self::parks`]).
    pub(super) fn take_parked(&mut self) -> Result<bool, GdbstubError> {
        let Some((position, regs)) = guest::park(self.pid, self.counters) else {
            return Ok(false);
        };
        if !regs.contains_key("rsp") {
            self.parks = false;
            guest::unpark(self.pid, self.counters);
            return Ok(false);
        }
        if std::mem::take(&mut self.auto) {
            (self.every, self.adapts) = (PARKED_EVERY, true);
        }
        let taken = self.take_at(position, regs);
        guest::unpark(self.pid, self.counters);
        taken.map(|()| true)
    }

    /// Writes the anchor at `position`, with `regs`, the program held there.
    fn take_at(&mut self, position: u64, regs: crate::outcome::RegisterMap) -> Result<(), GdbstubError> {
        let written = match self.pagemap.take_written() {
            Ok(w) => w,
            Err(e) => {
                self.ended = Some(format!("PAGEMAP_SCAN of QEMU's pagemap: {e}"));
                return Ok(());
            }
        };
        let pages = self.pagemap.read(&written);
        self.buf.clear();
        for (address, bytes) in &pages {
            encode_page(*address, bytes.as_deref(), &mut self.buf);
        }
        let path = Path::new(files::ANCHOR_PAGES);
        self.pages.write_all(&self.buf).map_err(io(path))?;
        let anchor = Anchor {
            position,
            registers: regs,
            pages: pages.len() as u64,
            offset: self.offset,
        };
        self.offset += self.buf.len() as u64;
        let line = serde_json::to_string(&anchor).map_err(|e| GdbstubError::Anchors(e.to_string()))?;
        writeln!(self.index, "{line}").map_err(io(Path::new(files::ANCHORS)))?;
        if self.adapts {
            let trace = std::fs::metadata(&self.trace).map_or(0, |m| m.len());
            self.every = spacing(self.every, self.offset, trace);
        }
        self.next = position + self.every;
        Ok(())
    }

    /// Writes out what is buffered.
    pub(super) fn finish(mut self) -> Result<Option<String>, GdbstubError> {
        self.index.flush().map_err(io(Path::new(files::ANCHORS)))?;
        self.pages.flush().map_err(io(Path::new(files::ANCHOR_PAGES)))?;
        Ok(self.ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parked_anchors_space_out_where_they_outgrow_the_trace() {
        const M: u64 = 1 << 20;
        assert_eq!(
            spacing(PARKED_EVERY, 100 * M, 1000 * M),
            PARKED_EVERY,
            "never under the default"
        );
        assert_eq!(spacing(PARKED_EVERY, 800 * M, 1000 * M), 2 * PARKED_EVERY);
        assert_eq!(
            spacing(STOPPED_EVERY, 5000 * M, 1000 * M),
            STOPPED_EVERY,
            "never over the gdbstub's"
        );
        assert_eq!(
            spacing(4 * PARKED_EVERY, 700 * M, 1000 * M),
            4 * PARKED_EVERY,
            "between: kept"
        );
        assert_eq!(spacing(4 * PARKED_EVERY, 370 * M, 1000 * M), 2 * PARKED_EVERY);
        assert_eq!(
            spacing(PARKED_EVERY, 12 * M, 9 * M),
            PARKED_EVERY,
            "a short run's start"
        );
    }
}

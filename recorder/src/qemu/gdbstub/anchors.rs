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
    pub every: u64,
    /// Where the anchor files go.
    pub dir: PathBuf,
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
            every: plan.every,
            pid,
            counters,
            tracking,
            pagemap,
            next: plan.every.min(FIRST),
            index: create(files::ANCHORS)?,
            pages: create(files::ANCHOR_PAGES)?,
            offset: 0,
            ended: None,
            buf: Vec::new(),
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

    /// Takes an anchor with the running thread parked by the plugin (`guest::park`), where a
    /// thread waits inside QEMU and its gdbstub cannot stop the program; true if it did.
    pub(super) fn take_parked(&mut self) -> Result<bool, GdbstubError> {
        let Some((position, regs)) = guest::park(self.pid, self.counters) else {
            return Ok(false);
        };
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

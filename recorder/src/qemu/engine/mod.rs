//! The retirement engine: turns the blocks QEMU executes into the instructions that retired,
//! in order, and feeds them to the unit model. It sees what the plugin sees: a callback at the
//! start of every executed block, how many of the previous block's instructions started
//! (an inline counter, added to once a block before its last instruction: a block cut short
//! counts 0, and [`cut`] finds where it stopped), system calls, the end, and at a signal
//! handler's entry the frame `rtit record` reads there.
//!
//! A block's branch outcome is the next block's start. The cases QEMU 7.2 makes special:
//! - fewer instructions started than the block holds: the last one that started faulted
//!   (the next block is the signal handler), or a store into the block made QEMU re-translate
//!   and re-run from that store (the next block starts at it): nothing after it retired;
//! - a REP string instruction runs one iteration per block execution: while the next block
//!   starts at the instruction itself it has not retired (one retirement, as on hardware);
//! - the next block is not a successor the last instruction can have: a signal was delivered.
//!   Where the interrupted code resumes is in the signal frame, which `rtit record` reads at
//!   the handler's entry ([`Engine::signal_delivered`]): at the last instruction itself if it
//!   faulted (nothing retired), else where it went, which the blocks alone cannot tell for a
//!   conditional or indirect branch (an instruction that can go to itself and resumes there
//!   says neither). Without the frame (a signal rtit does not log) an instruction that
//!   touches memory may have faulted or retired, and a branch may have gone either way: the
//!   trace says so with an overflow (§4.2.5), a gap, never a guess. When the process dies of
//!   SIGSEGV or SIGBUS, a last instruction that touches memory faulted. (Counting its
//!   completed accesses with an inline memory callback is not safe under QEMU 7.2: the
//!   callback can stay armed past the block and run from freed memory.)
//! - a call into the vsyscall page runs as a one-instruction block there: the kernel emulates
//!   it through a page fault at that address, so the model sees a fault there and a return.

use std::collections::HashMap;

use rtit_replay_core::cofi::{Cofi, FarKind};

use super::block::{Access, Block, Hot, Summary};
use crate::model::{CpuState, ModelError, ModelOptions, RtitConfig, UnitModel};
use crate::sideband::nr;

mod code;
mod cut;
mod fast;
mod feed;
mod oracle;
mod started;
mod switch;
mod sync;
#[cfg(test)]
mod tests;

pub use oracle::Checked;
use oracle::Oracle;
pub use started::{Started, RESULT_MARK, SWITCH_MARK, SYSCALL_MARK};
pub use switch::{Left, Resume, Switch};

/// Where the untraced kernel is, for the model's far transfers; no packet ever carries it
/// under user-only tracing.
const KERNEL: u64 = 0xffff_ffff_8100_0000;

/// The signals a memory access that cannot complete raises (Linux's numbers).
const SIGBUS: i32 = 7;
const SIGSEGV: i32 = 11;

/// The plugin's inline counters for the block that just ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Instructions of it that started: all of them for a block that reached its last
    /// instruction; for one cut short, 0 from a plugin that counts a block at once (see
    /// [`cut`]), or how many started from one that counted each (older captures).
    pub started: u64,
}

/// Where tracing starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At the first instruction executed.
    Entry,
    /// At the first execution of this address.
    At(u64),
}

/// What a system call does to the recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// It returns to the program (or fails), which goes on, recorded.
    Returns,
    /// It does not return: the program ends there (exit, exit_group, an execve that ran
    /// another program), and so does its trace, after the call.
    Ends,
    /// The recording cannot follow it (a thread, an execve of what rtit does not record):
    /// the trace ends before it, for this reason.
    Stops(String),
}

/// What the plugin does after a system call's entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyscallAction {
    /// Let it run.
    Continue,
    /// Stop recording before it: the recording cannot follow it.
    Stop(String),
}

/// Counters of what the engine met, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    /// Block executions seen while tracing.
    pub blocks: u64,
    /// Faults (the faulting instruction did not retire).
    pub faults: u64,
    /// Signals delivered after an instruction that retired.
    pub interrupts: u64,
    /// Re-runs after a store into the running block.
    pub restarts: u64,
    /// Signals whose interrupted instruction's successor was unknown (an overflow gap).
    pub gaps: u64,
    /// Observations that fit none of the rules (reported, never silently used).
    pub anomalies: u64,
}

#[derive(Debug, Clone, Copy)]
enum Kernel {
    /// In user mode.
    User,
    /// In a system call from the instruction before `nlip`.
    Syscall { nr: u64, nlip: u64 },
    /// Delivering a signal, after a fault or an interrupt.
    Delivering,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    id: u32,
    first: usize,
}

/// The engine.
pub struct Engine {
    blocks: Vec<Block>,
    /// What each execution of a block needs of it, by id ([`Summary`]).
    summaries: Vec<Summary>,
    /// What the fast path reads of each block, by id ([`Hot`]).
    hot: Vec<Hot>,
    /// The ids of the blocks that start at an address: QEMU translates the same code again
    /// after every flush of its translations (its gdbstub flushes them all at each
    /// breakpoint, so at each signal rtit logs), and the same block keeps its id instead of
    /// growing the tables at each signal.
    by_start: HashMap<u64, Vec<u32>>,
    model: Option<UnitModel>,
    options: ModelOptions,
    config: RtitConfig,
    start: Start,
    pending: Option<Pending>,
    /// The base of the block that ended in the last system call ([`Self::block_base`]),
    /// until the next block starts.
    syscall_base: Option<u64>,
    kernel: Kernel,
    last_syscall: Option<(u64, u64)>,
    truth: Option<Vec<u64>>,
    /// Signal handlers' addresses, sorted (a few: a search per indirect branch, where a hash
    /// lookup cost more than the rest of settling a block).
    handlers: Vec<u64>,
    /// The signal delivery `rtit record` saw at a handler's entry, for the block that comes
    /// next: the handler's address and where the interrupted code resumes (see
    /// [`Self::signal_delivered`]).
    delivered: Option<(u64, u64)>,
    /// The signal of [`Self::delivered`] (0: unknown).
    delivered_signal: i32,
    /// The signal the process is dying of, once the plugin says so ([`Self::finish`]).
    fatal: Option<i32>,
    /// Where the program was at the last signal that went to no handler ([`Self::signal_at`]).
    signal_ip: Option<u64>,
    /// The position of each handler's entry `rtit record` told ([`Self::deliveries`]).
    deliveries: Vec<Option<u64>>,
    ended: bool,
    last_fault: Option<u64>,
    /// Whether to check the fast path against the unit model one instruction at a time.
    check: bool,
    oracle: Option<Oracle>,
    /// Which code each stretch ran ([`code`]).
    code: code::CodeNotes,
    /// Where a decode can start exactly ([`sync`]).
    sync: sync::SyncNotes,
    /// Whether the program has threads ([`switch`]).
    threaded: bool,
    /// The threads waiting for their turn in a system call ([`switch`]).
    waiting: switch::Waiting,
    /// What it met.
    pub stats: Stats,
}

impl Engine {
    /// An engine that starts tracing at `start` with `config` (RTIT_CR3_MATCH set already).
    pub fn new(options: ModelOptions, config: RtitConfig, start: Start, truth: bool) -> Self {
        Self::checked(options, config, start, truth, false)
    }

    /// [`Self::new`], and with `check` an [`Oracle`] beside the model: the unit model fed one
    /// instruction at a time, whose packets [`Self::take_trace`] compares with the fast
    /// path's ([`Self::checked_so_far`]).
    pub fn checked(options: ModelOptions, config: RtitConfig, start: Start, truth: bool, check: bool) -> Self {
        Self {
            blocks: Vec::new(),
            summaries: Vec::new(),
            hot: Vec::new(),
            by_start: HashMap::new(),
            model: None,
            options,
            config,
            start,
            pending: None,
            syscall_base: None,
            kernel: Kernel::User,
            last_syscall: None,
            truth: truth.then(Vec::new),
            handlers: Vec::new(),
            delivered: None,
            delivered_signal: 0,
            fatal: None,
            signal_ip: None,
            deliveries: Vec::new(),
            ended: false,
            last_fault: None,
            check,
            oracle: None,
            code: code::CodeNotes::new(),
            sync: sync::SyncNotes::new(),
            threaded: false,
            waiting: switch::Waiting::default(),
            stats: Stats::default(),
        }
    }

    /// Keeps a translated block; returns its id for the execution callback.
    pub fn add_block(&mut self, block: Block) -> u32 {
        let same = self.by_start.entry(block.start()).or_default();
        if let Some(&id) = same.iter().find(|&&id| self.blocks[id as usize] == block) {
            return id;
        }
        let id = self.blocks.len() as u32;
        same.push(id);
        self.code.grow(id);
        self.summaries.push(block.summary());
        self.hot.push(block.hot());
        self.blocks.push(block);
        id
    }

    /// Keeps a translated block under `id`, which must be the next id (the plugin's vCPU
    /// numbers blocks as QEMU translates them, [`crate::qemu::translations`], and the engine
    /// takes them later on another thread, in the same order); false, with nothing kept,
    /// for any other id. No block is looked up as [`Self::add_block`] does: the numbering
    /// did that.
    pub fn push_block(&mut self, id: u32, block: Block) -> bool {
        if id as usize != self.blocks.len() {
            return false;
        }
        self.by_start.entry(block.start()).or_default().push(id);
        self.code.grow(id);
        self.summaries.push(block.summary());
        self.hot.push(block.hot());
        self.blocks.push(block);
        true
    }

    /// A block by id.
    pub fn block(&self, id: u32) -> &Block {
        &self.blocks[id as usize]
    }

    /// Sets where tracing starts (before it has).
    pub fn set_start(&mut self, start: Start) {
        self.start = start;
    }

    /// Notes a signal handler's address (from `rt_sigaction`).
    pub fn note_handler(&mut self, address: u64) {
        if let Err(at) = self.handlers.binary_search(&address) {
            self.handlers.insert(at, address);
        }
    }

    /// Signal `signal` (Linux's number, 0 if unknown) is being delivered to `handler` (the
    /// next block), interrupting code that resumes at `resume`: `rtit record` read it from
    /// the signal frame at the handler's entry (the frame's saved RIP), while QEMU's gdbstub
    /// held the program there and this engine had settled every block before. Where the
    /// interrupted block's last instruction went would be unknown from the blocks alone (a
    /// conditional branch, or an indirect one): it went to `resume`, where the frame returns
    /// to; where it resumes at itself, it faulted, or it branched to itself, which SIGSEGV or
    /// SIGBUS for an instruction that touches memory tells apart, as at a death by them.
    /// Good for the next block only.
    pub fn signal_delivered(&mut self, handler: u64, resume: u64, signal: i32) {
        self.delivered = Some((handler, resume));
        self.delivered_signal = signal;
    }

    /// The position of each handler's entry [`Self::signal_delivered`] told, in order, once
    /// its block came (`None` if it was not the handler's): the instructions that retired
    /// before it, which `rtit record`, counting from outside, does not know where a fault
    /// stopped the interrupted block (the faulting instruction started and did not retire).
    pub fn deliveries(&self) -> &[Option<u64>] {
        &self.deliveries
    }

    /// Instructions the trace holds so far (retired with PacketEn set, not lost to an
    /// overflow): the position of what happens now.
    pub fn position(&self) -> u64 {
        self.model.as_ref().map_or(0, UnitModel::traced)
    }

    /// The position of the running block's first instruction (before tracing began, when it
    /// began inside that block): with the block's started-instruction count it places a
    /// register sample taken between two blocks (`rtit record --truth`). `None` while not
    /// tracing or after the end.
    pub fn block_base(&self) -> Option<u64> {
        let base = match (self.pending, self.syscall_base) {
            (Some(p), _) => self.position().wrapping_sub(p.first as u64),
            // The running block ended in a system call, settled already: its base is where
            // it began, not after it (the plugin settles a deferred call before the next
            // block starts, and publishes this for a stop between the two).
            (None, Some(base)) => base,
            (None, None) => self.position(),
        };
        (self.model.is_some() && !self.ended).then_some(base)
    }

    /// RTIT_TNT_BUFF as software reads it when tracing stops (1: empty), for the recording's
    /// end of trace.
    pub fn tnt_buff(&mut self) -> u64 {
        self.model
            .as_mut()
            .and_then(|m| m.rdmsr(rtit_replay_core::regs::msr::TNT_BUFF).ok())
            .unwrap_or(1)
    }

    /// The position and address of the last traced system call instruction (taken).
    pub fn take_last_syscall(&mut self) -> Option<(u64, u64)> {
        self.last_syscall.take()
    }

    /// Whether tracing has started.
    pub fn tracing(&self) -> bool {
        self.model.is_some()
    }

    /// Whether the program ended (an exit system call) or recording stopped.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The address of the last instruction that faulted.
    pub fn last_fault(&self) -> Option<u64> {
        self.last_fault
    }

    /// Takes the packet bytes written so far.
    pub fn take_trace(&mut self) -> Vec<u8> {
        let Some(model) = self.model.as_mut() else {
            return Vec::new();
        };
        let bytes = model.take_output();
        self.sync.taken(bytes.len());
        if let Some(o) = &mut self.oracle {
            o.compare(&bytes, model.traced());
        }
        bytes
    }

    /// The stretches of `code-ran.bin` cut since last taken (its magic first): with `end`,
    /// the stretch under way is cut where the history ends.
    pub fn take_code(&mut self, end: bool) -> Vec<u8> {
        if end {
            self.cut_code();
        }
        self.code.take()
    }

    /// Cuts the stretch of code under way where the history is now.
    fn cut_code(&mut self) {
        let position = self.position();
        self.code.cut(position, &self.blocks, self.pending.map(|p| p.id));
    }

    /// What the check of the fast path found in the bytes taken so far, if it is checked.
    pub fn checked_so_far(&self) -> Option<Checked> {
        match (&self.oracle, self.check) {
            (Some(o), _) => Some(o.checked()),
            (None, true) => Some(Checked::default()),
            (None, false) => None,
        }
    }

    /// Bytes waiting to be taken: the trace's ([`Self::take_trace`]) and the truth's, eight
    /// an instruction ([`Self::take_truth`]).
    pub fn buffered(&self) -> usize {
        let trace = self.model.as_ref().map_or(0, UnitModel::output_len);
        trace + self.truth.as_ref().map_or(0, |t| t.len() * 8)
    }

    /// Takes the truth recorded so far (with `truth`).
    pub fn take_truth(&mut self) -> Vec<u64> {
        self.truth.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Block `id` starts executing; `counts` are the previous block's. Returns the address
    /// tracing starts at when it starts now.
    pub fn executed(&mut self, id: u32, counts: Counts) -> Result<Option<u64>, ModelError> {
        if self.ended {
            return Ok(None);
        }
        if self.model.is_none() {
            return self.maybe_begin(id);
        }
        self.stats.blocks += 1;
        let next = self.hot[id as usize].start;
        // A delivery `rtit record` told is for the next block, whichever way it settles.
        if let (Some(p), None) = (self.pending, self.delivered) {
            if self.settle_common(p, counts, next) {
                self.code.note(id);
                self.pending = Some(Pending { id, first: 0 });
                self.syscall_base = None;
                return Ok(None);
            }
        }
        if let Some(p) = self.pending.take() {
            self.resolve(p, counts, Some(next));
        }
        self.leave_kernel(next);
        if let Some((handler, _)) = self.delivered.take() {
            self.deliveries.push((handler == next).then(|| self.position()));
        }
        self.code.note(id);
        self.pending = Some(Pending { id, first: 0 });
        self.syscall_base = None;
        Ok(None)
    }

    fn maybe_begin(&mut self, id: u32) -> Result<Option<u64>, ModelError> {
        let block = self.block(id);
        let first = match self.start {
            Start::Entry => Some(0),
            Start::At(at) => block.insns.iter().position(|i| i.ip == at),
        };
        let Some(first) = first else { return Ok(None) };
        let ip = block.insns[first].ip;
        let mut model = UnitModel::new(CpuState::user(ip, self.config.cr3_match), self.options);
        model.program(&self.config)?;
        if self.check {
            self.oracle = Some(Oracle::new(model.clone()));
        }
        self.model = Some(model);
        self.code.note(id);
        self.pending = Some(Pending { id, first });
        self.syscall_base = None;
        Ok(Some(ip))
    }

    /// A system call starts: the last instruction of the running block. What it does to the
    /// recording (`call`) is the caller's to say; exit and exit_group end it whatever is said.
    pub fn syscall(&mut self, number: u64, call: Call, counts: Counts) -> SyscallAction {
        if self.ended || self.model.is_none() {
            return SyscallAction::Continue;
        }
        let base = self.block_base();
        let Some(p) = self.pending.take() else {
            self.stats.anomalies += 1;
            return SyscallAction::Continue;
        };
        self.syscall_base = base;
        let block = self.block(p.id);
        if block.is_vsyscall() {
            self.pending = Some(p);
            return SyscallAction::Continue;
        }
        let (last, kept) = (block.last(), block.kept());
        if last.cofi != Cofi::Far(FarKind::Syscall) || counts.started != kept as u64 {
            self.stats.anomalies += 1;
        }
        self.retire_part(p.id, p.first.min(kept - 1), kept - 1);
        if let Call::Stops(reason) = call {
            // The trace ends before the call, as if interrupted there (FUP.PGD at it).
            self.ended = true;
            self.interrupt();
            return SyscallAction::Stop(reason);
        }
        let before = self.position();
        self.retire(last, KERNEL, Some(0));
        // Only a call the trace holds has a position (an IP filter may leave it out).
        if self.position() > before {
            self.last_syscall = Some((before, last.ip));
        }
        // A thread's `exit` ends the recording only where it is the last thread's.
        let ends = number == nr::EXIT_GROUP || (number == nr::EXIT && !self.threaded);
        if ends || call == Call::Ends {
            self.ended = true;
        } else {
            self.kernel = Kernel::Syscall {
                nr: number,
                nlip: last.nlip(),
            };
        }
        SyscallAction::Continue
    }

    /// Recording stops, asked to, as block `id` starts (`counts`: the previous block's): the
    /// previous block settles as it would have, and tracing stops with nothing more written,
    /// as the step backend stops it: the trace holds exactly [`Self::position`] instructions,
    /// the last branches' bits in RTIT_TNT_BUFF ([`Self::tnt_buff`]). Not an interrupt's
    /// FUP.PGD: an asynchronous FUP binds at the first place its IP comes up with no TNT bit
    /// pending (§4.3), which in a loop without conditional branches is its first iteration.
    pub fn stop_before(&mut self, id: u32, counts: Counts) {
        if !self.ended && self.model.is_some() {
            let next = self.block(id).start();
            if let Some(p) = self.pending.take() {
                self.resolve(p, counts, Some(next));
            }
            self.leave_kernel(next);
        }
        self.stop();
    }

    /// Recording stops, asked to, where it is: after the last block settled (inside a system
    /// call the trace ends with the call's FUP.PGD, the call counted). A block under way is
    /// left out, as what it did is not known yet.
    pub fn stop(&mut self) {
        self.pending = None;
        self.ended = true;
    }

    /// The process ends without an exit system call (a fatal signal: `fatal`, where QEMU said
    /// which); `counts` are the running block's. Returns the faulting instruction's address if
    /// it ended on a fault.
    pub fn finish(&mut self, counts: Counts, fatal: Option<i32>) -> Option<u64> {
        if self.ended || self.model.is_none() {
            return None;
        }
        self.ended = true;
        self.fatal = fatal;
        let before = self.stats.faults;
        if let Some(p) = self.pending.take() {
            self.resolve(p, counts, None);
        }
        if let Kernel::Syscall { nlip, .. } = self.kernel {
            // A fatal signal on the way back from a system call (abort's tgkill).
            self.sysret(nlip);
            self.interrupt();
        }
        (self.stats.faults > before).then_some(self.last_fault).flatten()
    }

    /// Settles the previous block `p` now that execution went on at `next` (`None`: the
    /// process died).
    fn resolve(&mut self, p: Pending, counts: Counts, next: Option<u64>) {
        let s = self.summaries[p.id as usize];
        if s.vsyscall {
            // The emulated call: a fault at the vsyscall address, then back to the caller.
            self.fault();
            return;
        }
        let n = s.kept as usize;
        let Some(started) = self.started(p, counts, next) else {
            self.unknown_cut(next);
            return;
        };
        if started <= p.first {
            self.stats.anomalies += 1;
            return;
        }
        let last = match started == n {
            true => s.last,
            false => self.blocks[p.id as usize].insns[started - 1],
        };
        let (target, rep, access, faults_without_memory) = (s.target, s.rep, s.access, s.faults_without_memory);
        self.retire_part(p.id, p.first, started - 1);
        if started < n {
            // It did not complete: re-run from it after a store into the block, or a fault.
            if next == Some(last.ip) {
                self.stats.restarts += 1;
            } else {
                self.fault();
            }
            return;
        }
        let legal = |to: u64| match last.cofi {
            Cofi::None => to == last.nlip(),
            Cofi::Conditional => Some(to) == target || to == last.nlip(),
            Cofi::DirectJump | Cofi::DirectCall => Some(to) == target,
            Cofi::IndirectJump | Cofi::IndirectCall | Cofi::Return => true,
            Cofi::Far(_) | Cofi::Exception => false,
        };
        // Whether the last instruction retired, where it did not go on to a successor.
        let frame = match (self.delivered, next) {
            (Some((at, resume)), Some(handler)) if at == handler => Some(resume),
            _ => None,
        };
        let completed = match (access, frame, next) {
            (Access::None, _, _) => Some(!faults_without_memory),
            // It resumes at itself: it faulted, unless it can go to itself and the signal is
            // not one its memory access raises.
            (_, Some(resume), _) if resume == last.ip => {
                let cannot_go_there = target != Some(resume) && !last.cofi.is_indirect();
                (cannot_go_there || matches!(self.delivered_signal, SIGSEGV | SIGBUS)).then_some(false)
            }
            (_, Some(_), _) => Some(true),
            (_, None, None) => self.fatal.map(|signal| !matches!(signal, SIGSEGV | SIGBUS)),
            (_, None, Some(_)) => None,
        };
        match (last.cofi, next) {
            (Cofi::Far(FarKind::Syscall), _) => {
                // The system call callback settles these; QEMU ran one without it.
                self.stats.anomalies += 1;
            }
            (Cofi::Far(_), _) => {
                // INT3, INT n: a trap into the kernel, which delivers a signal.
                self.retire(last, KERNEL, Some(0));
                self.kernel = Kernel::Delivering;
            }
            (Cofi::Exception, _) => self.fault(),
            // Another iteration of a REP string instruction, or a re-run after a store into
            // the block: not retired yet (a jump to itself is legal and retires).
            (_, Some(to)) if to == last.ip && (rep || target != Some(to)) => {
                if !rep {
                    self.stats.restarts += 1;
                }
            }
            (_, Some(to)) if legal(to) && !(last.cofi.is_indirect() && self.is_handler(to)) => {
                self.retire(last, to, None)
            }
            _ if completed == Some(false) => self.fault(),
            (cofi, next) => {
                let known = match cofi {
                    _ if completed.is_none() => None,
                    Cofi::None => Some(last.nlip()),
                    Cofi::DirectJump | Cofi::DirectCall => target,
                    _ => None,
                };
                match (known.or(frame.filter(|&to| legal(to))), next) {
                    (Some(to), _) => {
                        self.retire(last, to, None);
                        self.interrupt();
                    }
                    (None, Some(handler)) => self.gap(last, handler),
                    // The process died after it; where it went is unknown: it is left out.
                    (None, None) => self.stats.gaps += 1,
                }
            }
        }
    }

    /// After kernel work, the next user instruction is `next`.
    fn leave_kernel(&mut self, next: u64) {
        match std::mem::replace(&mut self.kernel, Kernel::User) {
            Kernel::User => {}
            Kernel::Syscall {
                nr: nr::RT_SIGRETURN, ..
            } => self.sysret(next),
            Kernel::Syscall { nlip, .. } => {
                self.sysret(nlip);
                if next != nlip {
                    // A signal delivered on the way back from the call.
                    self.interrupt();
                    self.kernel = Kernel::User;
                    self.iret(next);
                }
            }
            Kernel::Delivering => self.iret(next),
        }
    }
}

//! Values at any position without replaying from the start: forward checkpoints every
//! [`INTERVAL`] positions from the start, backward ones from the end, computed lazily the
//! first time a position near them is asked for, and the last state computed in each
//! direction kept for the next nearby question (a stepping gdb asks at neighbouring
//! positions).
//!
//! The passes feed each other at checkpoints: the forward pass restarts at every checkpoint
//! from its own state *merged with the backward state there*, and a question at `p` steps
//! backwards from the backward checkpoint above `p` merged with the forward state there. A
//! value one pass lost (a pointer through which a store went nowhere known) comes back from
//! the other, and is carried on by the semantics. The backward chain is computed by the
//! backward pass alone, so no value depends on itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use iced_x86::{Instruction, InstructionInfoFactory};
use rustc_hash::FxHashMap;

use super::known::Known;
use super::maps::MapEffect;
use super::reg::{RAX, RBX, RCX, RDX};
use super::transition::{self, Between};
use super::why::{self, Cause};
use super::State;
use crate::flow::decode_insn;
use crate::image::AddressSpace;
use crate::recording::cpuid::CpuidLeaf;
use crate::recording::{InsnResult, SignalEntry};
use crate::syscall::SyscallRecord;
use crate::timeline::{Cursor, Timeline};

/// RFLAGS.RF, which a fault's delivery sets in the flags the kernel saves.
const RF: u64 = 1 << 16;

/// Positions between checkpoints.
pub const INTERVAL: u64 = 4096;

/// Positions between the fine backward checkpoints kept for the interval walked last: going
/// forwards one step at a time (gdb's `stepi`, `next`) needs the backward state just above
/// each new position, which the coarse checkpoints are up to [`INTERVAL`] steps from.
const FINE: u64 = 64;

/// Whether the last answer at `q` is at least as close to `p` as a fine checkpoint could be.
fn fine_below(q: u64, p: u64) -> bool {
    q - p < FINE
}

/// What the engine is built from.
#[derive(Debug, Default)]
pub struct Inputs {
    /// The address at each position (the last may be an instruction that faulted).
    pub history: Arc<Timeline>,
    /// Positions `q` such that something the trace does not show happened between `q - 1`
    /// and `q`: an interrupt, a gap, an error.
    pub hard_barriers: Vec<u64>,
    /// Positions where tracing stopped or resumed: a system call if the instruction before is
    /// one, else untraced code ran.
    pub soft_barriers: Vec<u64>,
    /// Memory-map changes, by the position at which each took effect.
    pub map_changes: Vec<(u64, MapEffect)>,
    /// System call records by position.
    pub syscalls: Vec<SyscallRecord>,
    /// What instructions the trace cannot tell returned (cpuid, rdtsc …), by position.
    pub results: Vec<InsnResult>,
    /// Signal handlers' entries: their registers and frames, by position.
    pub signals: Vec<SignalEntry>,
    /// What CPUID returns on the recording's CPU model (qemu backend), where no result is
    /// logged per execution.
    pub cpuid: Vec<CpuidLeaf>,
    /// The state at position 0.
    pub start: State,
    /// The state at the last position, if the recording has it.
    pub end: Option<State>,
    /// Whether the last position is an instruction that faulted: the end state's registers
    /// are then those the kernel saved, with RF set by the fault's delivery (SDM vol. 3,
    /// 18.3.1.1), which is what gdb shows natively there.
    pub fault: bool,
}

/// The areas registered with a successful `rseq` call: its logged writes (step backend) or
/// its arguments (qemu backend).
fn rseq_areas(syscalls: &[SyscallRecord]) -> Vec<(u64, u64)> {
    let hex = |v: &String| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok();
    let mut areas = Vec::new();
    for r in syscalls.iter().filter(|r| r.nr == crate::syscall::nr::RSEQ) {
        if r.after.get("rax").and_then(hex) != Some(0) {
            continue;
        }
        areas.extend(r.writes.iter().map(|w| (w.address, w.bytes.len() as u64 / 2)));
        if let (Some(a), Some(n)) = (r.before.get("rdi").and_then(hex), r.before.get("rsi").and_then(hex)) {
            areas.push((a, n));
        }
    }
    areas
}

/// How the engine did (for `rtit check-values` and the cost report).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ValuesStats {
    /// Instructions stepped forwards.
    pub forward_steps: u64,
    /// Instructions stepped backwards.
    pub backward_steps: u64,
    /// Values both passes knew and disagreed on (a model error; reported as unknown).
    pub conflicts: u64,
    /// Checkpoints held.
    pub checkpoints: usize,
    /// Pages of memory the checkpoints hold (copied on write, so shared pages count once per
    /// checkpoint here: an upper bound).
    pub pages: usize,
}

/// Registers and memory at any position, known or unknown.
pub struct Values {
    space: AddressSpace,
    history: Arc<Timeline>,
    /// Where the passes are in the history (they move a position at a time).
    cursor: Cursor,
    hard: Vec<u64>,
    soft: Vec<u64>,
    map_changes: FxHashMap<u64, MapEffect>,
    syscalls: FxHashMap<u64, SyscallRecord>,
    results: FxHashMap<u64, InsnResult>,
    signals: FxHashMap<u64, SignalEntry>,
    cpuid: Vec<CpuidLeaf>,
    fault: bool,
    forward: Vec<State>,
    backward: BTreeMap<u64, State>,
    /// Forward checkpoint `k` merged with the backward state at its position.
    forward_seeded: FxHashMap<usize, State>,
    /// Backward checkpoints merged with the forward state at their positions.
    backward_seeded: FxHashMap<u64, State>,
    last_forward: Option<(u64, State)>,
    last_backward: Option<(u64, State)>,
    backward_fine: BTreeMap<u64, State>,
    decoded: FxHashMap<u64, Option<Instruction>>,
    factory: InstructionInfoFactory,
    stats: ValuesStats,
    /// How often the forward chain met each instruction nobody modelled (and whose result
    /// the recording did not give).
    unmodelled: FxHashMap<iced_x86::Mnemonic, u64>,
    /// Whether the last forward step took its instruction's result from the recording
    /// (`cpuid`, `rdtsc`, `xgetbv`, XSAVEC's header): not a gap in the semantics.
    answered: bool,
}

impl Values {
    /// An engine over a history.
    pub fn new(space: AddressSpace, mut inputs: Inputs) -> Self {
        let last = inputs.history.len().saturating_sub(1);
        // A registered rseq area is rewritten by the kernel at any return to the program:
        // unknown in every state (before its registration too: a harmless loss).
        let volatile = rseq_areas(&inputs.syscalls);
        inputs.start.mem.set_volatile(&volatile);
        let mut backward = BTreeMap::new();
        if let Some(mut end) = inputs.end {
            end.mem.set_volatile(&volatile);
            backward.insert(last, end);
        }
        let (mut hard, mut soft) = (inputs.hard_barriers, inputs.soft_barriers);
        hard.sort_unstable();
        soft.sort_unstable();
        Self {
            space,
            history: inputs.history,
            cursor: Cursor::default(),
            hard,
            soft,
            map_changes: inputs
                .map_changes
                .into_iter()
                .fold(FxHashMap::default(), |mut m, (p, e)| {
                    let entry: &mut MapEffect = m.entry(p).or_default();
                    entry.forget.extend(e.forget);
                    entry.zero.extend(e.zero);
                    entry.files.extend(e.files);
                    m
                }),
            syscalls: inputs.syscalls.into_iter().map(|r| (r.position, r)).collect(),
            results: inputs.results.into_iter().map(|r| (r.position, r)).collect(),
            signals: inputs.signals.into_iter().map(|r| (r.position, r)).collect(),
            cpuid: inputs.cpuid,
            fault: inputs.fault,
            forward: vec![inputs.start],
            backward,
            forward_seeded: FxHashMap::default(),
            backward_seeded: FxHashMap::default(),
            last_forward: None,
            last_backward: None,
            backward_fine: BTreeMap::new(),
            decoded: FxHashMap::default(),
            factory: InstructionInfoFactory::new(),
            stats: ValuesStats::default(),
            unmodelled: FxHashMap::default(),
            answered: false,
        }
    }

    /// Number of positions.
    pub fn len(&self) -> u64 {
        self.history.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.history.is_empty()
    }

    /// How the engine did so far.
    pub fn stats(&self) -> ValuesStats {
        let states = self
            .forward
            .iter()
            .chain(self.backward.values())
            .chain(self.forward_seeded.values())
            .chain(self.backward_seeded.values());
        let (checkpoints, pages) = states.fold((0, 0), |(n, p), s| (n + 1, p + s.mem.pages()));
        ValuesStats {
            checkpoints,
            pages,
            ..self.stats
        }
    }

    /// The address at `p`, through the cursor.
    fn ip(&mut self, p: u64) -> Option<u64> {
        self.cursor.ip(&self.history, p)
    }

    fn insn(&mut self, ip: u64) -> Option<Instruction> {
        let space = &self.space;
        *self.decoded.entry(ip).or_insert_with(|| decode_insn(space, ip).ok())
    }

    /// Carries `st` over what lies between `p` and `p + 1`, forwards (from `p` to `p + 1`) or
    /// backwards.
    fn cross(&mut self, st: &mut State, p: u64, forwards: bool) {
        let ip = self.ip(p).expect("a position of the history");
        let insn = self.insn(ip);
        let next = self.ip(p + 1);
        let hard = self.hard.binary_search(&(p + 1)).is_ok();
        let soft = self.soft.binary_search(&(p + 1)).is_ok();
        let between = match &insn {
            None => Between::Unknown,
            Some(i) if transition::is_syscall(i) && !hard => {
                let record = self.syscalls.get(&p).filter(|r| r.ip == ip);
                // Back at itself with no handler between: the call is restarted.
                if next == Some(ip) {
                    Between::Restart(record)
                } else {
                    Between::Syscall(record)
                }
            }
            Some(_) if hard || soft => Between::Unknown,
            Some(i) => Between::Insn { insn: i, next },
        };
        let cause = match (&insn, between) {
            (None, _) => Cause::Undecodable,
            (_, Between::Unknown) => Cause::Untraced,
            (_, Between::Insn { insn, .. }) => Cause::Inputs(insn.mnemonic()),
            (_, Between::Syscall(_) | Between::Restart(_)) => Cause::Syscall(u16::MAX),
        };
        why::begin(cause, p);
        // A system call after which the next instruction is not the one after it (nor a
        // new program, nor a restored context) returned into a signal handler: the kernel
        // set the registers and wrote a signal frame the trace does not show.
        let signal = matches!((&insn, between), (Some(i), Between::Syscall(_))
            if next.is_some_and(|next| next != i.next_ip())
                && !self.syscalls.get(&p).is_some_and(|r| transition::changes_context(r.nr)));
        let changes = self.map_changes.get(&(p + 1));
        if forwards {
            // The map change first: a system call's log holds what the new mapping shows
            // (a mapped file that is not an image).
            if let Some(e) = changes {
                why::begin(Cause::MapChange, p);
                e.forget.iter().for_each(|&(a, n)| st.mem.forget(a, n));
                e.zero.iter().for_each(|&(a, n)| st.mem.write(a, &vec![0; n as usize]));
                for (start, len, path, offset) in &e.files {
                    if let Some(bytes) = self.space.file_mapping_bytes(path, *len, *offset) {
                        st.mem.write(*start, bytes);
                    }
                }
                why::begin(cause, p);
            }
            // A signal delivery the recorder logged (step backend): only the kernel ran
            // between, and it wrote the registers and the frame, which the log holds. The
            // instruction before retired (a fault or an interrupt comes after it), unless it
            // is a REP string instruction, which an interrupt can stop half-way.
            let entry = self.signals.get(&(p + 1)).filter(|e| next == Some(e.ip));
            // CPUID from the model's table, for its inputs before it runs.
            let cpuid = match (&insn, between) {
                (Some(i), Between::Insn { .. }) if i.mnemonic() == iced_x86::Mnemonic::Cpuid => {
                    match (st.regs.get(RAX), st.regs.get(RCX)) {
                        (Some(a), Some(c)) => crate::recording::cpuid::lookup(&self.cpuid, a as u32, c as u32),
                        _ => None,
                    }
                }
                _ => None,
            };
            // An XSAVEC whose header the recorder logged writes only what is in use: its area
            // as it was, to keep what it leaves alone.
            let xsave_area = match (&insn, between) {
                (Some(i), Between::Insn { .. }) => super::xsave::xsavec_area(st, i, &self.space),
                _ => None,
            };
            let delivered = match (entry.filter(|e| e.only_kernel), &insn, between) {
                (Some(_), Some(i), Between::Unknown) if !super::forward::is_repeated_string(i) => {
                    transition::forward(
                        st,
                        Between::Insn { insn: i, next: None },
                        &self.space,
                        &mut self.factory,
                    );
                    true
                }
                (Some(_), Some(_), Between::Syscall(_)) if signal => {
                    transition::forward(st, between, &self.space, &mut self.factory);
                    true
                }
                _ => {
                    transition::forward(st, between, &self.space, &mut self.factory);
                    false
                }
            };
            let logged = self.logged_result(p, ip, between);
            self.answered = logged.is_some() || cpuid.is_some();
            if let Some(r) = self.logged_result(p, ip, between) {
                transition::set_named(st, &r.after);
                // The XSAVE header XSAVEC wrote, read by the step backend after it.
                let header = r
                    .after
                    .get("xstate_bv")
                    .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok());
                if let (Some(i), Some(h)) = (&insn, header) {
                    super::xsave::xsavec_logged(st, i, h, xsave_area);
                }
            } else if let Some(out) = cpuid {
                for (r, v) in [RAX, RBX, RCX, RDX].into_iter().zip(out) {
                    st.regs.set(r, Some(u64::from(v)));
                }
            }
            if delivered {
                why::insist(Cause::Signal);
                st.regs.forget_all();
                st.flags.forget(super::flags::ALL);
                st.vec.forget_all();
                st.mxcsr = Default::default();
            } else if signal {
                why::insist(Cause::Signal);
                st.forget_all();
            }
            if let Some(e) = entry {
                transition::set_named(st, &e.registers);
                if let Some(bytes) = e.frame.data() {
                    st.mem.write(e.frame.address, &bytes);
                }
            }
            if self.fault && p + 2 == self.len() {
                // RF as the kernel saved it at the fault: the end state says.
                st.flags.forget(RF);
            }
            self.stats.forward_steps += 1;
        } else {
            if let Some(e) = changes {
                why::insist(Cause::MapChange);
                e.touched().for_each(|(a, n)| st.mem.forget(a, n));
            }
            if signal {
                why::insist(Cause::Signal);
                st.forget_all();
            }
            // What the instruction wrote is known after it (and unknown before it).
            if let Some(r) = self.logged_result(p, ip, between) {
                transition::set_named(st, &r.after);
            }
            if self.fault && p + 2 == self.len() {
                // The saved RF was the fault's, not the instructions' before it.
                st.flags.forget(RF);
            }
            transition::backward(st, between, &self.space, &mut self.factory);
            self.stats.backward_steps += 1;
        }
    }

    /// The logged result of the instruction at `p`, if it ran there with nothing between.
    fn logged_result(&self, p: u64, ip: u64, between: Between<'_>) -> Option<&InsnResult> {
        let r = self.results.get(&p).filter(|r| r.ip == ip)?;
        matches!(between, Between::Insn { .. }).then_some(r)
    }

    fn step_forward(&mut self, st: &mut State, p: u64) {
        self.cross(st, p, true);
    }

    fn step_backward(&mut self, st: &mut State, p: u64) {
        self.cross(st, p, false);
    }

    /// Forward checkpoint `k`: the forward pass from checkpoint `k - 1` merged with the
    /// backward pass there, so what the forward pass lost (a stack pointer, memory after a
    /// store through an unknown address) comes back at every checkpoint the backward pass
    /// knows it at.
    fn forward_checkpoint(&mut self, k: usize) -> &State {
        while self.forward.len() <= k {
            let from = (self.forward.len() as u64 - 1) * INTERVAL;
            let mut st = self.seeded_forward(self.forward.len() - 1);
            for q in from..from + INTERVAL {
                self.step_forward(&mut st, q);
                match why::insisted() {
                    Some(Cause::Unmodelled(m)) if !self.answered => *self.unmodelled.entry(m).or_default() += 1,
                    _ => {}
                }
            }
            self.forward.push(st);
        }
        &self.forward[k]
    }

    /// The forward state at `p`.
    fn forward_at(&mut self, p: u64) -> State {
        let k = (p / INTERVAL) as usize;
        let (mut at, mut st) = match self.last_forward.take() {
            Some((q, st)) if q <= p && q >= k as u64 * INTERVAL => (q, st),
            _ => (k as u64 * INTERVAL, self.seeded_forward(k)),
        };
        while at < p {
            self.step_forward(&mut st, at);
            at += 1;
        }
        self.last_forward = Some((p, st.clone()));
        st
    }

    /// Forward checkpoint `k` merged with the backward pass's state there.
    fn seeded_forward(&mut self, k: usize) -> State {
        if let Some(st) = self.forward_seeded.get(&k) {
            return st.clone();
        }
        let mut st = self.forward_checkpoint(k).clone();
        let at = k as u64 * INTERVAL;
        if let Some(b) = self.backward_checkpoint_at(at) {
            st.absorb(&b);
        }
        self.forward_seeded.insert(k, st.clone());
        st
    }

    /// The backward pass's own state at checkpoint position `at`, if it reaches there.
    fn backward_checkpoint_at(&mut self, at: u64) -> Option<State> {
        let top = *self.backward.keys().next_back()?;
        if at > top {
            return None;
        }
        self.extend_backward(at);
        self.backward.get(&at).cloned()
    }

    /// Makes backward checkpoints down to `p`.
    fn extend_backward(&mut self, p: u64) {
        self.extend_backward_with(p, &mut |_, _| {});
    }

    /// Makes now what the first question at position 0 would otherwise make while gdb waits:
    /// the backward checkpoints from the end of the history down to 0, a walk over the whole
    /// history (about 50 ns a position). `progress(done, total)` is called at each checkpoint
    /// with the positions walked so far and in all.
    pub fn prepare(&mut self, mut progress: impl FnMut(u64, u64)) {
        self.extend_backward_with(0, &mut progress);
    }

    /// [`Self::extend_backward`], telling `progress` how far it got.
    fn extend_backward_with(&mut self, p: u64, progress: &mut dyn FnMut(u64, u64)) {
        let Some(&top) = self.backward.keys().next_back() else {
            return;
        };
        // Checkpoints at multiples of INTERVAL, made going down from the end.
        loop {
            let Some((&low, _)) = self.backward.iter().next() else {
                return;
            };
            if low <= p || low == 0 {
                break;
            }
            let target = if low % INTERVAL == 0 {
                low - INTERVAL
            } else {
                low - low % INTERVAL
            };
            let mut st = self.backward[&low].clone();
            let mut q = low;
            while q > target {
                q -= 1;
                self.step_backward(&mut st, q);
            }
            self.backward.insert(target, st);
            progress(top - target, top.saturating_sub(p));
        }
    }

    /// A backward checkpoint merged with the forward pass's state there.
    fn seeded_backward(&mut self, at: u64) -> State {
        if let Some(st) = self.backward_seeded.get(&at) {
            return st.clone();
        }
        let mut st = self.backward[&at].clone();
        if at % INTERVAL == 0 {
            let f = self.forward_checkpoint((at / INTERVAL) as usize).clone();
            st.absorb(&f);
        }
        self.backward_seeded.insert(at, st.clone());
        st
    }

    /// The backward state at `p` (unknown everything if the recording has no end state).
    fn backward_at(&mut self, p: u64) -> State {
        let Some(&top) = self.backward.keys().next_back() else {
            return State::unknown();
        };
        if p > top {
            return State::unknown();
        }
        self.extend_backward(p);
        let (&from, _) = self.backward.range(p..).next().expect("a checkpoint at or above p");
        // The nearest state at or above p: the last answer, a fine checkpoint of the interval
        // walked last, or the (seeded) checkpoint.
        let fine = self
            .backward_fine
            .range(p..)
            .next()
            .filter(|(&q, _)| q <= from)
            .map(|(&q, s)| (q, s.clone()));
        let (mut at, mut st) = match (self.last_backward.take(), fine) {
            (Some((q, st)), _) if q >= p && q <= from && fine_below(q, p) => (q, st),
            (_, Some((q, st))) => (q, st),
            _ => {
                self.backward_fine.clear();
                (from, self.seeded_backward(from))
            }
        };
        while at > p {
            at -= 1;
            self.step_backward(&mut st, at);
            if at % FINE == 0 && at > p {
                self.backward_fine.insert(at, st.clone());
            }
        }
        self.last_backward = Some((p, st.clone()));
        st
    }

    /// Both passes' states at `p`.
    pub fn at(&mut self, p: u64) -> Option<Known> {
        if p >= self.len() {
            return None;
        }
        let forward = self.forward_at(p);
        let backward = self.backward_at(p);
        Some(Known::new(forward, backward, self.space.clone()))
    }

    /// The instructions nobody modelled that the forward chain met (each position of the
    /// history it walked once), most frequent first: what to model next.
    pub fn unmodelled(&self) -> Vec<(iced_x86::Mnemonic, u64)> {
        let mut v: Vec<_> = self.unmodelled.iter().map(|(&m, &n)| (m, n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    /// Records a conflict seen by a caller of [`Known`].
    pub fn note_conflicts(&mut self, n: u64) {
        self.stats.conflicts += n;
    }
}

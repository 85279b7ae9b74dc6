//! One position to the next, in either direction, with everything the recording says about
//! what lies between (system calls, signals, map changes, logged results): the walk both of
//! the engine's passes make. A walker is owned by one thread; the inputs it reads are shared,
//! so the engine can walk on several threads at once (the chains are made in the background,
//! questions answered in the foreground).

use std::sync::Arc;

use iced_x86::{Instruction, InstructionInfoFactory, Mnemonic};
use rustc_hash::FxHashMap;

use super::compiled::Compiled;
use super::maps::MapEffect;
use super::nearby::Nearby;
use super::reg::{RAX, RBX, RCX, RDX};
use super::transition::{self, Between};
use super::why::{self, Cause};
use super::writes::Written;
use super::State;
use crate::image::AddressSpace;
use crate::recording::cpuid::CpuidLeaf;
use crate::recording::{InsnResult, SignalEntry};
use crate::syscall::SyscallRecord;
use crate::timeline::{Cursor, Timeline};

/// RFLAGS.RF, which a fault's delivery sets in the flags the kernel saves.
const RF: u64 = 1 << 16;

/// The areas registered with a successful `rseq` call: its logged writes (step backend) or
/// its arguments (qemu backend).
pub(crate) fn rseq_areas(syscalls: &[SyscallRecord]) -> Vec<(u64, u64)> {
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

/// An instruction of the history and what it writes, if summarised.
pub(super) type Decoded = (Instruction, Option<Written>);

/// What every walk reads: the history and what the recording says happened in it.
pub(super) struct Shared {
    pub(super) space: AddressSpace,
    pub(super) history: Arc<Timeline>,
    /// Sorted positions `q` such that something the trace does not show happened between
    /// `q - 1` and `q`.
    pub(super) hard: Vec<u64>,
    /// Sorted positions where tracing stopped or resumed.
    pub(super) soft: Vec<u64>,
    pub(super) map_changes: FxHashMap<u64, MapEffect>,
    pub(super) syscalls: FxHashMap<u64, SyscallRecord>,
    pub(super) results: FxHashMap<u64, InsnResult>,
    pub(super) signals: FxHashMap<u64, SignalEntry>,
    /// At each switch between threads, the outgoing thread's entry where it runs next
    /// (`inputs::resumes`): its registers before the switch, for the backward walk.
    pub(super) resumes: FxHashMap<u64, SignalEntry>,
    pub(super) cpuid: Vec<CpuidLeaf>,
    /// Whether the last position is an instruction that faulted.
    pub(super) fault: bool,
    /// Sorted positions `p` at which crossing to `p + 1` needs more than the instruction's
    /// semantics: a barrier, a map change or a signal entry at `p + 1`, a logged system call
    /// or result at `p`, the fault at the end ([`Shared::find_special`]). Every other
    /// position of a plain instruction takes the walk's fast path.
    pub(super) special: Vec<u64>,
    /// The instruction of every slot of the history's blocks ([`Cursor::at`]), `None` where
    /// the bytes do not decode: decoded once for every walk (a few hundred thousand distinct
    /// instructions on python3, some tens of milliseconds), where each walk decoding its own
    /// as it met them missed the cache at nearly every step through one more table.
    pub(super) insns: Vec<Option<Decoded>>,
    /// The instruction of every slot translated for the forward walk, where it is of a form
    /// translated ([`Compiled`]).
    pub(super) compiled: Vec<Option<Compiled>>,
}

impl Shared {
    /// Fills [`Shared::special`] and [`Shared::insns`] from the rest.
    pub(super) fn prepare(&mut self) {
        let mut stream = crate::flow::InsnStream::new(&self.space);
        let mut factory = InstructionInfoFactory::new();
        self.insns = (self.history.slot_ips().iter())
            .map(|&ip| stream.insn(ip).ok().map(|i| (i, Written::of(&i, &mut factory))))
            .collect();
        self.compiled = (self.insns.iter())
            .map(|d| d.as_ref().and_then(|(i, _)| Compiled::translate(i, &self.space)))
            .collect();
        let before = |q: &u64| q.checked_sub(1);
        let mut v: Vec<u64> = self.hard.iter().filter_map(before).collect();
        v.extend(self.soft.iter().filter_map(before));
        v.extend(self.map_changes.keys().filter_map(before));
        v.extend(self.signals.keys().filter_map(before));
        v.extend(self.syscalls.keys().copied());
        v.extend(self.results.keys().copied());
        if self.fault {
            v.extend(self.history.len().checked_sub(2));
        }
        v.sort_unstable();
        v.dedup();
        self.special = v;
    }

    /// The address of the instruction at `slot` (an instruction knows its own; one whose
    /// bytes do not decode has the timeline's).
    #[inline]
    fn ip(&self, slot: usize) -> u64 {
        match &self.insns[slot] {
            Some((i, _)) => i.ip(),
            None => self.history.slot_ips()[slot],
        }
    }

    /// Whether the instruction at a slot is plain: its crossing is its semantics alone unless
    /// its position is special (not a system call, nor one whose result the recording may
    /// give).
    fn plain(insn: &Instruction) -> bool {
        !matches!(
            insn.mnemonic(),
            Mnemonic::Syscall | Mnemonic::Cpuid | Mnemonic::Xgetbv | Mnemonic::Xsavec | Mnemonic::Xsavec64
        )
    }

    /// The logged result of the instruction at `p`, if it ran there with nothing between.
    fn logged_result(&self, p: u64, ip: u64, between: Between<'_>) -> Option<&InsnResult> {
        let r = self.results.get(&p).filter(|r| r.ip == ip)?;
        matches!(between, Between::Insn { .. }).then_some(r)
    }
}

/// Steps walked, by direction.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Steps {
    pub(super) forward: u64,
    pub(super) backward: u64,
}

/// A walk over the shared history, with its own position and decode caches.
pub(super) struct Walker {
    pub(super) shared: Arc<Shared>,
    cursor: Cursor,
    /// Where the walk is in the barriers and the special positions.
    near_hard: Nearby,
    near_soft: Nearby,
    near_special: Nearby,
    /// Where [`Self::forward_to`] and [`Self::backward_to`] meet the special positions next.
    next_special: Nearby,
    last_special: Nearby,
    factory: InstructionInfoFactory,
    pub(super) stats: Steps,
    /// Whether the last forward step took its instruction's result from the recording
    /// (`cpuid`, `rdtsc`, `xgetbv`, XSAVEC's header): not a gap in the semantics.
    pub(super) answered: bool,
    /// If set, the forward steps over an instruction nobody modelled (whose result the
    /// recording did not give), by mnemonic: the chains report them.
    pub(super) unmodelled: Option<FxHashMap<Mnemonic, u64>>,
}

impl Walker {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        Self {
            cursor: Cursor::default(),
            near_hard: Nearby::default(),
            near_soft: Nearby::default(),
            near_special: Nearby::default(),
            next_special: Nearby::default(),
            last_special: Nearby::default(),
            factory: InstructionInfoFactory::new(),
            stats: Steps::default(),
            answered: false,
            unmodelled: None,
            shared,
        }
    }

    /// Number of positions.
    pub(super) fn len(&self) -> u64 {
        self.shared.history.len()
    }

    /// The address at `p`, its instruction and the address at `p + 1`, from the table of
    /// instructions (an instruction knows its address).
    #[inline]
    fn insn_at(&mut self, p: u64) -> (usize, u64, Option<Decoded>, Option<u64>) {
        let shared = &self.shared;
        let (slot, next) = self
            .cursor
            .slots(&shared.history, p)
            .expect("a position of the history");
        (slot, shared.ip(slot), shared.insns[slot], next.map(|n| shared.ip(n)))
    }

    /// The instruction at `p` and what it writes (`None`: its bytes do not decode).
    pub(super) fn insn(&mut self, p: u64) -> Option<Decoded> {
        self.insn_at(p).2
    }

    /// Carries `st` over what lies between `p` and `p + 1`, forwards (from `p` to `p + 1`) or
    /// backwards.
    fn cross(&mut self, st: &mut State, p: u64, forwards: bool) {
        let (slot, ip, decoded, next) = self.insn_at(p);
        let (insn, written) = (decoded.map(|d| d.0), decoded.and_then(|d| d.1));
        // Nearly every step: an instruction and nothing else ([`Shared::special`]), what the
        // rest of this function comes to for it without its lookups.
        if let Some(i) = &insn {
            if Shared::plain(i) && !self.near_special.contains(&self.shared.special, p) {
                return self.plain_step(st, p, slot, i, written, next, forwards);
            }
        }
        let hard = self.near_hard.contains(&self.shared.hard, p + 1);
        let soft = self.near_soft.contains(&self.shared.soft, p + 1);
        let between = match &insn {
            None => Between::Unknown,
            Some(i) if transition::is_syscall(i) && !hard => {
                let record = self.shared.syscalls.get(&p).filter(|r| r.ip == ip);
                // Back at itself with no handler between: the call is restarted.
                if next == Some(ip) {
                    Between::Restart(record)
                } else {
                    Between::Syscall(record)
                }
            }
            Some(_) if hard || soft => Between::Unknown,
            Some(i) => Between::Insn { insn: i, next, written },
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
                && !self.shared.syscalls.get(&p).is_some_and(|r| transition::changes_context(r.nr)));
        let changes = self.shared.map_changes.get(&(p + 1));
        if forwards {
            // The map change first: a system call's log holds what the new mapping shows
            // (a mapped file that is not an image).
            if let Some(e) = changes {
                why::begin(Cause::MapChange, p);
                e.apply(&mut st.mem, &self.shared.space);
                why::begin(cause, p);
            }
            // A signal delivery the recorder logged (step backend): only the kernel ran
            // between, and it wrote the registers and the frame, which the log holds. The
            // instruction before retired (a fault or an interrupt comes after it), unless it
            // is a REP string instruction, which an interrupt can stop half-way.
            let entry = self.shared.signals.get(&(p + 1)).filter(|e| next == Some(e.ip));
            // CPUID and XGETBV from the model's table, for their inputs before they run.
            let cpuid = match (&insn, between) {
                (Some(i), Between::Insn { .. }) if i.mnemonic() == Mnemonic::Cpuid => {
                    match (st.regs.get(RAX), st.regs.get(RCX)) {
                        (Some(a), Some(c)) => crate::recording::cpuid::lookup(&self.shared.cpuid, a as u32, c as u32)
                            .map(|out| [RAX, RBX, RCX, RDX].into_iter().zip(out).collect::<Vec<_>>()),
                        _ => None,
                    }
                }
                (Some(i), Between::Insn { .. }) if i.mnemonic() == Mnemonic::Xgetbv => st
                    .regs
                    .get(RCX)
                    .and_then(|c| crate::recording::cpuid::xgetbv(&self.shared.cpuid, c as u32))
                    .map(|v| vec![(RAX, v as u32), (RDX, (v >> 32) as u32)]),
                _ => None,
            };
            // An XSAVEC whose header the recorder logged writes only what is in use: its area
            // as it was, to keep what it leaves alone.
            let xsave_area = match (&insn, between) {
                (Some(i), Between::Insn { .. }) => super::xsave::xsavec_area(st, i, &self.shared.space),
                _ => None,
            };
            let delivered = match (entry.filter(|e| e.only_kernel), &insn, between) {
                (Some(_), Some(i), Between::Unknown) if !super::forward::is_repeated_string(i) => {
                    transition::forward(
                        st,
                        Between::Insn {
                            insn: i,
                            next: None,
                            written,
                        },
                        &self.shared.space,
                        &mut self.factory,
                    );
                    true
                }
                (Some(_), Some(_), Between::Syscall(_)) if signal => {
                    transition::forward(st, between, &self.shared.space, &mut self.factory);
                    true
                }
                _ => {
                    transition::forward(st, between, &self.shared.space, &mut self.factory);
                    false
                }
            };
            let logged = self.shared.logged_result(p, ip, between);
            self.answered = logged.is_some() || cpuid.is_some();
            if let Some(r) = self.shared.logged_result(p, ip, between) {
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
                for (r, v) in out {
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
            if self.shared.fault && p + 2 == self.shared.history.len() {
                // RF as the kernel saved it at the fault: the end state says.
                st.flags.forget(RF);
            }
            self.stats.forward += 1;
        } else {
            if let Some(e) = changes {
                why::insist(Cause::MapChange);
                e.touched().for_each(|(a, n)| st.mem.forget(a, n));
            }
            if signal {
                why::insist(Cause::Signal);
                st.forget_all();
            }
            // A logged entry at the next position (a handler's, or another thread's where the
            // threads switch) set every register there: none of them tells the registers
            // before it. A switch after `rt_sigreturn` is one no `signal` above catches (the
            // call changes the context), and the other thread's registers went back into
            // the handler (a conflict check-values found).
            let entry = self.shared.signals.get(&(p + 1)).filter(|e| next == Some(e.ip));
            if entry.is_some() {
                why::insist(Cause::Signal);
                st.regs.forget_all();
                st.flags.forget(super::flags::ALL);
                st.vec.forget_all();
                st.mxcsr = Default::default();
            }
            // A switch where only the kernel ran: the outgoing thread's last instruction
            // retired (as the forward walk takes it), memory is what it left, and its
            // registers are those it resumes with later, if it resumes where it left (its
            // instruction goes there), not in a signal handler.
            let switch = entry.filter(|e| e.only_kernel && e.switch.is_some_and(|s| s.from != s.to));
            let mut between = between;
            if let (Some(_), Some(i), Between::Unknown) = (switch, &insn, between) {
                if !super::forward::is_repeated_string(i) {
                    between = Between::Insn {
                        insn: i,
                        next: None,
                        written,
                    };
                    let resumed = self.shared.resumes.get(&(p + 1));
                    if let Some(r) = resumed.filter(|r| goes_to(i, r.ip)) {
                        transition::set_named(st, &r.registers);
                    }
                }
            }
            // What the instruction wrote is known after it (and unknown before it).
            if let Some(r) = self.shared.logged_result(p, ip, between) {
                transition::set_named(st, &r.after);
            }
            if self.shared.fault && p + 2 == self.shared.history.len() {
                // The saved RF was the fault's, not the instructions' before it.
                st.flags.forget(RF);
            }
            transition::backward(st, between, &self.shared.space, &mut self.factory);
            self.stats.backward += 1;
        }
    }

    pub(super) fn step_forward(&mut self, st: &mut State, p: u64) {
        self.cross(st, p, true);
        self.count_unmodelled();
    }

    /// Counts the step just made in [`Self::unmodelled`] if it was over an unmodelled
    /// instruction.
    #[inline]
    fn count_unmodelled(&mut self) {
        if let Some(counts) = &mut self.unmodelled {
            match why::insisted() {
                Some(Cause::Unmodelled(m)) if !self.answered => *counts.entry(m).or_default() += 1,
                _ => {}
            }
        }
    }

    /// Walks forwards from `p` to `to`: what a [`Self::step_forward`] at each position
    /// between does, with the plain instructions (those not at a special position:
    /// [`Shared::special`]) taken from the table of instructions a run at a time, with no
    /// cursor move and no lookup each inside a run (those were a fifth of the background
    /// fill's walk).
    pub(super) fn forward_to(&mut self, st: &mut State, mut p: u64, to: u64) {
        let shared = self.shared.clone();
        while p < to {
            let Some((slot, _, end)) = self.cursor.run_of(&shared.history, p) else {
                return self.step_forward(st, p);
            };
            let special = self.next_special.next_from(&shared.special, p).unwrap_or(u64::MAX);
            // Inside the run, each position's next is the slot after its own.
            let stop = to.min(end - 1).min(special);
            let ips = shared.history.slot_ips();
            for (k, q) in (p..stop).enumerate() {
                // A translated instruction first: nearly every one of a run.
                if let Some(c) = shared.compiled[slot + k].as_ref().filter(|_| !st.regs.any_partial()) {
                    self.compiled_step(st, q, c, Some(ips[slot + k + 1]));
                    continue;
                }
                match &shared.insns[slot + k] {
                    Some((i, written)) if Shared::plain(i) => {
                        self.plain_step(st, q, slot + k, i, *written, Some(shared.ip(slot + k + 1)), true);
                        self.count_unmodelled();
                    }
                    _ => self.step_forward(st, q),
                }
            }
            p = stop;
            if p >= to {
                break;
            }
            // The run's last position, whose next is the next run's first slot.
            if p + 1 == end && p != special {
                if let Some((s, Some(next))) = self.cursor.slots(&shared.history, p) {
                    if let Some(c) = shared.compiled[s].as_ref().filter(|_| !st.regs.any_partial()) {
                        self.compiled_step(st, p, c, Some(ips[next]));
                        p += 1;
                        continue;
                    }
                    if let Some((i, written)) = shared.insns[s].as_ref().filter(|(i, _)| Shared::plain(i)) {
                        self.plain_step(st, p, s, i, *written, Some(shared.ip(next)), true);
                        self.count_unmodelled();
                        p += 1;
                        continue;
                    }
                }
            }
            self.step_forward(st, p);
            p += 1;
        }
    }

    /// Walks backwards from `p` to `to` (`to <= p`): what a [`Self::step_backward`] at each
    /// position from `p - 1` down to `to` does, the plain instructions inside a run taken as
    /// [`Self::forward_to`] takes them.
    pub(super) fn backward_to(&mut self, st: &mut State, mut p: u64, to: u64) {
        let shared = self.shared.clone();
        while p > to {
            let q = p - 1;
            let Some((slot, start, end)) = self.cursor.run_of(&shared.history, q) else {
                return self.cross(st, q, false);
            };
            let special = self.last_special.last_until(&shared.special, q);
            // The run's last position (its next is in the next run) or a special one: by
            // itself.
            if q + 1 == end || special == Some(q) {
                self.cross(st, q, false);
                p = q;
                continue;
            }
            let low = start.max(to).max(special.map_or(0, |s| s + 1));
            for x in (low..=q).rev() {
                let s = slot - (q - x) as usize;
                match &shared.insns[s] {
                    Some((i, written)) if Shared::plain(i) => {
                        self.plain_step(st, x, s, i, *written, Some(shared.ip(s + 1)), false);
                    }
                    _ => self.cross(st, x, false),
                }
            }
            p = low;
        }
    }

    /// A step over a plain instruction at `q` (in `slot`) that nothing else happens at, `next`
    /// having run after it: nearly every step of every walk ([`Self::cross`]'s first case,
    /// and the runs of [`Self::forward_to`] and [`Self::backward_to`]). Forwards, one of a
    /// translated form goes by its translation unless a register is partly known (rare).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn plain_step(
        &mut self,
        st: &mut State,
        q: u64,
        slot: usize,
        i: &Instruction,
        written: Option<Written>,
        next: Option<u64>,
        forwards: bool,
    ) {
        if forwards && !st.regs.any_partial() {
            if let Some(c) = self.shared.compiled[slot] {
                return self.compiled_step(st, q, &c, next);
            }
        }
        why::begin(Cause::Inputs(i.mnemonic()), q);
        let between = Between::Insn { insn: i, next, written };
        if forwards {
            transition::forward(st, between, &self.shared.space, &mut self.factory);
            self.answered = false;
            self.stats.forward += 1;
        } else {
            transition::backward(st, between, &self.shared.space, &mut self.factory);
            self.stats.backward += 1;
        }
    }

    /// A forward step over a plain instruction at `q` by its translation (the registers all
    /// known or unknown: none partly), `next` having run after it.
    #[inline(always)]
    fn compiled_step(&mut self, st: &mut State, q: u64, c: &Compiled, next: Option<u64>) {
        why::begin(Cause::Inputs(c.mnemonic()), q);
        c.forward(st, next, &self.shared.space);
        self.answered = false;
        self.stats.forward += 1;
    }

    pub(super) fn step_backward(&mut self, st: &mut State, p: u64) {
        self.cross(st, p, false);
    }
}

/// Whether `insn` can go on to `to` by itself: its next instruction, or a direct branch's
/// target; an indirect branch or a return, whose target is not known here, can go anywhere
/// (a thread's entry where it resumes holds its registers as it stopped, with where it
/// went: a signal delivered to it comes after that entry, with an entry of its own).
fn goes_to(insn: &Instruction, to: u64) -> bool {
    use iced_x86::FlowControl;
    match insn.flow_control() {
        FlowControl::Next => insn.next_ip() == to,
        FlowControl::ConditionalBranch => insn.next_ip() == to || insn.near_branch_target() == to,
        FlowControl::UnconditionalBranch | FlowControl::Call => insn.near_branch_target() == to,
        FlowControl::IndirectBranch | FlowControl::IndirectCall | FlowControl::Return => true,
        _ => false,
    }
}

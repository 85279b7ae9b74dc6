//! Values at any position without replaying from the start: forward checkpoints from the
//! start, backward ones from the end, made in the background ([`super::chains`]), and the
//! last state computed in each direction kept for the next nearby question (a stepping gdb
//! asks at neighbouring positions).
//!
//! The passes feed each other at checkpoints: the forward pass restarts at every checkpoint
//! from its own state *merged with the backward state there*, and a question at `p` steps
//! backwards from the backward checkpoint above `p` merged with the forward state there. A
//! value one pass lost (a pointer through which a store went nowhere known) comes back from
//! the other, and is carried on by the semantics. The backward chain is computed by the
//! backward pass alone, so no value depends on itself.
//!
//! A question walks at most an interval each way, whatever the history's size: where a
//! chain has not got to yet, it starts from what there is (the provisional forward chain,
//! the backward checkpoints made so far, or nothing), which knows less but is never wrong.
//! On a history of up to [`WAIT_BELOW`] positions a question waits for the chains instead,
//! so the answers there never depend on timing; on larger ones they become complete when
//! the chains are ([`Values::complete`]), and a question waits for a forward checkpoint
//! near it only if one is due within the client's patience ([`Values::set_patience`]): a
//! crash at the end of a python3 run gets its registers after a couple of seconds, a
//! position in a history of billions its provisional answer at once.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

mod settle;
mod stats;
mod watch;

pub use stats::ValuesStats;

use super::anchored::Anchored;
use super::chains::{Chains, Made, Plan, ValuesProgress};
use super::inputs::Inputs;
use super::known::Known;
use super::walker::{rseq_areas, Steps, Walker};
use super::State;
use crate::image::AddressSpace;
use crate::syscall::SyscallRecord;

/// Positions between checkpoints, at least (short histories: a question walks at most this
/// far each way, well under a millisecond).
pub const INTERVAL: u64 = 4096;

/// Positions between checkpoints, at most: a question walks at most one interval each way,
/// about 25 ms at 75–110 ns a position, what gdb's `bt` or `info registers` at a new position
/// may cost (issue 19: under 50 ms). Beyond [`SPREAD`] intervals of it the checkpoints'
/// number grows with the history, so their memory per position stays flat (each holds the
/// pages written since the one before: 30–40 KB on sha256sum, about 0.3 bytes a position
/// for the two final chains).
const MAX_INTERVAL: u64 = 1 << 18;

/// Checkpoints a chain makes on histories between [`SPREAD`] × [`INTERVAL`] and
/// [`SPREAD`] × [`MAX_INTERVAL`] positions: memory for a handful of them is a few MB,
/// where 4096-position intervals on 1e7 took 170 MB.
const SPREAD: u64 = 64;

/// On histories of up to this many positions (half a second of walking or so), questions
/// wait for the chains: answers there are the final ones from the first question on.
pub const WAIT_BELOW: u64 = 1 << 22;

/// Positions between the fine checkpoints kept for the interval walked last, each way:
/// going forwards one step at a time (gdb's `stepi`, `next`) needs the backward state just
/// above each new position, going backwards (`reverse-stepi`, `reverse-next`) the forward
/// state just below, which the coarse checkpoints are up to an interval away from. A step
/// then walks at most this far (about 0.1 ms). Not finer: each fine state costs 4 KB of
/// registers plus the pages the walk copies on its next writes (every 64 positions took
/// 30 MB on a 2^18 interval of sha256sum).
const FINE: u64 = 1024;

/// Merged checkpoints kept for questions, at most (they are remade as needed).
const SEEDED_KEPT: usize = 256;

/// The interval between checkpoints on a history of `len` positions.
pub fn interval(len: u64) -> u64 {
    (len / SPREAD).clamp(INTERVAL, MAX_INTERVAL)
}

/// Whether the last answer at `q` is at least as close to `p` as a fine checkpoint could be.
fn fine_below(q: u64, p: u64) -> bool {
    q - p < FINE
}

/// What a walk to a question started from: the checkpoint's position and which chains'
/// states it merged. A kept state is reused only while the same sources are the best.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Source {
    at: u64,
    forward: Kind,
    backward: bool,
}

/// Which forward chain a checkpoint came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    None,
    Provisional,
    Final,
}

/// Registers and memory at any position, known or unknown.
pub struct Values {
    walker: Walker,
    interval: u64,
    /// The chains being made; `None` once complete.
    chains: Option<Chains>,
    /// The chains' plan, before they are started (tests hold them back).
    held: Option<Plan>,
    /// Backward checkpoints made so far, down from the end (the end state's position first).
    backward: BTreeMap<u64, State>,
    /// Final forward checkpoints made so far; the first is the start state.
    forward: Vec<State>,
    /// Provisional forward checkpoints beyond the final ones.
    provisional: FxHashMap<usize, State>,
    /// Forward checkpoint `k` merged with the backward state at its position (final ones).
    forward_seeded: FxHashMap<usize, State>,
    /// Backward checkpoints merged with the forward state at their positions (final ones).
    backward_seeded: FxHashMap<u64, State>,
    last_forward: Option<(u64, Source, State)>,
    last_backward: Option<(u64, Source, State)>,
    forward_fine: (Option<Source>, BTreeMap<u64, State>),
    backward_fine: (Option<Source>, BTreeMap<u64, State>),
    /// Counts what the chains delivered: an answer is the same while this is.
    generation: u64,
    /// The chains' steps, once complete.
    chain_steps: Steps,
    conflicts: u64,
    /// How long a question may wait for a forward checkpoint due soon.
    patience: Duration,
    /// How often the final forward chain met each instruction nobody modelled.
    unmodelled: FxHashMap<iced_x86::Mnemonic, u64>,
    /// Whether a watchpoint's search skips the blocks the index of written addresses says
    /// write none of the watched bytes (always, but in a comparison).
    pub(in crate::state) watch_index: bool,
    /// The values from exact states, for a recording with anchors (then no chains run).
    anchored: Option<Anchored>,
}

impl Values {
    /// What the engine knows at position 0 before the history exists (a session serving gdb
    /// while its trace is decoded): the start state, as the forward pass begins from it; the
    /// backward pass adds to it once there is a history to walk.
    pub fn known_at_start(space: AddressSpace, start: &State, syscalls: &[SyscallRecord]) -> Known {
        let mut forward = start.clone();
        forward.mem.set_volatile(&rseq_areas(syscalls));
        Known::new(forward, State::unknown(), space)
    }

    /// What the engine answers at the last position of a history whose end snapshot holds
    /// the general registers, before the history exists: that snapshot, as [`Self::at`]
    /// answers there (with anchors or without); `None` for a snapshot without them (an exit
    /// under QEMU), whose answer a pass works out.
    pub fn known_at_end(space: AddressSpace, end: &State, syscalls: &[SyscallRecord]) -> Option<Known> {
        if !super::anchored::general_registers(end) {
            return None;
        }
        let mut end = end.clone();
        end.mem.set_volatile(&rseq_areas(syscalls));
        Some(Known::new(end.clone(), end, space))
    }

    /// The flag its questions set while they walk (with anchors): another engine's fill
    /// given it ([`Self::share_pause`]) waits for them too.
    pub fn pause_flag(&self) -> Option<Arc<std::sync::atomic::AtomicBool>> {
        self.anchored.as_ref().map(Anchored::pause_flag)
    }

    /// Makes its background fill (with anchors) wait while `flag` is set as well: the
    /// questions of an engine over the history's beginning, answered while this one was
    /// made, come before its fill. Before [`Self::release`].
    pub(crate) fn share_pause(&mut self, flag: Arc<std::sync::atomic::AtomicBool>) {
        if let Some(a) = &mut self.anchored {
            a.share_pause(flag);
        }
    }

    /// An engine over a history; its chains start at once in the background.
    pub fn new(space: AddressSpace, inputs: Inputs) -> Self {
        let mut v = Self::held(space, inputs);
        v.release();
        v
    }

    /// An engine whose chains do not start until [`Self::release`] (or a wait for them):
    /// answers until then come from the start and end states alone.
    pub(crate) fn held(space: AddressSpace, mut inputs: Inputs) -> Self {
        let len = inputs.history.len();
        let last = len.saturating_sub(1);
        // A registered rseq area is rewritten by the kernel at any return to the program:
        // unknown in every state (before its registration too: a harmless loss).
        let volatile = rseq_areas(&inputs.syscalls);
        inputs.start.mem.set_volatile(&volatile);
        let mut backward = BTreeMap::new();
        if let Some(end) = &mut inputs.end {
            end.mem.set_volatile(&volatile);
            backward.insert(last, end.clone());
        }
        let mut shared = super::inputs::shared(space, &mut inputs);
        shared.prepare();
        let shared = Arc::new(shared);
        let interval = interval(len);
        let anchored = (!inputs.anchors.is_empty()).then(|| {
            let mut exact = vec![(0, inputs.start.clone())];
            let below_end = |p: u64| p < if inputs.end.is_some() { last } else { len };
            for (p, mut st) in std::mem::take(&mut inputs.anchors) {
                if p > exact[exact.len() - 1].0 && below_end(p) {
                    st.mem.set_volatile(&volatile);
                    exact.push((p, st));
                }
            }
            if let Some(end) = &inputs.end {
                exact.push((last, end.clone()));
            }
            Anchored::new(shared.clone(), exact)
        });
        Self {
            walker: Walker::new(shared),
            interval,
            chains: None,
            held: anchored.is_none().then(|| Plan {
                interval,
                start: inputs.start.clone(),
                end: inputs.end,
            }),
            backward,
            forward: vec![inputs.start],
            provisional: FxHashMap::default(),
            forward_seeded: FxHashMap::default(),
            backward_seeded: FxHashMap::default(),
            last_forward: None,
            last_backward: None,
            forward_fine: (None, BTreeMap::new()),
            backward_fine: (None, BTreeMap::new()),
            generation: 0,
            chain_steps: Steps::default(),
            conflicts: 0,
            patience: Duration::ZERO,
            unmodelled: FxHashMap::default(),
            watch_index: true,
            anchored,
        }
    }

    /// How long a question may wait for a forward checkpoint near it that a chain is about
    /// to make, rather than answer from less (the client's timeout bounds it: gdb drops a
    /// connection whose answer is late). Zero by default.
    pub fn set_patience(&mut self, patience: Duration) {
        self.patience = patience;
    }

    /// Walks backwards over every stretch between anchors, settled or not (the fill still
    /// finds which are): the answers must be the same, which is what a test compares.
    pub fn walk_back_everywhere(&mut self) {
        if let Some(a) = &mut self.anchored {
            a.walk_back_everywhere();
        }
    }

    /// Starts the chains held back.
    pub(crate) fn release(&mut self) {
        if let Some(a) = &mut self.anchored {
            a.start_fill();
        }
        if let Some(plan) = self.held.take() {
            self.chains = Some(Chains::spawn(self.walker.shared.clone(), plan));
        }
    }

    /// Number of positions.
    pub fn len(&self) -> u64 {
        self.walker.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A handle on how far the chains are, for another thread to watch (none once complete,
    /// or while held back).
    pub fn progress(&self) -> Option<ValuesProgress> {
        self.chains.as_ref().map(Chains::progress)
    }

    /// Whether the chains are complete: every answer from now on is the final one.
    pub fn complete(&self) -> bool {
        self.chains.is_none() && self.held.is_none()
    }

    /// Changes whenever the chains deliver something: an answer at a position stays the
    /// same while this does.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Takes what the chains delivered since last asked, without waiting, so that
    /// [`Self::generation`] says whether an answer given before is still the one to give (a
    /// cache that compared it without this kept an answer from before the values were final
    /// for as long as nobody moved).
    pub fn poll(&mut self) {
        self.collect(false, &mut |_, _| {});
    }

    /// Waits at most `timeout` for the answers to be final everywhere (starting the chains
    /// held back); whether they are. [`Self::prepare`] waits as long as it takes, and a
    /// gdb's `monitor wait` must tell gdb it is still there every second or so.
    pub fn wait_complete(&mut self, timeout: Duration) -> bool {
        self.release();
        let deadline = Instant::now() + timeout;
        while let Some(chains) = &self.chains {
            let left = deadline.saturating_duration_since(Instant::now());
            match chains.made.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(m) => self.take(m),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if left.is_zero() => return false,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => self.chains = None,
            }
        }
        self.complete()
    }

    /// Takes what the chains made so far; with `wait`, waits until they are complete,
    /// calling `progress(walked, total)` now and then.
    fn collect(&mut self, wait: bool, progress: &mut dyn FnMut(u64, u64)) {
        if wait {
            self.release();
        }
        while let Some(chains) = &self.chains {
            let made = match wait {
                true => chains.made.recv_timeout(Duration::from_millis(100)),
                false => chains.made.try_recv().map_err(|e| match e {
                    std::sync::mpsc::TryRecvError::Empty => std::sync::mpsc::RecvTimeoutError::Timeout,
                    std::sync::mpsc::TryRecvError::Disconnected => std::sync::mpsc::RecvTimeoutError::Disconnected,
                }),
            };
            match made {
                Ok(m) => self.take(m),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if wait => {
                    progress(chains.walked.load(Ordering::Relaxed), chains.total)
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => return,
                // A chain thread that ended without finishing (it cannot, short of a bug):
                // what it made stays, the rest is unknown.
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => self.chains = None,
            }
        }
    }

    fn take(&mut self, made: Made) {
        self.generation += 1;
        match made {
            Made::Backward(at, st) => {
                self.backward.insert(at, st);
            }
            Made::Forward(k, st) => {
                debug_assert_eq!(k, self.forward.len());
                self.provisional.remove(&k);
                self.forward.push(st);
            }
            Made::Provisional(k, st) => {
                if k >= self.forward.len() {
                    self.provisional.insert(k, st);
                }
            }
            Made::Done { steps, unmodelled } => {
                if let Some(c) = &self.chains {
                    c.walked.store(c.total, Ordering::Relaxed);
                }
                self.chains = None;
                self.provisional.clear();
                self.chain_steps = steps;
                self.unmodelled = unmodelled;
            }
        }
    }

    /// Waits for a forward checkpoint `k` if a chain is due to make it within the patience
    /// (estimated once: a busy machine makes the chains slower, and a wait once begun is
    /// worth finishing), at most the patience.
    fn await_forward(&mut self, k: usize) {
        let at = k as u64 * self.interval;
        match &self.chains {
            Some(chains) if self.forward_source(k).forward == Kind::None => {
                if chains.forward_eta(at) > self.patience {
                    return;
                }
            }
            _ => return,
        }
        let deadline = Instant::now() + self.patience;
        while self.forward_source(k).forward == Kind::None {
            let Some(chains) = &self.chains else { return };
            let left = deadline.saturating_duration_since(Instant::now());
            match chains.made.recv_timeout(left) {
                Ok(m) => self.take(m),
                Err(_) => return,
            }
        }
    }

    /// Waits until the chains are complete (what `rtit check-values` needs: final answers
    /// everywhere). `progress(done, total)` is called now and then with the positions the
    /// chains walked so far and in all.
    pub fn prepare(&mut self, mut progress: impl FnMut(u64, u64)) {
        self.collect(true, &mut progress);
    }

    /// The forward chain a walk to interval `k` starts from.
    fn forward_source(&self, k: usize) -> Source {
        let at = k as u64 * self.interval;
        let forward = match () {
            _ if k < self.forward.len() => Kind::Final,
            _ if self.provisional.contains_key(&k) => Kind::Provisional,
            _ => Kind::None,
        };
        Source {
            at,
            forward,
            backward: self.backward.contains_key(&at),
        }
    }

    /// The state a walk to interval `k` starts from: the forward checkpoint merged with the
    /// backward state there.
    fn forward_start(&mut self, k: usize, source: Source) -> State {
        if source.forward == Kind::Final {
            if let Some(st) = self.forward_seeded.get(&k) {
                return st.clone();
            }
        }
        let mut st = match source.forward {
            Kind::Final => self.forward[k].clone(),
            Kind::Provisional => self.provisional[&k].clone(),
            Kind::None => State::unknown(),
        };
        if let Some(b) = self.backward.get(&source.at) {
            st.absorb(b);
        }
        if source.forward == Kind::Final && self.complete() {
            if self.forward_seeded.len() >= SEEDED_KEPT {
                self.forward_seeded.clear();
            }
            self.forward_seeded.insert(k, st.clone());
        }
        st
    }

    /// The forward state at `p`.
    fn forward_at(&mut self, p: u64) -> State {
        let k = (p / self.interval) as usize;
        let source = self.forward_source(k);
        if self.forward_fine.0 != Some(source) {
            self.forward_fine = (Some(source), BTreeMap::new());
        }
        // The nearest state at or below p: the last answer, a fine checkpoint of the interval
        // walked last, or the (seeded) checkpoint.
        let fine = self.forward_fine.1.range(..=p).next_back().map(|(&q, _)| q);
        let (mut at, mut st) = match (self.last_forward.take(), fine) {
            (Some((q, s, st)), f) if q <= p && s == source && !matches!(f, Some(f) if f > q) => (q, st),
            (_, Some(q)) => (q, self.forward_fine.1[&q].clone()),
            _ => (source.at, self.forward_start(k, source)),
        };
        while at < p {
            let to = (at / FINE * FINE + FINE).min(p);
            self.walker.forward_to(&mut st, at, to);
            at = to;
            if at % FINE == 0 && at < p {
                self.forward_fine.1.entry(at).or_insert_with(|| st.clone());
            }
        }
        self.last_forward = Some((p, source, st.clone()));
        st
    }

    /// The backward checkpoint a walk down to `p` starts from, and what it merges.
    fn backward_source(&self, p: u64) -> Option<Source> {
        let &top = self.backward.keys().next_back()?;
        if p > top {
            return None;
        }
        let at = p.next_multiple_of(self.interval).min(top);
        if !self.backward.contains_key(&at) {
            return None;
        }
        let forward = match at % self.interval {
            0 => self.forward_source((at / self.interval) as usize).forward,
            _ => Kind::None,
        };
        Some(Source {
            at,
            forward,
            backward: true,
        })
    }

    /// A backward checkpoint merged with the forward chain's state there.
    fn backward_start(&mut self, source: Source) -> State {
        let at = source.at;
        if source.forward == Kind::Final {
            if let Some(st) = self.backward_seeded.get(&at) {
                return st.clone();
            }
        }
        let mut st = self.backward[&at].clone();
        let k = (at / self.interval) as usize;
        match source.forward {
            Kind::Final => st.absorb(&self.forward[k]),
            Kind::Provisional => st.absorb(&self.provisional[&k]),
            Kind::None => {}
        }
        if source.forward == Kind::Final && self.complete() {
            if self.backward_seeded.len() >= SEEDED_KEPT {
                self.backward_seeded.clear();
            }
            self.backward_seeded.insert(at, st.clone());
        }
        st
    }

    /// The backward state at `p` (unknown everything if the recording has no end state, or
    /// the backward chain has not got near `p` yet).
    fn backward_at(&mut self, p: u64) -> State {
        let Some(source) = self.backward_source(p) else {
            return State::unknown();
        };
        if self.backward_fine.0 != Some(source) {
            self.backward_fine = (Some(source), BTreeMap::new());
        }
        // The nearest state at or above p: the last answer, a fine checkpoint of the interval
        // walked last, or the (seeded) checkpoint.
        let fine = self.backward_fine.1.range(p..).next().map(|(&q, s)| (q, s.clone()));
        let (mut at, mut st) = match (self.last_backward.take(), fine) {
            (Some((q, s, st)), _) if s == source && q >= p && fine_below(q, p) => (q, st),
            (_, Some((q, st))) => (q, st),
            _ => (source.at, self.backward_start(source)),
        };
        while at > p {
            at -= 1;
            self.walker.step_backward(&mut st, at);
            if at % FINE == 0 && at > p {
                self.backward_fine.1.insert(at, st.clone());
            }
        }
        self.last_backward = Some((p, source, st.clone()));
        st
    }

    /// Both passes' states at `p`: final with anchors, and at a snapshot's position; elsewhere
    /// final once [`Self::settle`] says so (provisional only where a question did not wait).
    pub fn at(&mut self, p: u64) -> Option<Known> {
        if p >= self.len() {
            return None;
        }
        if let Some(a) = &mut self.anchored {
            return a.at(p, &mut || false);
        }
        if let Some(exact) = self.snapshot_at(p) {
            return Some(Known::new(exact.clone(), exact, self.walker.shared.space.clone()));
        }
        let wait = self.held.is_none() && self.len() <= WAIT_BELOW;
        self.collect(wait, &mut |_, _| {});
        self.await_forward((p / self.interval) as usize);
        let forward = self.forward_at(p);
        let backward = self.backward_at(p);
        Some(Known::new(forward, backward, self.walker.shared.space.clone()))
    }

    /// The instructions nobody modelled that the final forward chain met (each position of
    /// the history once), most frequent first: what to model next. Complete once the chains
    /// are.
    pub fn unmodelled(&self) -> Vec<(iced_x86::Mnemonic, u64)> {
        let mut v: Vec<_> = self.unmodelled.iter().map(|(&m, &n)| (m, n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    /// Records a conflict seen by a caller of [`Known`].
    pub fn note_conflicts(&mut self, n: u64) {
        self.conflicts += n;
    }
}

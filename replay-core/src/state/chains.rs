//! The engine's checkpoint chains, made on background threads so that a question never
//! waits for a walk over the whole history (issue 19: gdb's first questions come at once,
//! whatever the size).
//!
//! Two chains make the final answers, in this order, on one thread: the *backward* chain,
//! from the end state down to position 0 by the backward pass alone (so no value depends on
//! itself), then the *seeded forward* chain, from the start state up, restarting at every
//! checkpoint from its own state merged with the backward one there. A third, *provisional*
//! chain (the forward pass alone) runs on another thread at the same time, so that until the
//! final forward checkpoints get somewhere, questions there still have a forward state to
//! start from. Every chain is a pure function of the recording: the answers, once the
//! final chains are complete, do not depend on when anything was asked.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use iced_x86::Mnemonic;
use rustc_hash::FxHashMap;

use super::walker::{Shared, Steps, Walker};
use super::State;

/// What a chain made.
pub(super) enum Made {
    /// The backward chain's state at a checkpoint.
    Backward(u64, State),
    /// Final forward checkpoint `k` (the walk from the seeded checkpoint `k - 1`).
    Forward(usize, State),
    /// Provisional forward checkpoint `k` (the forward pass alone from the start).
    Provisional(usize, State),
    /// The final chains are complete.
    Done {
        steps: Steps,
        /// How often the final forward chain met each instruction nobody modelled (and whose
        /// result the recording did not give): each position once.
        unmodelled: FxHashMap<Mnemonic, u64>,
    },
}

/// What the chains start from.
pub(super) struct Plan {
    /// Positions between checkpoints.
    pub(super) interval: u64,
    /// The state at position 0.
    pub(super) start: State,
    /// The state at the last position, if the recording has one.
    pub(super) end: Option<State>,
}

/// The chains being made.
pub(super) struct Chains {
    pub(super) made: Receiver<Made>,
    /// Positions the final chains walked so far.
    pub(super) walked: Arc<AtomicU64>,
    /// Positions they walk in all.
    pub(super) total: u64,
    /// The furthest position a forward chain (final or provisional) made a checkpoint at.
    front: Arc<AtomicU64>,
    /// Positions a forward chain walks a second, as the provisional one measured it.
    rate: Arc<AtomicU64>,
}

impl Chains {
    /// Starts the threads. Dropping the result stops them at their next checkpoint (their
    /// sends fail).
    pub(super) fn spawn(shared: Arc<Shared>, plan: Plan) -> Self {
        let (tx, made) = mpsc::channel();
        let last = shared.history.len().saturating_sub(1);
        let walked = Arc::new(AtomicU64::new(0));
        let total = last * u64::from(plan.end.is_some()) + last / plan.interval * plan.interval;
        let front = Arc::new(AtomicU64::new(0));
        let rate = Arc::new(AtomicU64::new(0));
        if plan.end.is_some() {
            let (shared, start, tx) = (shared.clone(), plan.start.clone(), tx.clone());
            let (front, rate, interval) = (front.clone(), rate.clone(), plan.interval);
            std::thread::spawn(move || provisional(Walker::new(shared), start, interval, &tx, &front, &rate));
        }
        let (w, f) = (walked.clone(), front.clone());
        std::thread::spawn(move || final_chains(Walker::new(shared), plan, &tx, &w, &f));
        Self {
            made,
            walked,
            total,
            front,
            rate,
        }
    }

    /// A handle on how far the final chains are.
    pub(super) fn progress(&self) -> ValuesProgress {
        ValuesProgress {
            walked: self.walked.clone(),
            total: self.total,
        }
    }

    /// About how long until a forward chain makes a checkpoint at `at`.
    pub(super) fn forward_eta(&self, at: u64) -> Duration {
        let front = self.front.load(Ordering::Relaxed);
        // Until measured: 100 ns a position, about what a walk costs.
        let rate = match self.rate.load(Ordering::Relaxed) {
            0 => 10_000_000,
            r => r,
        };
        Duration::from_secs_f64(at.saturating_sub(front) as f64 / rate as f64)
    }
}

/// How far the background chains are ([`super::Values::progress`]).
#[derive(Debug, Clone)]
pub struct ValuesProgress {
    walked: Arc<AtomicU64>,
    total: u64,
}

impl ValuesProgress {
    /// Positions walked so far, and in all.
    pub fn walked(&self) -> (u64, u64) {
        (self.walked.load(Ordering::Relaxed).min(self.total), self.total)
    }

    /// Whether the values are final everywhere.
    pub fn done(&self) -> bool {
        self.walked.load(Ordering::Relaxed) >= self.total
    }
}

/// The backward chain, then the seeded forward chain.
fn final_chains(mut w: Walker, plan: Plan, tx: &Sender<Made>, walked: &AtomicU64, front: &AtomicU64) {
    let interval = plan.interval;
    let last = w.len().saturating_sub(1);
    // The backward states, kept here until the forward chain has merged them.
    let mut backward = BTreeMap::new();
    if let Some(mut st) = plan.end {
        let mut low = last;
        backward.insert(low, st.clone());
        while low > 0 {
            let target = match low % interval {
                0 => low - interval,
                r => low - r,
            };
            walked.fetch_add(low - target, Ordering::Relaxed);
            w.backward_to(&mut st, low, target);
            low = target;
            backward.insert(target, st.clone());
            if tx.send(Made::Backward(target, st.clone())).is_err() {
                return;
            }
        }
    }
    w.unmodelled = Some(FxHashMap::default());
    let mut st = plan.start;
    for k in 1..=(last / interval) as usize {
        let from = (k as u64 - 1) * interval;
        if let Some(b) = backward.remove(&from) {
            st.absorb(&b);
        }
        w.forward_to(&mut st, from, from + interval);
        walked.fetch_add(interval, Ordering::Relaxed);
        front.fetch_max(k as u64 * interval, Ordering::Relaxed);
        if tx.send(Made::Forward(k, st.clone())).is_err() {
            return;
        }
    }
    let _ = tx.send(Made::Done {
        steps: w.stats,
        unmodelled: w.unmodelled.take().unwrap_or_default(),
    });
}

/// The forward pass alone, up to where the final forward chain is; measures how fast a walk
/// goes.
fn provisional(mut w: Walker, mut st: State, interval: u64, tx: &Sender<Made>, front: &AtomicU64, rate: &AtomicU64) {
    let last = w.len().saturating_sub(1);
    let started = Instant::now();
    for k in 1..=(last / interval) as usize {
        let at = k as u64 * interval;
        if front.load(Ordering::Relaxed) >= at {
            return;
        }
        w.forward_to(&mut st, at - interval, at);
        if tx.send(Made::Provisional(k, st.clone())).is_err() {
            return;
        }
        front.fetch_max(at, Ordering::Relaxed);
        rate.store(
            (at as f64 / started.elapsed().as_secs_f64().max(1e-9)) as u64,
            Ordering::Relaxed,
        );
    }
}

//! The exact states the stretches start and end at (the start snapshot, the anchors, an end
//! snapshot), each completed, the first time a walk needs it, with what a short walk next to
//! it shows.
//!
//! Why: an anchor holds what QEMU's gdbstub gives, which is no ymm register's upper half. An
//! anchor that falls inside an AVX2 routine (glibc's `wcslen` between its `vpxor` and its
//! `vpcmpeqd ymm`, about one anchor in 400 on python3) starts its forward walk without a
//! live value; the unknown length it computes becomes an unknown pointer, a store through it
//! forgets all memory, and the whole stretch up to the next anchor knew next to nothing
//! (CI saw it twice, where the passes' chains knew every register). The instructions just
//! before the anchor say what those halves are: walking [`LOOKBACK`] positions backwards
//! from the anchor (what it holds, carried back) and then forwards to it again works them
//! out where the routine made them from known values (`vpxor xmm0, xmm0, xmm0` zeroes all
//! of ymm0; a VEX-encoded 128-bit write zeroes the upper half). Both walks only ever know
//! what is right, so what they add to the anchor is right too.
//!
//! The lookback is the same wherever the stretch is decoded (the whole history, or a window
//! decoded from a sync point at least [`LOOKBACK`] positions before its anchor), so every
//! part answers alike.

use std::sync::{Arc, OnceLock};

use super::super::walker::{Shared, Walker};
use super::super::State;
use super::general_registers;

/// Positions walked back from an exact state to complete it (each way: about 0.5 ms).
pub(crate) const LOOKBACK: u64 = 1 << 13;

/// The exact states by position, completed lazily.
pub(super) struct Exact {
    shared: Arc<Shared>,
    positions: Vec<u64>,
    /// As the recording holds them.
    raw: Vec<State>,
    /// Whether each holds the general registers (an end snapshot of a run that exited
    /// holds only memory).
    whole: Vec<bool>,
    done: Vec<OnceLock<Completed>>,
}

/// An exact state completed, for each pass.
struct Completed {
    /// With the read-only ranges, for the forward walks.
    forward: State,
    /// Without them, for the backward walks (see [`super`]).
    backward: State,
}

impl Exact {
    /// `exact`: position 0's state first, then in order of position, each position once.
    pub(super) fn new(shared: Arc<Shared>, exact: Vec<(u64, State)>) -> Self {
        debug_assert!(exact.first().is_some_and(|(p, _)| *p == 0));
        debug_assert!(exact.windows(2).all(|w| w[0].0 < w[1].0));
        let (positions, raw): (Vec<u64>, Vec<State>) = exact.into_iter().unzip();
        Self {
            whole: raw.iter().map(general_registers).collect(),
            done: raw.iter().map(|_| OnceLock::new()).collect(),
            shared,
            positions,
            raw,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.positions.len()
    }

    pub(super) fn positions(&self) -> &[u64] {
        &self.positions
    }

    /// Whether the `k`th holds the general registers: the answer at its position.
    pub(super) fn whole(&self, k: usize) -> bool {
        self.whole[k]
    }

    /// The `k`th, completed, for a forward walk or an answer at its position.
    pub(super) fn forward(&self, k: usize) -> &State {
        &self.completed(k).forward
    }

    /// The `k`th, completed, without read-only ranges: for a backward walk.
    pub(super) fn backward(&self, k: usize) -> &State {
        &self.completed(k).backward
    }

    /// The states held, for their memory's count.
    pub(super) fn held(&self) -> impl Iterator<Item = &State> {
        let done = self.done.iter().filter_map(OnceLock::get);
        self.raw.iter().chain(done.flat_map(|c| [&c.forward, &c.backward]))
    }

    fn completed(&self, k: usize) -> &Completed {
        self.done[k].get_or_init(|| {
            let mut backward = self.raw[k].clone();
            backward.mem.set_readonly(Arc::from([]));
            let mut forward = self.raw[k].clone();
            let p = self.positions[k];
            // The start snapshot has nothing before it; a state without the registers
            // (an end snapshot after an exit) is the forward walk's end, not its start.
            if k > 0 && self.whole[k] {
                let learnt = self.look_back(p, &backward);
                forward.absorb(&learnt);
                backward.absorb(&learnt);
            }
            Completed { forward, backward }
        })
    }

    /// The state at `p` that walking [`LOOKBACK`] positions back from `st` (the exact state
    /// at `p`) and forwards again finds.
    fn look_back(&self, p: u64, st: &State) -> State {
        let from = p.saturating_sub(LOOKBACK);
        let mut walker = Walker::new(self.shared.clone());
        let mut st = st.clone();
        for q in (from..p).rev() {
            walker.step_backward(&mut st, q);
        }
        for q in from..p {
            walker.step_forward(&mut st, q);
        }
        st
    }
}

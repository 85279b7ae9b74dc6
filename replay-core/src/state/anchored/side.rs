//! One direction's walks between exact states, and the states they leave behind to start the
//! next walk nearer: the last answer, a kept state every [`COARSE`] positions of every
//! stretch walked (shared with the background fill), and fine ones every [`FINE`] near the
//! position asked last (a stepping gdb asks at the neighbouring positions next).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::super::walker::Walker;
use super::super::State;
use super::kept::{Kept, COARSE};

/// Positions between fine states, near the position asked last: a step walks at most this
/// far (about 0.1 ms).
const FINE: u64 = 1024;

/// Steps between two looks at whether the walk is cancelled.
pub(super) const CANCEL_EVERY: u64 = 1 << 14;

/// Forwards or backwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    Forwards,
    Backwards,
}

/// One direction's walker and the states it keeps.
pub(super) struct Side {
    walker: Walker,
    direction: Direction,
    coarse: Arc<Kept>,
    fine: BTreeMap<u64, State>,
    last: Option<(u64, State)>,
}

impl Side {
    pub(super) fn new(walker: Walker, direction: Direction, coarse: Arc<Kept>) -> Self {
        Self {
            walker,
            direction,
            coarse,
            fine: BTreeMap::new(),
            last: None,
        }
    }

    /// Steps walked so far.
    pub(super) fn steps(&self) -> u64 {
        match self.direction {
            Direction::Forwards => self.walker.stats.forward,
            Direction::Backwards => self.walker.stats.backward,
        }
    }

    /// The states kept near the last question (the shared ones are counted apart).
    pub(super) fn kept(&self) -> impl Iterator<Item = &State> {
        self.fine.values().chain(self.last.iter().map(|(_, s)| s))
    }

    /// The nearest state kept between `p` and the exact state at `bound` (inclusive), and its
    /// position: at or below `p` going forwards, at or above it going backwards.
    fn nearest(&mut self, p: u64, bound: u64, exact: &State) -> (u64, State) {
        let forwards = self.direction == Direction::Forwards;
        let (lo, hi) = if forwards { (bound, p) } else { (p, bound) };
        let inside = |q: u64| (lo..=hi).contains(&q);
        let nearer = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(if forwards { a.max(b) } else { a.min(b) }),
            (a, b) => a.or(b),
        };
        let fine = match forwards {
            true => self.fine.range(lo..=hi).next_back(),
            false => self.fine.range(lo..=hi).next(),
        }
        .map(|(&q, _)| q);
        let coarse = self.coarse.nearest(lo, hi, forwards);
        let kept = nearer(coarse.as_ref().map(|(q, _)| *q), fine);
        let last = self.last.as_ref().map(|(q, _)| *q).filter(|&q| inside(q));
        match (last, kept) {
            (Some(q), k) if nearer(Some(q), k) == Some(q) => self.last.take().expect("a last state"),
            (_, Some(q)) if fine == Some(q) => (q, self.fine[&q].clone()),
            (_, Some(_)) => coarse.expect("the nearest kept state"),
            _ => (bound, exact.clone()),
        }
    }

    /// The state at `p`, walked from the exact state `exact` at `bound` (below `p` going
    /// forwards, above it going backwards) or from a state kept between them; `None` if
    /// `cancel` was set first (how far the walk got is kept for the next).
    pub(super) fn at(&mut self, p: u64, bound: u64, exact: &State, cancel: &AtomicBool) -> Option<State> {
        let forwards = self.direction == Direction::Forwards;
        let (mut at, mut st) = self.nearest(p, bound, exact);
        if at.abs_diff(p) > FINE {
            // A jump: the fine states are for where the last question was.
            self.fine.clear();
        }
        let mut walked = 0u64;
        while at != p {
            if walked % CANCEL_EVERY == CANCEL_EVERY - 1 && cancel.load(Ordering::Relaxed) {
                self.last = Some((at, st));
                return None;
            }
            // To the next look at `cancel`, state to keep, or `p`.
            let look = match CANCEL_EVERY - 1 - walked % CANCEL_EVERY {
                0 => CANCEL_EVERY,
                n => n,
            };
            if forwards {
                let to = (at + look).min(at / FINE * FINE + FINE).min(p);
                self.walker.forward_to(&mut st, at, to);
                walked += to - at;
                at = to;
            } else {
                let to = (at - look.min(at - p)).max((at - 1) / FINE * FINE).max(p);
                self.walker.backward_to(&mut st, at, to);
                walked += at - to;
                at = to;
            }
            if at == p {
                break;
            }
            if at % COARSE == 0 {
                self.coarse.keep(at, &st);
            }
            if at % FINE == 0 && at.abs_diff(p) < COARSE {
                self.fine.insert(at, st.clone());
            }
        }
        self.last = Some((p, st.clone()));
        Some(st)
    }
}

//! Moves through the history: a step either way, and `continue` either way to the next
//! breakpoint hit (or the end, or the start), as gdb asks for them; inside the history's
//! beginning and to the crash before the whole is decoded ([`super::prefix`],
//! [`super::early_end`]), else once it is.

use std::collections::HashSet;

use super::{Session, Stop};
use crate::timeline::Hit;

impl Session {
    /// How arriving at `position` going forwards is reported.
    pub(super) fn arrived(&self, position: u64) -> Option<Stop> {
        let d = self.decoded()?;
        match d.fault {
            Some((_, signal)) if position == d.retired => Some(Stop::Signal(signal)),
            _ => None,
        }
    }

    /// One instruction forwards.
    pub fn step_forward(&mut self) -> Stop {
        if let Some(stop) = self.step_early().or_else(|| self.step_in_window()) {
            return stop;
        }
        if self.decoded().is_none() {
            return Stop::NoHistory;
        }
        if self.position >= self.last() {
            return self.arrived(self.position).unwrap_or(Stop::End);
        }
        self.position += 1;
        self.arrived(self.position).unwrap_or(Stop::Step)
    }

    /// One instruction backwards.
    pub fn step_backward(&mut self) -> Stop {
        if self.position == 0 {
            return Stop::Begin;
        }
        self.position -= 1;
        self.reach_early(self.position);
        Stop::Step
    }

    /// Waits for the history for a move, unless `interrupted` says to stop waiting.
    pub(super) fn await_history(&self, interrupted: &mut dyn FnMut() -> bool) -> Result<(), Stop> {
        match self.history.wait(interrupted) {
            None => Err(Stop::Interrupted),
            Some(Err(_)) => Err(Stop::NoHistory),
            Some(Ok(_)) => Ok(()),
        }
    }

    /// Forwards to the next position whose instruction is a breakpoint, or to the end.
    /// `interrupted` is polled now and then.
    pub fn continue_forward(&mut self, breakpoints: &HashSet<u64>, mut interrupted: impl FnMut() -> bool) -> Stop {
        if let Some(stop) = self.continue_early(breakpoints, &mut interrupted) {
            return stop;
        }
        if let Err(stop) = self.await_history(&mut interrupted) {
            return stop;
        }
        let hit = self.search_forward(self.position + 1, self.retired(), breakpoints, interrupted);
        self.land(hit, |s| {
            s.position = s.last();
            s.arrived(s.position).unwrap_or(Stop::End)
        })
    }

    /// Backwards to the previous position whose instruction is a breakpoint, or to position 0.
    pub fn continue_backward(&mut self, breakpoints: &HashSet<u64>, mut interrupted: impl FnMut() -> bool) -> Stop {
        if self.position == 0 {
            return Stop::Begin;
        }
        if let Some(stop) =
            (self.reverse_early(breakpoints, &mut interrupted)).or_else(|| self.reverse_in_windows(breakpoints))
        {
            return stop;
        }
        let from = self.position.min(self.retired());
        let hit = self.search_backward(from, 0, breakpoints, interrupted);
        self.land(hit, |s| {
            s.position = 0;
            Stop::Begin
        })
    }

    /// Where a search for breakpoints leaves a `continue`: at the breakpoint it found, where
    /// Ctrl-C interrupted it, or, when it found none, where `otherwise` puts it.
    pub(super) fn land(&mut self, hit: Hit, otherwise: impl FnOnce(&mut Self) -> Stop) -> Stop {
        match hit {
            Hit::At(p) => {
                self.position = p;
                Stop::Breakpoint
            }
            Hit::Interrupted(p) => {
                self.position = p.min(self.last());
                Stop::Interrupted
            }
            Hit::None => otherwise(self),
        }
    }
}

//! Watchpoints on a recording (issue 41): `continue` and `reverse-continue` stop at the
//! instructions that touch watched bytes, besides breakpoints and caught system calls. The
//! other stop is found first (its search is fast, by addresses); the watched bytes are then
//! looked for between here and there ([`Values::first_access`]). Going forwards a hit is
//! reported after the instruction, as a data breakpoint traps (SDM vol. 3, 18.2.4: after the
//! instruction that accessed the data); backwards before it, where gdb's `record full` stops:
//! the state before the write, so gdb shows the value it had.

use std::collections::HashSet;

use super::catch::Catch;
use super::{Session, Stop};
use crate::state::watch::{Found, Watch};

impl Session {
    /// One instruction forwards ([`Self::step_forward`]), reported as a watchpoint's hit if
    /// it touched what `watches` watch: a data breakpoint traps after a single step too, and
    /// gdb steps over every breakpoint it resumes from.
    pub fn step_forward_watching(&mut self, watches: &[Watch]) -> Stop {
        let start = self.position;
        let stop = self.step_forward();
        match stop {
            Stop::Step if !watches.is_empty() && self.position == start + 1 => self.stepped_over(start, watches, stop),
            _ => stop,
        }
    }

    /// One instruction backwards ([`Self::step_backward`]), reported as a watchpoint's hit if
    /// the instruction stepped back over touched what `watches` watch.
    pub fn step_backward_watching(&mut self, watches: &[Watch]) -> Stop {
        let start = self.position;
        let stop = self.step_backward();
        match stop {
            Stop::Step if !watches.is_empty() && self.position + 1 == start => {
                self.stepped_over(self.position, watches, stop)
            }
            _ => stop,
        }
    }

    /// `stop`, or a watchpoint's hit if the instruction at `p` touched what `watches` watch.
    fn stepped_over(&mut self, p: u64, watches: &[Watch], stop: Stop) -> Stop {
        let Some(values) = self.values() else {
            return stop;
        };
        match values.first_access(p, p + 1, watches, &mut || false) {
            Some(Found::Hit {
                watch, address, write, ..
            }) => Stop::Watch {
                kind: watches[watch].kind,
                address,
                write,
            },
            _ => stop,
        }
    }

    /// Forwards to the next stop [`Self::continue_forward_catching`] finds, or before it to
    /// the position after the first instruction that touches what `watches` watch.
    pub fn continue_forward_watching(
        &mut self,
        breakpoints: &HashSet<u64>,
        catch: &Catch,
        watches: &[Watch],
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Stop {
        self.continue_watching(true, breakpoints, catch, watches, interrupted)
    }

    /// Backwards to the previous stop [`Self::continue_backward_catching`] finds, or after it
    /// to the position of the last instruction before here that touches what `watches` watch.
    pub fn continue_backward_watching(
        &mut self,
        breakpoints: &HashSet<u64>,
        catch: &Catch,
        watches: &[Watch],
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Stop {
        self.continue_watching(false, breakpoints, catch, watches, interrupted)
    }

    /// A continue either way: the other stop first, then the watched bytes between.
    fn continue_watching(
        &mut self,
        forwards: bool,
        breakpoints: &HashSet<u64>,
        catch: &Catch,
        watches: &[Watch],
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Stop {
        let other = |s: &mut Self, interrupted: &mut dyn FnMut() -> bool| match forwards {
            true => s.continue_forward_catching(breakpoints, catch, interrupted),
            false => s.continue_backward_catching(breakpoints, catch, interrupted),
        };
        if watches.is_empty() {
            return other(self, interrupted);
        }
        if let Err(stop) = self.await_history(interrupted) {
            return stop;
        }
        let start = self.position;
        let stop = other(self, &mut *interrupted);
        if matches!(stop, Stop::Interrupted | Stop::NoHistory) {
            return stop;
        }
        // The instructions between `start` and the other stop ran (or are undone).
        let end = self.position;
        let Some(values) = self.values() else {
            return stop;
        };
        let found = match forwards {
            true if !values.settle(start, interrupted) => None,
            true => values.first_access(start, end, watches, interrupted),
            false => values.last_access(end, start, watches, interrupted),
        };
        self.land_watch(found, start, stop, watches, u64::from(forwards))
    }

    /// Where a search for `watches` from `start` leaves a continue: next to the access it
    /// found (`after` positions past the instruction: 1 going forwards, 0 backwards), back at
    /// `start` if interrupted, else at `stop`, where it was.
    fn land_watch(&mut self, found: Option<Found>, start: u64, stop: Stop, watches: &[Watch], after: u64) -> Stop {
        match found {
            None => {
                self.position = start;
                Stop::Interrupted
            }
            Some(Found::Nothing) => stop,
            Some(Found::Hit {
                position,
                watch,
                address,
                write,
            }) => {
                self.position = position + after;
                Stop::Watch {
                    kind: watches[watch].kind,
                    address,
                    write,
                }
            }
            Some(Found::Unknown { position }) => {
                self.position = position + after;
                Stop::UnknownAccess { position }
            }
        }
    }
}

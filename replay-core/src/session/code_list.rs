//! Searches narrowed by the recording's list of the code each stretch ran ([`CodeRan`]): a
//! `continue` or `reverse-continue` looks only into the stretches that may have run a
//! breakpoint's page, instead of decoding every run on the way. The decode checked the list
//! against the history ([`crate::timeline::Timeline::code_outside`]), so a stretch it skips
//! runs no breakpoint.

use std::collections::HashSet;

use super::Session;
use crate::timeline::Hit;

impl Session {
    /// The first position in `from..until` whose instruction is a breakpoint.
    pub(super) fn search_forward(
        &self,
        from: u64,
        until: u64,
        breakpoints: &HashSet<u64>,
        mut interrupted: impl FnMut() -> bool,
    ) -> Hit {
        let timeline = self.timeline();
        for part in self.parts(from, until, breakpoints) {
            match timeline.next_hit(part.start, part.end, breakpoints, &mut interrupted) {
                Hit::None => {}
                hit => return hit,
            }
        }
        Hit::None
    }

    /// The last position in `until..from` whose instruction is a breakpoint.
    pub(super) fn search_backward(
        &self,
        from: u64,
        until: u64,
        breakpoints: &HashSet<u64>,
        mut interrupted: impl FnMut() -> bool,
    ) -> Hit {
        let timeline = self.timeline();
        for part in self.parts(until, from, breakpoints).into_iter().rev() {
            match timeline.previous_hit(part.end, part.start, breakpoints, &mut interrupted) {
                Hit::None => {}
                hit => return hit,
            }
        }
        Hit::None
    }

    /// The parts of `from..to` a search for `breakpoints` must look into.
    fn parts(&self, from: u64, to: u64, breakpoints: &HashSet<u64>) -> Vec<std::ops::Range<u64>> {
        match &self.code {
            Some(c) => c.may_run_in(from, to, breakpoints.iter().copied()),
            None if from < to => std::iter::once(from..to).collect(),
            None => Vec::new(),
        }
    }
}

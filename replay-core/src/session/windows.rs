//! Moves and values from windows (stretches of the history decoded alone between two exact
//! states, [`super::window`]) while the whole history is decoded (issue 40). The decoding
//! thread decodes the window that ends a run that exited first, after the history's
//! beginning: a `continue` to the end and `bt` there answer from it. A `continue` to a
//! breakpoint, or a `reverse-continue`, looks into the stretches where the recording's list
//! of the code each stretch ran says a breakpoint's page ran code, and decodes the window
//! there on demand: the hit and its values come from it, at once, instead of after the whole
//! decode. Once the whole is decoded each window is compared with it, instruction for
//! instruction: a difference is an error, never an answer.

use std::collections::HashSet;

use super::window::Window;
use super::{Session, Stop};
use crate::state::Known;
use crate::timeline::Hit;

/// Positions of windows a search decodes before it waits for the whole history instead:
/// two windows between anchors taken through QEMU 7.2's gdbstub (up to about 40 M
/// instructions each, a tenth to a third of a second with its states), ten between parked
/// anchors (QEMU 9.0 and later, every 2^22), while the whole decode waits. A breakpoint on a
/// page that runs all along (libc's `write` in gzip, whose page runs in every few stretches)
/// is found sooner by the whole decode; one that runs in a handful of stretches near the
/// end (the loader's, at python3's late `import ctypes`) by windows.
const SEARCHED: u64 = 80_000_000;

/// Instructions from which a breakpoint search decodes windows: below, the whole decode is
/// a couple of seconds and comes nearly as soon (gzip's 766 M instructions: `break write`
/// found 0.8 s later with windows than without).
pub(super) const SEARCHED_FROM: u64 = 1_000_000_000;

/// Windows kept at once (each holds two whole states and its stretch).
const KEPT: usize = 6;

impl Session {
    /// The index of the window that answers at `position`, if one does (the end's arrives
    /// from the decoding thread first, waited for while it is decoded).
    fn window_index(&mut self, position: u64) -> Option<usize> {
        if matches!(self.history.now(), Some(Err(_))) {
            self.windows.clear();
            return None;
        }
        if let Some(w) = self.history.take_suffix() {
            self.windows.push(w);
        }
        self.check_windows();
        self.windows.iter().position(|w| w.holds(position))
    }

    /// The window that answers at `position`, decoding it if it can be (only while the
    /// whole history is being decoded).
    fn window_for(&mut self, position: u64) -> Option<&mut Window> {
        let i = match self.window_index(position) {
            Some(i) => i,
            None => {
                let source = self.window_source.as_ref().filter(|_| !self.ready())?;
                let mut w = self.history.pausing_decode(|| source.window_at(position))?;
                if let Some(flag) = &self.history.fill_pause {
                    w.share_pause(flag.clone());
                }
                self.windows_built += w.last + 1 - w.base;
                if self.windows.len() >= KEPT {
                    // The oldest other than the end's, which the first look keeps coming to.
                    self.windows.remove(1.min(self.windows.len() - 1));
                }
                self.windows.push(w);
                self.windows.len() - 1
            }
        };
        self.windows.get_mut(i).filter(|w| w.holds(position))
    }

    /// Once the whole history is there, each window is compared with it, once: a window
    /// that differs is dropped, and the session answers with the error from then on.
    fn check_windows(&mut self) {
        if !self.ready() {
            return;
        }
        // No window is decoded any more: the trace and the files' part can go.
        self.window_source = None;
        if self.windows.iter().all(|w| w.checked) {
            return;
        }
        let Some(d) = self.history.now().and_then(Result::ok) else {
            return;
        };
        let timeline = d.timeline.clone();
        for w in self.windows.iter_mut().filter(|w| !w.checked) {
            w.checked = true;
            if let Some(p) = super::window::first_difference(w, &timeline) {
                self.window_failure = Some(crate::recording::RecordingError::Invalid {
                    path: self.recording.dir.display().to_string(),
                    message: format!(
                        "a stretch of the history decoded alone differs from the whole at position {p} (a bug; please report it)"
                    ),
                });
            }
        }
        if self.window_failure.is_some() {
            self.windows.clear();
        }
    }

    /// What is known at the current position from a window, if one answers there.
    pub(super) fn known_from_window(&mut self) -> Option<&Known> {
        let position = self.position;
        let i = self.window_index(position)?;
        let (history, window) = (&self.history, &mut self.windows[i]);
        history.pausing_decode(|| window.known_at(position).is_some());
        self.windows[i].known_at(position)
    }

    /// Works out the values at the current position from a window, if one answers there;
    /// whether they are final (`None`: none answers there).
    pub(super) fn settle_window(&mut self, interrupted: &mut dyn FnMut() -> bool) -> Option<bool> {
        let position = self.position;
        let i = self.window_index(position)?;
        let (history, window) = (&self.history, &mut self.windows[i]);
        Some(history.pausing_decode(|| window.settle(position, interrupted)))
    }

    /// The instruction at `position` from a window, while the whole is not there.
    pub(super) fn ip_from_window(&self, position: u64) -> Option<u64> {
        if self.ready() {
            return None;
        }
        self.windows.iter().find_map(|w| w.ip_at(position))
    }

    /// A `continue` from `from` before the whole history is decoded, which found no
    /// breakpoint before it: to the first breakpoint hit in the stretches where the list of
    /// the code each stretch ran says one may run, decoding their windows; to the end of a
    /// run that exited if no breakpoint can run on the way; `None` to wait for the whole.
    pub(super) fn continue_in_windows(&mut self, from: u64, breakpoints: &HashSet<u64>) -> Option<Stop> {
        if self.ready() {
            return None;
        }
        let code = self.code.clone()?;
        let total = self.recording.manifest.instructions;
        let mut at = from;
        let built = self.windows_built;
        let searched = if total >= SEARCHED_FROM { SEARCHED } else { 0 };
        loop {
            let Some(range) = code
                .may_run_in(at, total, breakpoints.iter().copied())
                .into_iter()
                .next()
            else {
                // No breakpoint runs from here on: a fault's end from the recording, or the
                // end, if a window holds it.
                if let Some(stop) = self.end_at_once(at, breakpoints) {
                    return Some(stop);
                }
                let end = total.checked_sub(1)?;
                self.window_for(end)?;
                return Some(self.moved_to(end, Stop::End));
            };
            if self.ready() || (self.windows_built >= built + searched && self.window_index(range.start).is_none()) {
                return None;
            }
            let w = self.window_for(range.start)?;
            let (base, last) = (w.base, w.last);
            let upto = (last + 1).min(range.end);
            if let Hit::At(q) = w
                .timeline
                .next_hit(range.start - base, upto - base, breakpoints, || false)
            {
                return Some(self.moved_to(base + q, Stop::Breakpoint));
            }
            at = upto;
        }
    }

    /// A `reverse-continue` before the whole history is decoded: to the last breakpoint hit
    /// below the current position in the stretches where one may run, decoding their
    /// windows; to position 0 if none can run before it; `None` to wait for the whole.
    pub(super) fn reverse_in_windows(&mut self, breakpoints: &HashSet<u64>) -> Option<Stop> {
        if self.ready() {
            return None;
        }
        let code = self.code.clone()?;
        let mut at = self.position;
        let built = self.windows_built;
        let total = self.recording.manifest.instructions;
        let searched = if total >= SEARCHED_FROM { SEARCHED } else { 0 };
        loop {
            let Some(range) = code.may_run_in(0, at, breakpoints.iter().copied()).pop() else {
                return Some(self.moved_to(0, Stop::Begin));
            };
            if self.ready() || (self.windows_built >= built + searched && self.window_index(range.end - 1).is_none()) {
                return None;
            }
            let w = self.window_for(range.end - 1)?;
            let (base, first) = (w.base, w.from);
            let down = first.max(range.start);
            if let Hit::At(q) = w
                .timeline
                .previous_hit(range.end - base, down - base, breakpoints, || false)
            {
                return Some(self.moved_to(base + q, Stop::Breakpoint));
            }
            at = down;
        }
    }

    /// Whether, before the whole history is decoded, stops between anchors answer from a
    /// window (a recording with sync points and anchors): their values are final as shown.
    pub fn answers_early(&self) -> bool {
        !self.ready() && self.window_source.is_some()
    }

    /// Moves to `position` before the whole history is decoded, if the beginning or a
    /// window (decoded now if need be) answers there: `monitor goto` then need not wait for
    /// the whole. False (nothing moved) otherwise, or once the whole is there.
    pub fn goto_early(&mut self, position: u64) -> bool {
        if self.ready() {
            return false;
        }
        let answered = position == 0 || self.prefix_holds(position) || self.window_for(position).is_some();
        if answered {
            self.moved_to(position, Stop::Step);
        }
        answered
    }

    /// Before the whole history is decoded, makes `position` answerable if a window can be
    /// decoded there: a step back below a window's anchor decodes the stretch before it
    /// (a fraction of a second) rather than wait for the whole (seconds to minutes).
    pub(super) fn reach_early(&mut self, position: u64) {
        if !self.ready() && !self.prefix_holds(position) {
            let _ = self.window_for(position);
        }
    }

    /// One step forwards inside a window before the whole history is decoded; `None`
    /// outside one (or at its last position).
    pub(super) fn step_in_window(&mut self) -> Option<Stop> {
        if self.ready() {
            return None;
        }
        let next = self.position + 1;
        let i = self.window_index(self.position)?;
        (next <= self.windows[i].last).then(|| self.moved_to(next, Stop::Step))
    }

    fn moved_to(&mut self, position: u64, stop: Stop) -> Stop {
        self.position = position;
        self.known = None;
        stop
    }
}

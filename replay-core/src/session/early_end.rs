//! The end at once (issue 40): a `continue` asked while the trace is still being decoded
//! stops at the end of a run a fault ended, with the end's values, when the recording's list
//! of the code each stretch ran ([`CodeRan`]) shows that no breakpoint's page ran code
//! before it. The end is where the recorder read the registers and memory, so what gdb
//! reads there is final without the history; only the decode would place a breakpoint hit
//! in between, and none can be. Anything else outside the history's beginning
//! ([`super::prefix`]: a breakpoint that may run, a move back, a step) waits for the decode
//! as before, and the decode checks the list against the
//! history it built ([`crate::timeline::Timeline::code_outside`]), so a list that left
//! out code that ran is an error, never a hit passed over.

use std::collections::HashSet;

use super::open::Prepared;
use super::{Session, Stop};
use crate::image::AddressSpace;
use crate::recording::code_ran::CodeRan;
use crate::recording::{EndState, Recording};
use crate::state::{Known, Values};

/// The end of a run a fault ended, as the recording's files give it.
pub(super) struct EarlyEnd {
    /// Its position: the faulting instruction's, after every one that retired.
    position: u64,
    /// The faulting instruction's address.
    ip: u64,
    signal: i32,
    /// The end snapshot, as the state layer answers there once it has the history.
    known: Known,
}

impl EarlyEnd {
    /// The end, for a complete recording (not opened `partial`) that a fault ended with its
    /// registers read there and that lists the code each stretch ran; `None` otherwise.
    pub(super) fn new(
        recording: &Recording,
        prepared: &Prepared,
        space: &AddressSpace,
        code: Option<&CodeRan>,
        partial: bool,
    ) -> Option<Self> {
        code.filter(|c| !partial && c.covers() == recording.manifest.instructions)?;
        let EndState::Signaled {
            signal, ip: Some(ip), ..
        } = &recording.manifest.end
        else {
            return None;
        };
        let ip = u64::from_str_radix(ip.trim_start_matches("0x"), 16).ok()?;
        let end = prepared.end.as_ref().ok()?.as_ref()?;
        let known = Values::known_at_end(space.clone(), end, &prepared.syscalls)?;
        Some(Self {
            position: recording.manifest.instructions,
            ip,
            signal: *signal,
            known,
        })
    }
}

impl Session {
    /// The end, if the history is still being decoded and `position` is it.
    fn early_end_at(&self, position: u64) -> Option<&EarlyEnd> {
        (self.early_end.as_ref())
            .filter(|e| e.position == position)
            .filter(|_| !self.ready())
    }

    /// What is known at the current position without the history, if it is the end.
    pub(super) fn known_early(&self) -> Option<&Known> {
        self.early_end_at(self.position).map(|e| &e.known)
    }

    /// The instruction at `position` without the history, if it is the end.
    pub(super) fn ip_early(&self, position: u64) -> Option<u64> {
        self.early_end_at(position).map(|e| e.ip)
    }

    /// A `continue` before the history is decoded, which found no breakpoint below
    /// `from`: to the end, if no address of `breakpoints` can run from there on; `None` to
    /// search the history as ever.
    pub(super) fn end_at_once(&mut self, from: u64, breakpoints: &HashSet<u64>) -> Option<Stop> {
        if self.ready() {
            self.early_end = None;
            return None;
        }
        let (e, code) = (self.early_end.as_ref()?, self.code.as_ref()?);
        if from > e.position || code.may_run(from, e.position, breakpoints.iter().copied()) {
            return None;
        }
        self.position = e.position;
        self.known = None;
        Some(Stop::Signal(e.signal))
    }
}

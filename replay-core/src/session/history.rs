//! The decoded history as the session's owner is told of it when a background decode ends
//! ([`super::background::OnDone`]), and the questions it shares with the session.

use super::open::Decoded;
use crate::flow::{EventKind, FlowEvent};
use crate::recording::RecordingError;
use crate::timeline::cache::Origin;
use crate::timeline::Timeline;

/// The decoded history, as [`OnDone`] is told of it.
pub struct History<'a>(pub(super) &'a Decoded);

impl History<'_> {
    /// Number of positions.
    pub fn len(&self) -> u64 {
        self.0.timeline.len()
    }

    /// Whether the history is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The positions and their instructions.
    pub fn timeline(&self) -> &Timeline {
        &self.0.timeline
    }

    /// Decode errors ([`Session::errors`]).
    pub fn errors(&self) -> impl Iterator<Item = &FlowEvent> {
        errors(&self.0.timeline)
    }

    /// Unbounded spins ([`Session::spins`]).
    pub fn spins(&self) -> impl Iterator<Item = &FlowEvent> {
        spins(&self.0.timeline)
    }

    /// What an incomplete recording opened with `partial` is missing.
    pub fn incomplete(&self) -> Option<&RecordingError> {
        self.0.incomplete.as_ref()
    }

    /// Where the timeline came from.
    pub fn origin(&self) -> &Origin {
        &self.0.origin
    }

    /// How far the values are being worked out in the background (none if they need no
    /// background work).
    pub fn values_progress(&self) -> Option<crate::state::ValuesProgress> {
        self.0.values.progress()
    }

    /// Whether the timeline is being stored next to the recording.
    pub fn storing(&self) -> bool {
        self.0.storing.is_some()
    }
}

pub(super) fn errors(t: &Timeline) -> impl Iterator<Item = &FlowEvent> {
    t.events().iter().filter(|e| matches!(e.kind, EventKind::Error { .. }))
}

pub(super) fn spins(t: &Timeline) -> impl Iterator<Item = &FlowEvent> {
    t.events().iter().filter(|e| matches!(e.kind, EventKind::Spins { .. }))
}

/// A history with no positions, for a session whose decode failed.
pub(super) static NO_TIMELINE: std::sync::LazyLock<Timeline> = std::sync::LazyLock::new(Timeline::default);

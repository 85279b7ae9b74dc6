//! A request to stop recording: the signal `rtit record` received (SIGINT, SIGTERM, SIGHUP),
//! shared with whatever backend runs, which polls it and ends the recording cleanly.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use nix::sys::signal::Signal;
use rtit_replay_core::recording::EndState;

/// The signal that asked recording to stop, if one did; cheap to clone and to poll.
#[derive(Debug, Clone, Default)]
pub struct Interrupt(Arc<AtomicUsize>);

impl Interrupt {
    /// No request yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks to stop, as signal `signal` would. The first request stands: a second signal
    /// while the recording stops changes nothing, so the recording names the one that asked.
    /// One atomic operation, so a signal handler may call it.
    pub fn raise(&self, signal: i32) {
        let _ = self
            .0
            .compare_exchange(0, signal.max(1) as usize, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Whether stopping was asked for.
    #[inline]
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed) != 0
    }

    /// The signal that asked, if any.
    pub fn signal(&self) -> Option<i32> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n as i32),
        }
    }

    /// How a recording stopped by this request ended.
    pub fn end_state(&self) -> EndState {
        EndState::Interrupted {
            signal: self
                .signal()
                .and_then(|s| Signal::try_from(s).ok())
                .map(|s| s.as_str().to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_signal_that_asked_is_the_one_named_in_the_end_state() {
        let i = Interrupt::new();
        assert!(!i.is_set());
        assert_eq!(i.end_state(), EndState::Interrupted { signal: None });
        let other = i.clone();
        other.raise(15);
        other.raise(2);
        assert!(i.is_set());
        assert_eq!(
            i.end_state(),
            EndState::Interrupted {
                signal: Some("SIGTERM".into())
            }
        );
    }
}

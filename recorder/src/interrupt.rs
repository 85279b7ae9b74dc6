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

    /// The name of the signal that asked (`SIGTERM`), if one did.
    pub fn name(&self) -> Option<String> {
        self.signal()
            .map(|s| Signal::try_from(s).map_or_else(|_| format!("signal {s}"), |s| s.as_str().to_string()))
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

    /// A [`Stopped`] naming the signal and `during` if one asked to stop: checked before a
    /// step that starts something, which would only have to be stopped again.
    pub fn check(&self, during: impl FnOnce() -> String) -> Result<(), Stopped> {
        match self.name() {
            Some(signal) => Err(Stopped {
                signal,
                during: during(),
            }),
            None => Ok(()),
        }
    }

    /// `error`, or, when a signal asked to stop, a [`Stopped`] naming it and `during`: the
    /// error a backend meets after a signal is the signal's doing (QEMU ended by the plugin
    /// while rtit still talked to its gdbstub, a program killed before its start point), and
    /// said as itself it hides the signal. `E` keeps errors that name the signal already.
    pub fn explain<E: From<Stopped> + NamesTheSignal>(&self, error: E, during: impl FnOnce() -> String) -> E {
        match self.name() {
            Some(signal) if !error.names_the_signal() => Stopped {
                signal,
                during: during(),
            }
            .into(),
            _ => error,
        }
    }
}

/// `rtit record` received SIGINT, SIGTERM or SIGHUP before there was anything to record (or
/// while what there was could not be kept).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rtit record received {signal} while {during}; nothing recorded")]
pub struct Stopped {
    /// The signal (`SIGTERM`).
    pub signal: String,
    /// What rtit was doing (`starting QEMU`).
    pub during: String,
}

/// Whether an error says which signal stopped `rtit record` already.
pub trait NamesTheSignal {
    /// True if it does.
    fn names_the_signal(&self) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    enum Error {
        Other,
        Signal,
        Stopped(Stopped),
    }

    impl From<Stopped> for Error {
        fn from(s: Stopped) -> Self {
            Self::Stopped(s)
        }
    }

    impl NamesTheSignal for Error {
        fn names_the_signal(&self) -> bool {
            matches!(self, Self::Signal | Self::Stopped(_))
        }
    }

    #[test]
    fn an_error_after_a_signal_is_the_signal_unless_it_names_it() {
        let i = Interrupt::new();
        assert_eq!(
            i.explain(Error::Other, || "starting QEMU".into()),
            Error::Other,
            "no signal"
        );
        assert_eq!(i.check(|| unreachable!()), Ok(()));
        i.raise(1);
        let explained = i.explain(Error::Other, || "starting QEMU".into());
        assert_eq!(
            explained,
            Error::Stopped(Stopped {
                signal: "SIGHUP".into(),
                during: "starting QEMU".into()
            })
        );
        assert_eq!(i.explain(Error::Signal, || unreachable!()), Error::Signal);
        assert_eq!(
            i.check(|| "starting QEMU".into()).map_err(Error::from),
            Err(explained.clone())
        );
        let Error::Stopped(stopped) = explained else {
            unreachable!()
        };
        assert_eq!(
            stopped.to_string(),
            "rtit record received SIGHUP while starting QEMU; nothing recorded"
        );
    }

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

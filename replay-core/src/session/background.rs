//! The history while a thread of its own decodes it: a session answers at position 0 from
//! the start snapshot meanwhile, and anything that needs the history waits for it here
//! (issue 19: the server answers gdb's first packets at once, whatever the trace's length).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

use super::history::History;
use super::open::{decode, Decoded, Work};
use super::prefix::{first_difference, Prefix};
use super::window::{self, Window};
use crate::recording::RecordingError;

/// How often a wait looks whether it was interrupted.
const POLL: Duration = Duration::from_millis(20);

/// Called once on the decoding thread when the history is ready, or with why it is not.
pub type OnDone = Box<dyn FnOnce(Result<&History<'_>, &RecordingError>) + Send>;

/// The decoded history, once there is one.
pub(super) struct Background {
    cell: OnceLock<Result<Decoded, RecordingError>>,
    arriving: Option<Receiver<Result<Decoded, RecordingError>>>,
    /// The history's beginning, decoded first (`None` sent: there is none).
    beginning: Option<Receiver<Option<Prefix>>>,
    /// The window that ends a run that exited, decoded next (`None` sent: there is none).
    ending: Option<Receiver<Option<Window>>>,
    /// Set while a stop's values are worked out from a part decoded alone, or a window is
    /// decoded: the whole decode waits ([`super::open::Work::decode_pause`]).
    pub(super) decode_pause: Option<Arc<AtomicBool>>,
    /// Set while a question of a part decoded alone walks: the whole history's fill waits.
    pub(super) fill_pause: Option<Arc<AtomicBool>>,
    /// Set once something waits for the whole history: the decoding thread stops working
    /// out the end's values ahead of time and decodes it.
    whole_wanted: Arc<AtomicBool>,
    /// The recording's directory, for the error if the decoding thread dies.
    dir: String,
}

impl Background {
    /// A history decoded already.
    pub(super) fn done(decoded: Result<Decoded, RecordingError>, dir: String) -> Self {
        Self {
            cell: OnceLock::from(decoded),
            arriving: None,
            beginning: None,
            ending: None,
            decode_pause: None,
            fill_pause: None,
            whole_wanted: Arc::new(AtomicBool::new(true)),
            dir,
        }
    }

    /// Decodes on a thread of its own: the history's beginning first ([`Prefix`]), its end
    /// next ([`Suffix`]), then the whole, whose beginning and end must be the same.
    pub(super) fn spawn(
        mut work: Work,
        source: Option<window::Source>,
        mut progress: Box<dyn FnMut(u64) + Send>,
        on_done: OnDone,
    ) -> Self {
        let dir = work.recording.dir.display().to_string();
        let (tx, rx) = mpsc::sync_channel(1);
        let (early_tx, early_rx) = mpsc::sync_channel(1);
        let (end_tx, end_rx) = mpsc::sync_channel(1);
        let decode_pause = work.decode_pause.clone();
        let fill_pause = Arc::new(AtomicBool::new(false));
        let flag = fill_pause.clone();
        let whole_wanted = Arc::new(AtomicBool::new(false));
        let total = work.recording.manifest.instructions;
        let wanted = whole_wanted.clone();
        std::thread::spawn(move || {
            // One flag for the questions of every part decoded alone: the whole history's
            // fill waits while it is set.
            let mut prefix = Prefix::decode(&work);
            let beginning = prefix.as_ref().map(Prefix::history);
            if let Some(p) = &mut prefix {
                p.share_pause(flag.clone());
            }
            let _ = early_tx.send(prefix);
            let mut suffix = source.as_ref().and_then(window::Source::last_window);
            if let Some(s) = &mut suffix {
                s.share_pause(flag.clone());
            }
            work.pause = Some(flag);
            let end = suffix.as_ref().map(|w| (w.base, w.timeline.clone()));
            if let Some(s) = &mut suffix {
                // Compared below, before the history is handed over.
                s.checked = true;
                // The end's values now, before the whole decode starts, on a history long
                // enough for windows to answer breakpoints' searches: the first thing gdb
                // is most often asked after opening is a `continue` to the exit and a `bt`
                // there, and a walk from the last anchor takes up to a second (three beside
                // the decode). Not once the session waits for the whole: the walk goes on
                // from where it stopped when the end is asked for. (On a shorter history
                // the whole decode comes in a second or two, and a breakpoint waits for it:
                // gzip's `break write` came 0.5 s later with the end worked out first.)
                if total >= super::windows::SEARCHED_FROM {
                    s.settle(s.last, &mut || wanted.load(Ordering::Relaxed));
                }
            }
            let _ = end_tx.send(suffix);
            let path = work.recording.dir.display().to_string();
            let differs = |part: &str, p: u64| {
                RecordingError::Invalid {
                path: path.clone(),
                message: format!(
                    "the history's {part}, decoded alone, differs from the whole at position {p} (a bug; please report it)"
                ),
            }
            };
            let decoded = decode(work, &mut *progress).and_then(|d| {
                if let Some(p) = (beginning.as_ref()).and_then(|(upto, t)| first_difference(t, &d.timeline, *upto)) {
                    return Err(differs("beginning", p));
                }
                if let Some(p) = (end.as_ref()).and_then(|(base, t)| window::differs(t, *base, &d.timeline)) {
                    return Err(differs("end", p));
                }
                Ok(d)
            });
            match &decoded {
                Ok(d) => on_done(Ok(&History(d))),
                Err(e) => on_done(Err(e)),
            }
            let _ = tx.send(decoded);
        });
        Self {
            cell: OnceLock::new(),
            arriving: Some(rx),
            beginning: Some(early_rx),
            ending: Some(end_rx),
            decode_pause: Some(decode_pause),
            fill_pause: Some(fill_pause),
            whole_wanted,
            dir,
        }
    }

    /// The history's beginning, once, waiting for it if it is still being decoded (a few
    /// milliseconds); `None` if there is none, or it was taken.
    pub(super) fn take_prefix(&mut self) -> Option<Prefix> {
        let prefix = self.beginning.as_ref()?.recv().ok().flatten();
        self.beginning = None;
        prefix
    }

    /// Runs `work` with the whole decode waiting (`decode_pause` set).
    pub(super) fn pausing_decode<T>(&self, work: impl FnOnce() -> T) -> T {
        let flag = self.decode_pause.as_deref();
        flag.iter().for_each(|f| f.store(true, Ordering::Relaxed));
        let out = work();
        flag.iter().for_each(|f| f.store(false, Ordering::Relaxed));
        out
    }

    /// The history's end, once, waiting for it if it is still being decoded (a second or
    /// less); `None` if there is none, or it was taken.
    pub(super) fn take_suffix(&mut self) -> Option<Window> {
        let suffix = self.ending.as_ref()?.recv().ok().flatten();
        self.ending = None;
        suffix
    }

    /// The history, waiting for it as long as it takes.
    pub(super) fn get(&self) -> Result<&Decoded, &RecordingError> {
        self.whole_wanted.store(true, Ordering::Relaxed);
        self.cell
            .get_or_init(|| match &self.arriving {
                Some(rx) => rx.recv().unwrap_or_else(|_| Err(self.died())),
                None => Err(self.died()),
            })
            .as_ref()
    }

    /// [`Self::get`], mutably.
    pub(super) fn get_mut(&mut self) -> Result<&mut Decoded, &RecordingError> {
        let _ = self.get();
        // `get` filled the cell, whatever came.
        self.cell.get_mut().expect("filled").as_mut().map_err(|e| &*e)
    }

    /// The history if it is there now.
    pub(super) fn now(&self) -> Option<Result<&Decoded, &RecordingError>> {
        self.wait_for(Duration::ZERO)
    }

    /// The history if it is there within `timeout`.
    pub(super) fn wait_for(&self, timeout: Duration) -> Option<Result<&Decoded, &RecordingError>> {
        if self.cell.get().is_none() {
            let rx = self.arriving.as_ref()?;
            let arrived = match rx.recv_timeout(timeout) {
                Ok(d) => d,
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => Err(self.died()),
            };
            let _ = self.cell.set(arrived);
        }
        self.cell.get().map(|r| r.as_ref())
    }

    /// The history, unless `interrupted` says to stop waiting (polled every 20 ms).
    pub(super) fn wait(&self, interrupted: &mut dyn FnMut() -> bool) -> Option<Result<&Decoded, &RecordingError>> {
        self.whole_wanted.store(true, Ordering::Relaxed);
        loop {
            if let Some(r) = self.wait_for(POLL) {
                return Some(r);
            }
            if interrupted() {
                return None;
            }
        }
    }

    fn died(&self) -> RecordingError {
        RecordingError::Invalid {
            path: self.dir.clone(),
            message: "decoding the trace failed: the decoder stopped without an answer (a bug; please report it)"
                .to_string(),
        }
    }
}

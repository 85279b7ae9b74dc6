//! The background fill: on every core, each stretch between two whole states walked once
//! forwards and once backwards, keeping a state every [`EVERY`] positions each way, so that
//! a stop anywhere walks at most that far (tens of milliseconds) once its stretch is filled. Nothing
//! it keeps changes an answer (the same walks from the same whole states); it only makes
//! the answers nearer. It yields to a question being worked out (`pause`), and stops when the
//! engine goes.
//!
//! The forward walks come first. One that reaches the exact state above its stretch knowing
//! every value that state holds, with the same values, settles the stretch
//! ([`Verdicts`]): what the backward pass knows at a position of it comes from that state's
//! values, each carried back through instructions that map it one to one (an unchanged
//! register, an inverted `add`); had the forward pass not known the value at the position, it
//! would not know what it maps to at the top either. So the backward walk over a settled
//! stretch is skipped, by the fill and by the questions: on python3 that is half the walking.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::super::memory::log::Logging;
use super::super::walker::{Shared, Walker};
use super::super::watch::index::{StretchWrites, WriteIndex, BLOCK};
use super::exact::Exact;
use super::kept::Kept;
use super::side::CANCEL_EVERY;

/// Positions between the states the fill keeps: a stop next to one walks at most this far
/// (about 50 ms), both ways at once. Not the questions' 2^18: a state holds what was written
/// since the one before, and on sort (2.5 G instructions, its buffers rewritten over and
/// over) states every 2^18 positions took 3.4 GB before the fill was half done.
const EVERY: u64 = 1 << 20;

/// What the fill works from, shared with the engine.
pub(super) struct Sources {
    pub(super) shared: Arc<Shared>,
    /// The whole states by position.
    pub(super) exact: Arc<Exact>,
    pub(super) forward: Arc<Kept>,
    pub(super) backward: Arc<Kept>,
    /// Set while a question walks: the fill waits.
    pub(super) pause: Arc<AtomicBool>,
    pub(super) verdicts: Arc<Verdicts>,
    /// What each stretch's forward walk wrote, block by block, for the watchpoints.
    pub(super) writes: Arc<WriteIndex>,
}

/// Per stretch, whether its forward walk reached the exact state above knowing all of it
/// (then the backward walk there teaches nothing), as the fill found.
pub(super) struct Verdicts {
    each: Box<[AtomicU8]>,
    /// Found but not used: every backward walk is made.
    ignored: AtomicBool,
}

const UNSEEN: u8 = 0;
const SETTLED: u8 = 1;
const OPEN: u8 = 2;

impl Verdicts {
    pub(super) fn new(stretches: usize) -> Self {
        Self {
            each: (0..stretches).map(|_| AtomicU8::new(UNSEEN)).collect(),
            ignored: AtomicBool::new(false),
        }
    }

    /// Makes every stretch count as not settled (they are still found, and counted).
    pub(super) fn ignore(&self) {
        self.ignored.store(true, Ordering::Relaxed);
    }

    /// Whether stretch `i`'s forward walk was found to know all the exact state above holds.
    pub(super) fn settled(&self, i: usize) -> bool {
        !self.ignored.load(Ordering::Relaxed) && self.each.get(i).is_some_and(|v| v.load(Ordering::Acquire) == SETTLED)
    }

    fn set(&self, i: usize, settled: bool) {
        self.each[i].store(if settled { SETTLED } else { OPEN }, Ordering::Release);
    }

    /// How many stretches are settled, and how many were looked at.
    pub(super) fn count(&self) -> (usize, usize) {
        let v = self.each.iter().map(|v| v.load(Ordering::Relaxed));
        v.fold((0, 0), |(s, n), v| {
            (s + usize::from(v == SETTLED), n + usize::from(v != UNSEEN))
        })
    }
}

/// The fill's threads.
pub(super) struct Fill {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Positions walked so far, and in all.
    pub(super) walked: Arc<AtomicU64>,
    pub(super) total: u64,
}

/// One walk: a stretch's index and its direction.
#[derive(Clone, Copy)]
struct Task {
    stretch: usize,
    forwards: bool,
}

impl Fill {
    /// Starts the fill on every core.
    pub(super) fn spawn(sources: Sources) -> Self {
        let sources = Arc::new(sources);
        let len = sources.shared.history.len();
        let stretches = sources.exact.len();
        // Forwards over every stretch (the last one to the end of the history when there is
        // no end state), then backwards over those with a whole state above whose forward
        // walk did not settle them.
        let forwards = (0..stretches).map(|stretch| Task {
            stretch,
            forwards: true,
        });
        let backwards = (0..stretches.saturating_sub(1)).map(|stretch| Task {
            stretch,
            forwards: false,
        });
        let tasks: Vec<Task> = forwards.chain(backwards).collect();
        let positions = sources.exact.positions();
        let span = |t: &Task| {
            let top = positions.get(t.stretch + 1).copied().unwrap_or(len.saturating_sub(1));
            top - positions[t.stretch]
        };
        let total = tasks.iter().map(span).sum();
        let tasks: Arc<[Task]> = tasks.into();
        let next = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let walked = Arc::new(AtomicU64::new(0));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = (0..cores)
            .map(|_| {
                let (sources, tasks, next) = (sources.clone(), tasks.clone(), next.clone());
                let (stop, walked) = (stop.clone(), walked.clone());
                std::thread::spawn(move || {
                    lowest_priority();
                    let mut walker = Walker::new(sources.shared.clone());
                    while let Some(&task) = tasks.get(next.fetch_add(1, Ordering::Relaxed)) {
                        if !walk(&sources, &mut walker, task, &stop, &walked) {
                            return;
                        }
                    }
                })
            })
            .collect();
        Self {
            stop,
            threads,
            walked,
            total,
        }
    }
}

impl Drop for Fill {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Puts the calling thread at the lowest priority (nice 19; on Linux a thread's own): the
/// fill only brings later answers nearer, so on a machine with few cores gdb and a stop's
/// own walks come first (with the fill at the same priority, gdb took half as long again to
/// load its symbols at the first stops).
fn lowest_priority() {
    // SAFETY: gettid and setpriority read and change only this thread's scheduling.
    #[allow(unsafe_code)]
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19);
    }
}

/// Walks one stretch one way, keeping a state at every multiple of [`EVERY`] inside it;
/// false if told to stop.
fn walk(s: &Sources, walker: &mut Walker, task: Task, stop: &AtomicBool, walked: &AtomicU64) -> bool {
    let len = s.shared.history.len();
    let positions = s.exact.positions();
    let bottom = positions[task.stretch];
    let top = positions
        .get(task.stretch + 1)
        .copied()
        .unwrap_or(len.saturating_sub(1));
    if !task.forwards && s.verdicts.settled(task.stretch) {
        walked.fetch_add(top - bottom, Ordering::Relaxed);
        return true;
    }
    let (kept, mut at, mut st) = match task.forwards {
        true => (&s.forward, bottom, s.exact.forward(task.stretch).clone()),
        false => (&s.backward, top, s.exact.backward(task.stretch + 1).clone()),
    };
    // The forward walk notes what each block of it writes (after the exact state is had:
    // completing it walks too).
    let logging = task.forwards.then(Logging::start);
    let mut writes = StretchWrites::default();
    let mut steps = 0u64;
    while (task.forwards && at < top) || (!task.forwards && at > bottom) {
        if steps % CANCEL_EVERY == 0 {
            walked.fetch_add(steps.min(CANCEL_EVERY), Ordering::Relaxed);
            while s.pause.load(Ordering::Relaxed) && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(2));
            }
            if stop.load(Ordering::Relaxed) {
                return false;
            }
        }
        if task.forwards {
            // To the next place something is done: a look at `stop`, a block's end, a state
            // to keep, the top.
            let to = (at + CANCEL_EVERY - steps % CANCEL_EVERY)
                .min(bottom + (at - bottom) / BLOCK * BLOCK + BLOCK)
                .min(at / EVERY * EVERY + EVERY)
                .min(top);
            walker.forward_to(&mut st, at, to);
            steps += to - at;
            at = to;
            if let Some(log) = logging.as_ref().filter(|_| (at - bottom) % BLOCK == 0 || at == top) {
                writes.push(log.take());
            }
        } else {
            // Down to the next look at `stop`, state to keep, or the bottom.
            let to = (at - (CANCEL_EVERY - steps % CANCEL_EVERY).min(at - bottom))
                .max((at - 1) / EVERY * EVERY)
                .max(bottom);
            walker.backward_to(&mut st, at, to);
            steps += at - to;
            at = to;
        }
        if at % EVERY == 0 && at != bottom && at != top {
            kept.keep(at, &st);
        }
    }
    walked.fetch_add(steps % CANCEL_EVERY, Ordering::Relaxed);
    if task.forwards {
        s.writes.set(task.stretch, writes);
    }
    if task.forwards && task.stretch + 1 < s.exact.len() {
        let above = s.exact.forward(task.stretch + 1);
        s.verdicts.set(task.stretch, st.covers(above));
    }
    true
}

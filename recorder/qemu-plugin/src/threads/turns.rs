//! Whose turn it is: one thread of the program runs at a time, the others wait outside
//! QEMU's execution loop (in a system call's callbacks, or, for a new thread, in its vCPU's
//! first callback before it ran anything), so that QEMU's exclusive sections (a flush of its
//! translations, a new vCPU's scoreboard) never wait for a thread that waits for its turn.
//! A turn ends at a system call's entry, and a waiting thread takes it in the order it came.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rtit_recorder::outcome::RegisterMap;
use rtit_recorder::qemu::engine::Left;

/// How long a thread waits for its turn before the one that runs is interrupted (at its
/// next block): QEMU runs some 10 to 50 million instructions in that time. Without it a
/// thread that spins waiting for another (a busy loop, Python's GIL asking for a switch)
/// would wait for ever.
const SLICE: Duration = Duration::from_millis(10);

/// A thread that does not run: its registers where it stopped (before the system call it
/// left at, or a new thread's first ones).
#[derive(Debug, Clone)]
pub struct Parked {
    pub registers: RegisterMap,
}

/// What a thread that got its turn found.
#[derive(Debug, Clone)]
pub struct Came {
    /// The thread whose blocks came last and how it left, if that is another thread (a
    /// switch); `None` if none ran since this one left.
    pub from: Option<(i64, Left)>,
    /// This thread's registers as it stopped.
    pub registers: RegisterMap,
}

#[derive(Debug)]
struct Turns {
    /// The thread whose turn it is; `None`: nobody's (the last one left at a system call
    /// and none waited).
    owner: Option<i64>,
    /// The thread whose blocks the ring has last, and how it left, once it did.
    last: i64,
    left: Option<Left>,
    /// Threads waiting for their turn, in the order they came.
    queue: VecDeque<i64>,
    parked: BTreeMap<i64, Parked>,
    /// Threads alive, as QEMU counts its vCPUs.
    live: usize,
}

static TURNS: Mutex<Option<Turns>> = Mutex::new(None);
static TURN: Condvar = Condvar::new();

/// Publishes whose turn it is (`published::RUNNING`).
fn publish(owner: Option<i64>) {
    crate::published::RUNNING.store(owner.unwrap_or(0) as u64, Ordering::Relaxed);
}

fn lock() -> MutexGuard<'static, Option<Turns>> {
    TURNS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Thread `tid`, the only one, runs, and creates the first other thread.
pub fn begin(tid: i64) {
    let mut turns = lock();
    if turns.is_none() {
        *turns = Some(Turns {
            owner: Some(tid),
            last: tid,
            left: None,
            queue: VecDeque::new(),
            parked: BTreeMap::new(),
            live: 1,
        });
        publish(Some(tid));
    }
}

/// A thread was created (its `clone` returned in the running thread).
pub fn created() {
    if let Some(t) = lock().as_mut() {
        t.live += 1;
    }
}

/// Whether the running thread is the last one alive (its `exit` ends the process).
pub fn last_alive() -> bool {
    lock().as_ref().map_or(true, |t| t.live <= 1)
}

/// Nobody runs: every thread waits in a system call (or for its turn).
pub fn nobody_runs() -> bool {
    lock().as_ref().is_some_and(|t| t.owner.is_none())
}

/// Thread `tid` stops running, leaving its turn at a system call's entry (`left`) or by its
/// `exit` (`parked` is then `None`), and the next waiting thread gets it.
pub fn leave(tid: i64, left: Left, parked: Option<Parked>) {
    let mut guard = lock();
    let Some(t) = guard.as_mut() else { return };
    match parked {
        Some(p) => {
            t.parked.insert(tid, p);
        }
        None => t.live = t.live.saturating_sub(1),
    }
    if t.owner == Some(tid) {
        t.owner = t.queue.pop_front();
        publish(t.owner);
        t.last = tid;
        t.left = Some(left);
        if t.owner.is_some() {
            TURN.notify_all();
        }
    }
}

/// Why a thread stopped waiting without its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// The recording is over: it runs on unrecorded.
    Over,
    /// It waits inside QEMU's execution loop, and the thread that runs has gone nowhere for
    /// [`STALL`]: QEMU waits for every thread to leave that loop (an exclusive section).
    Stalled,
}

/// How long the running thread may go without a block while one waits inside QEMU's
/// execution loop, before that is taken for QEMU waiting for it.
const STALL: Duration = Duration::from_millis(500);

/// Thread `tid`, new (with `parked`, its first registers), back from the system call it
/// left at, or interrupted before a block (`inside` QEMU's execution loop), waits for its
/// turn.
pub fn wait(tid: i64, parked: Option<Parked>, inside: bool) -> Result<Came, Gone> {
    let mut guard = lock();
    {
        let t = guard.as_mut().ok_or(Gone::Over)?;
        if let Some(p) = parked {
            t.parked.insert(tid, p);
        }
        match t.owner {
            None if t.queue.is_empty() => {
                t.owner = Some(tid);
                publish(t.owner);
            }
            Some(o) if o == tid => {}
            _ => t.queue.push_back(tid),
        }
    }
    let since = Instant::now();
    let mut progress = (crate::ring::PUSHED.load(Ordering::Relaxed), Instant::now());
    loop {
        let t = guard.as_mut().ok_or(Gone::Over)?;
        // The recording is over (it stopped before something it cannot follow): every
        // thread runs on, unrecorded (seen within a wait's timeout).
        if crate::published::inert() {
            return Err(Gone::Over);
        }
        let other_runs = t.owner.is_some_and(|o| o != tid);
        if other_runs && since.elapsed() >= SLICE {
            // The thread that runs has run long enough: it is interrupted at its next block.
            crate::published::close(crate::published::PREEMPT);
        }
        if inside {
            let pushed = crate::ring::PUSHED.load(Ordering::Relaxed);
            if pushed != progress.0 {
                progress = (pushed, Instant::now());
            } else if other_runs && progress.1.elapsed() >= STALL {
                return Err(Gone::Stalled);
            }
        }
        if t.owner == Some(tid) {
            let registers = t.parked.remove(&tid).map(|p| p.registers).unwrap_or_default();
            let from = match t.last == tid {
                true => None,
                false => t.left.map(|left| (t.last, left)),
            };
            t.last = tid;
            t.left = None;
            return Ok(Came { from, registers });
        }
        guard = TURN
            .wait_timeout(guard, SLICE)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

/// The threads that do not run, and their registers, by thread id.
pub fn parked() -> HashMap<i64, RegisterMap> {
    lock()
        .as_ref()
        .map(|t| t.parked.iter().map(|(tid, p)| (*tid, p.registers.clone())).collect())
        .unwrap_or_default()
}

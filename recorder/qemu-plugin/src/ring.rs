//! The executed blocks on their way from the vCPU to the engine (issue 20): QEMU's callback at
//! each block only notes the block and the two inline counters in a ring, without a lock or
//! an atomic read-modify-write (a lock and two atomic swaps per block took 40 % of a
//! recording); the feeder thread (`feeder`) takes them from there under the plugin's lock and
//! runs the engine on the other core, and whoever needs the engine up to date (a system call,
//! the end, a stop, `rtit record` reading the position while QEMU's gdbstub holds the
//! program) takes what is left first ([`take`]).
//!
//! One producer (the vCPU) and one consumer at a time (whoever holds the plugin's lock): the
//! producer writes an entry, then publishes it by raising [`PUSHED`] (release); the consumer
//! reads up to it (acquire), then frees the entries by raising [`TAKEN`].

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::shared::Line;

/// Entries the ring holds: 64 K blocks, about half a million instructions.
const SIZE: usize = 1 << 16;

/// An entry: the block, and the inline counters when it started, side by side (one cache
/// line holds a few entries whole).
struct Entry {
    id: AtomicU32,
    started: AtomicU64,
    accessed: AtomicU64,
}

static ENTRIES: [Entry; SIZE] = [const {
    Entry {
        id: AtomicU32::new(0),
        started: AtomicU64::new(0),
        accessed: AtomicU64::new(0),
    }
}; SIZE];

/// Entries taken between two publications of [`TAKEN`], so that a full ring gets room
/// while a batch is under way.
const PUBLISH: u64 = 64;

/// Entries pushed so far (`rtit record` reads it, with [`TAKEN`], to know the engine is up to
/// date while the program is stopped).
pub static PUSHED: Line<AtomicU64> = Line(AtomicU64::new(0));
/// Entries taken so far.
pub static TAKEN: Line<AtomicU64> = Line(AtomicU64::new(0));

/// [`TAKEN`] as the producer last read it: it reads the consumer's line again only when this
/// says the ring is full.
static TAKEN_SEEN: Line<AtomicU64> = Line(AtomicU64::new(0));

/// A block that started, with the inline counters (totals since QEMU started) at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// The block's id (its index in the engine's table).
    pub id: u32,
    /// Instructions started before it.
    pub started: u64,
    /// Counted memory accesses before it.
    pub accessed: u64,
}

/// Notes a block that starts; false if the ring is full (take from it, then push again).
/// The vCPU alone calls it.
#[inline]
pub fn push(s: Started) -> bool {
    let pushed = PUSHED.load(Ordering::Relaxed);
    if pushed - TAKEN_SEEN.load(Ordering::Relaxed) == SIZE as u64 {
        let taken = TAKEN.load(Ordering::Acquire);
        TAKEN_SEEN.store(taken, Ordering::Relaxed);
        if pushed - taken == SIZE as u64 {
            return false;
        }
    }
    let e = &ENTRIES[pushed as usize % SIZE];
    e.id.store(s.id, Ordering::Relaxed);
    e.started.store(s.started, Ordering::Relaxed);
    e.accessed.store(s.accessed, Ordering::Relaxed);
    PUSHED.store(pushed + 1, Ordering::Release);
    true
}

/// How many entries were taken in all.
pub fn taken() -> u64 {
    TAKEN.load(Ordering::Relaxed)
}

/// How many entries are waiting, and how many were pushed in all.
pub fn waiting() -> (u64, u64) {
    let pushed = PUSHED.load(Ordering::Acquire);
    (pushed - TAKEN.load(Ordering::Relaxed), pushed)
}

/// Takes up to `max` entries in order, calling `f` on each; how many. Callers hold the
/// plugin's lock, so one takes at a time.
pub fn take(max: usize, mut f: impl FnMut(Started)) -> usize {
    let taken = TAKEN.load(Ordering::Relaxed);
    let pushed = PUSHED.load(Ordering::Acquire);
    let n = (pushed - taken).min(max as u64);
    for k in taken..taken + n {
        let e = &ENTRIES[k as usize % SIZE];
        f(Started {
            id: e.id.load(Ordering::Relaxed),
            started: e.started.load(Ordering::Relaxed),
            accessed: e.accessed.load(Ordering::Relaxed),
        });
        if (k + 1) % PUBLISH == 0 {
            TAKEN.store(k + 1, Ordering::Release);
        }
    }
    TAKEN.store(taken + n, Ordering::Release);
    n as usize
}

//! What memory is told to write, noted while a thread asks for it: the background fill's
//! forward walks note every range a step writes or makes unknown (an instruction's store, a
//! system call's logged writes, a map change, a signal frame), and whether a step made all
//! memory unknown (a store through an address nobody knows), for the index of written
//! addresses the watchpoints search (`state::watch`). Off, a write costs one look at a
//! thread-local flag.

use std::cell::{Cell, RefCell};

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    // Const: no lazy set-up looked at on every store.
    static LOG: RefCell<Log> = const {
        RefCell::new(Log {
            noted: Noted {
                ranges: Vec::new(),
                all: false,
            },
            seen: [0; SEEN],
        })
    };
}

/// The log: what was noted, and the writes noted since it was last emptied, by where they
/// fall in a small table, to leave out a write noted already without looking through the
/// ranges (a loop stores to the same few stack slots and fields over and over: the index
/// sorted each block's copies of them, 5 % of the fill on python3).
struct Log {
    noted: Noted,
    /// [`key`]s of writes noted since the log was last emptied (0: none), at [`slot`].
    seen: [u64; SEEN],
}

/// Writes the log remembers exactly.
const SEEN: usize = 512;

/// A write of `len` bytes (1 to 15) at `addr` (below 2^60) as one nonzero number.
#[inline]
fn key(addr: u64, len: u64) -> Option<u64> {
    (len < 16 && addr >> 60 == 0).then_some(addr << 4 | len)
}

/// Where [`key`] `k` goes in the table.
#[inline]
fn slot(k: u64) -> usize {
    ((k >> 4 ^ k >> 13) % SEEN as u64) as usize
}

impl Log {
    /// Notes a write: left out if noted already since the log was emptied (its bytes are
    /// named: a range only ever grows), else added to the ranges.
    #[inline]
    fn add(&mut self, addr: u64, len: u64) {
        if let Some(k) = key(addr, len) {
            let seen = &mut self.seen[slot(k)];
            if *seen == k {
                return;
            }
            *seen = k;
        }
        self.noted.add(addr, len);
    }

    fn clear(&mut self) {
        self.noted.clear();
        self.seen.fill(0);
    }

    fn take(&mut self) -> Noted {
        self.seen.fill(0);
        std::mem::take(&mut self.noted)
    }
}

/// What was written since the log was last taken.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Noted {
    /// Ranges that together name every byte written (each write's first byte and length,
    /// in the order made, a write held by a recent range left out, one touching the last
    /// merged into it).
    pub ranges: Vec<(u64, u64)>,
    /// Whether all memory was made unknown (anything may have been written).
    pub all: bool,
}

/// Notes a write of `len` bytes at `addr`, if this thread logs.
#[inline]
pub(super) fn note(addr: u64, len: u64) {
    if ON.with(Cell::get) && len > 0 {
        LOG.with(|l| l.borrow_mut().add(addr, len));
    }
}

/// How many of the last ranges a new one is compared with: a loop stores to the same few
/// stack slots and fields over and over, and each range left out here is one the index
/// need not sort (sorting took 7 % of the fill on python3).
const RECENT: usize = 4;

/// Notes that all memory was made unknown, if this thread logs.
#[inline]
pub(super) fn note_all() {
    if ON.with(Cell::get) {
        LOG.with(|l| l.borrow_mut().noted.all = true);
    }
}

/// This thread's log while it is held: from [`Logging::start`] until dropped.
pub struct Logging(());

impl Logging {
    /// Starts noting this thread's writes (an empty log). One at a time on a thread: the
    /// log is the thread's.
    pub fn start() -> Self {
        LOG.with(|l| l.borrow_mut().clear());
        ON.with(|on| on.set(true));
        Logging(())
    }

    /// What was noted since the start or the last take, and an empty log.
    pub fn take(&self) -> Noted {
        LOG.with(|l| l.borrow_mut().take())
    }

    /// `f` of what was noted since the start or the last look, then an empty log (its room
    /// kept: a step at a time, without an allocation each).
    pub fn look<R>(&self, f: impl FnOnce(&Noted) -> R) -> R {
        LOG.with(|l| {
            let mut l = l.borrow_mut();
            let r = f(&l.noted);
            l.clear();
            r
        })
    }
}

impl Noted {
    /// Adds a range, unless one of the last few holds it; one that touches the last one
    /// (a run of pushes, a copy a word at a time) grows it. The ranges then name the same
    /// bytes, in fewer entries; order among them does not matter to the index.
    fn add(&mut self, addr: u64, len: u64) {
        let end = addr.saturating_add(len);
        let n = self.ranges.len();
        for &(a, l) in &self.ranges[n.saturating_sub(RECENT)..] {
            if a <= addr && end <= a.saturating_add(l) {
                return;
            }
        }
        if let Some((a, l)) = self.ranges.last_mut() {
            let e = a.saturating_add(*l);
            if addr <= e && *a <= end {
                let start = (*a).min(addr);
                *l = e.max(end) - start;
                *a = start;
                return;
            }
        }
        self.ranges.push((addr, len));
    }

    fn clear(&mut self) {
        self.ranges.clear();
        self.all = false;
    }
}

impl Drop for Logging {
    fn drop(&mut self) {
        ON.with(|on| on.set(false));
        LOG.with(|l| l.borrow_mut().clear());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes a list of ranges names.
    fn bytes(ranges: &[(u64, u64)]) -> std::collections::BTreeSet<u64> {
        ranges.iter().flat_map(|&(a, n)| a..a + n).collect()
    }

    #[test]
    fn the_log_names_every_byte_written_in_fewer_ranges() {
        let writes = [
            // Pushes down a stack, then a store into one of them again.
            (0x7ff8, 8),
            (0x7ff0, 8),
            (0x7fe8, 8),
            (0x7ff0, 4),
            // A copy a word at a time upwards, one overlapping the last.
            (0x1000, 8),
            (0x1008, 8),
            (0x100c, 8),
            // Far apart, then the first again (no longer among the recent ones, but noted
            // already: left out).
            (0x5000, 1),
            (0x6000, 1),
            (0x7000, 1),
            (0x8000, 1),
            (0x9000, 1),
            (0x5000, 1),
        ];
        let log = Logging::start();
        for &(a, n) in &writes {
            note(a, n);
        }
        note(0x1234, 0);
        let noted = log.take();
        assert_eq!(bytes(&noted.ranges), bytes(&writes));
        assert_eq!(
            noted.ranges,
            vec![
                (0x7fe8, 24),
                (0x1000, 20),
                (0x5000, 1),
                (0x6000, 1),
                (0x7000, 1),
                (0x8000, 1),
                (0x9000, 1)
            ]
        );
        assert!(!noted.all);
        // Taken: the same write again is noted in the next block.
        note(0x5000, 1);
        assert_eq!(log.take().ranges, vec![(0x5000, 1)]);
    }
}

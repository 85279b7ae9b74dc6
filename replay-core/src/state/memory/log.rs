//! What memory is told to write, noted while a thread asks for it: the background fill's
//! forward walks note every range a step writes or makes unknown (an instruction's store, a
//! system call's logged writes, a map change, a signal frame), and whether a step made all
//! memory unknown (a store through an address nobody knows), for the index of written
//! addresses the watchpoints search (`state::watch`). Off, a write costs one look at a
//! thread-local flag.

use std::cell::{Cell, RefCell};

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static LOG: RefCell<Noted> = RefCell::new(Noted::default());
}

/// What was written since the log was last taken.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Noted {
    /// Each write's first byte and length, in the order made.
    pub ranges: Vec<(u64, u64)>,
    /// Whether all memory was made unknown (anything may have been written).
    pub all: bool,
}

/// Notes a write of `len` bytes at `addr`, if this thread logs.
#[inline]
pub(super) fn note(addr: u64, len: u64) {
    if ON.with(Cell::get) && len > 0 {
        LOG.with(|l| l.borrow_mut().ranges.push((addr, len)));
    }
}

/// Notes that all memory was made unknown, if this thread logs.
#[inline]
pub(super) fn note_all() {
    if ON.with(Cell::get) {
        LOG.with(|l| l.borrow_mut().all = true);
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
        LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
    }

    /// `f` of what was noted since the start or the last look, then an empty log (its room
    /// kept: a step at a time, without an allocation each).
    pub fn look<R>(&self, f: impl FnOnce(&Noted) -> R) -> R {
        LOG.with(|l| {
            let mut l = l.borrow_mut();
            let r = f(&l);
            l.clear();
            r
        })
    }
}

impl Noted {
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

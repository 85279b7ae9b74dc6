//! Watchpoints (issue 41): the instructions of the history that touch watched bytes, found
//! from the values at each position, both ways. An access is decided from the instruction's
//! addresses as the registers before it give them ([`access`]); a system call, a signal or a
//! map change (the kernel's writes, which no instruction's operands show) counts as a write of
//! the watched bytes it changes or makes unknown. Where an address is unknown to both passes,
//! the search stops there and says so rather than skip a possible access.

mod access;
pub(super) mod index;
mod search;
#[cfg(test)]
mod tests;

pub use access::{Access, UnknownAddress};

/// What a watchpoint waits for, as gdb's Z2 (`watch`), Z3 (`rwatch`) and Z4 (`awatch`) ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchKind {
    /// Writes (`watch`).
    Write,
    /// Reads (`rwatch`).
    Read,
    /// Either (`awatch`).
    Access,
}

/// A watched range of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Watch {
    /// The first byte.
    pub address: u64,
    /// How many bytes.
    pub len: u64,
    /// Which accesses.
    pub kind: WatchKind,
}

impl Watch {
    /// Whether `a` is an access this watchpoint waits for. A read watchpoint waits for reads
    /// alone: x86 has no data breakpoint for reads (DR7's R/W 11 is reads or writes, SDM vol.
    /// 3, 18.2.4), so native gdb emulates one with an access watchpoint and takes a write
    /// that leaves the value as it was for a read; the recording tells them apart.
    fn wants(&self, a: &Access) -> bool {
        let kind = match self.kind {
            WatchKind::Write => a.write,
            WatchKind::Read => !a.write,
            WatchKind::Access => true,
        };
        kind && a.overlaps(self.address, self.len)
    }
}

/// What a search found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The instruction at `position` touches the bytes `watch` watches (its index in the
    /// list searched for), at `address` (the first watched byte it touches), writing them
    /// or not.
    Hit {
        /// The instruction's position.
        position: u64,
        /// Which watch.
        watch: usize,
        /// The first watched byte it touches.
        address: u64,
        /// Whether it writes them.
        write: bool,
    },
    /// The instruction at `position` may touch watched bytes: one of its addresses is not
    /// known.
    Unknown {
        /// The instruction's position.
        position: u64,
    },
    /// Nothing in the range searched.
    Nothing,
}

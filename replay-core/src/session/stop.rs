//! Why a move through the history stopped, as the stub reports it to gdb.

use crate::state;

/// Why a move stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// One step done.
    Step,
    /// A breakpoint address is about to execute.
    Breakpoint,
    /// At the first position, going backwards.
    Begin,
    /// At the last position of a program that exited, going forwards.
    End,
    /// At the faulting instruction of a program a signal killed.
    Signal(i32),
    /// Interrupted (Ctrl-C) before reaching anything.
    Interrupted,
    /// At a system call `catch syscall` asked for ([`Catch`]): its entry (the position of the
    /// `syscall` instruction) or its return (the position after it).
    Syscall {
        /// Its number.
        nr: u64,
        /// Whether this is its entry rather than its return.
        entry: bool,
    },
    /// There is no history to move in: decoding it failed ([`Session::failure`] says why).
    NoHistory,
    /// Next to an instruction that touched watched bytes: after it going forwards, before it
    /// going backwards ([`Session::continue_forward_watching`]).
    Watch {
        /// What the watchpoint it hit waits for.
        kind: state::watch::WatchKind,
        /// The first watched byte the instruction touched.
        address: u64,
        /// Whether it wrote them.
        write: bool,
    },
    /// Next to an instruction that may have touched watched bytes: an address of it is
    /// unknown (after it going forwards, before it going backwards).
    UnknownAccess {
        /// The instruction's position.
        position: u64,
    },
}

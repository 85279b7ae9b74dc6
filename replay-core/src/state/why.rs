//! Why a value is unknown: each unknown register and each page of memory carries the cause
//! and the position at which the pass lost it, so `rtit check-values` can count causes and
//! `monitor why-unknown` can name one (issue 17: fix the largest causes first).
//!
//! A cause is attributed where knowledge is lost and carried where it spreads: an instruction
//! whose result is unknown because an input was unknown passes on that input's cause. The
//! semantics read and write values in hundreds of places, so rather than threading a cause
//! through each, the transition being applied is kept in a thread-local ([`begin`]) and every
//! unknown read notes its cause ([`saw`]); a value made unknown takes the first cause seen
//! during the transition, else the transition's own ([`current`]).

use std::cell::Cell;
use std::fmt;

use iced_x86::Mnemonic;

/// What made a value unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Cause {
    /// The recording's start state did not hold it.
    #[default]
    NotRecorded,
    /// An instruction whose semantics are not modelled wrote it.
    Unmodelled(Mnemonic),
    /// A modelled instruction could not compute it (its inputs' causes were not tracked,
    /// e.g. flags).
    Inputs(Mnemonic),
    /// Memory: a store through an address that was not known may have hit any byte.
    UnknownAddress(Mnemonic),
    /// What a system call (by number) wrote and its log record does not hold.
    Syscall(u16),
    /// A system call whose log record is marked incomplete.
    SyscallIncomplete(u16),
    /// A signal delivered at a system call's return: the kernel set the registers and wrote
    /// the signal frame.
    Signal,
    /// Something the trace does not show: an interrupt, untraced code, a gap, an error.
    Untraced,
    /// An instruction that could not be decoded from the images.
    Undecodable,
    /// A memory-map change (mmap, munmap, mprotect, brk) touched the range.
    MapChange,
    /// Memory the kernel rewrites whenever it returns to the program (an rseq area).
    KernelUpdated,
    /// An instruction in image pages the program made writable: it may have rewritten it,
    /// and the image shows the code as it was.
    Rewritable,
}

impl Cause {
    /// A short label for tables: the kind of cause without its detail.
    pub fn kind(self) -> &'static str {
        match self {
            Cause::NotRecorded => "not in the start state",
            Cause::Unmodelled(_) => "unmodelled instruction",
            Cause::Inputs(_) => "unknown input, cause not tracked",
            Cause::UnknownAddress(_) => "store through an unknown address",
            Cause::Syscall(_) => "system call (result or writes not logged)",
            Cause::SyscallIncomplete(_) => "system call log incomplete",
            Cause::Signal => "signal delivery",
            Cause::Untraced => "untraced code, interrupt or gap",
            Cause::Undecodable => "undecodable instruction",
            Cause::MapChange => "memory-map change",
            Cause::KernelUpdated => "memory the kernel updates (rseq)",
            Cause::Rewritable => "code in pages the program made writable",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = |m: &Mnemonic| format!("{m:?}").to_lowercase();
        match self {
            Cause::Unmodelled(x) => write!(f, "unmodelled instruction `{}`", m(x)),
            Cause::Inputs(x) => write!(f, "`{}` with an input whose cause is not tracked", m(x)),
            Cause::UnknownAddress(x) => write!(f, "store through an unknown address (`{}`)", m(x)),
            Cause::Syscall(n) => write!(f, "system call {n} ({})", crate::syscall::name(u64::from(*n))),
            Cause::SyscallIncomplete(n) => write!(
                f,
                "system call {n} ({}) logged incompletely",
                crate::syscall::name(u64::from(*n))
            ),
            other => f.write_str(other.kind()),
        }
    }
}

/// A cause and the position of the transition where it struck (the value is unknown from the
/// next position on, going forwards).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Why {
    /// What.
    pub cause: Cause,
    /// The position of the instruction (or system call, or event) that lost the value.
    pub position: u64,
}

/// The transition being applied: its own cause and position, the first unknown it read, and
/// whether it insisted on its own cause. One thread-local, const-initialised, read and written
/// at every step of a walk (three lazily initialised ones cost a few per cent of it).
#[derive(Clone, Copy)]
struct Transition {
    now: Why,
    seen: Option<Why>,
    strict: bool,
}

thread_local! {
    static NOW: Cell<Transition> = const {
        Cell::new(Transition {
            now: Why { cause: Cause::NotRecorded, position: 0 },
            seen: None,
            strict: false,
        })
    };
}

fn update(f: impl FnOnce(&mut Transition)) {
    NOW.with(|n| {
        let mut t = n.get();
        f(&mut t);
        n.set(t);
    });
}

/// Starts a transition at `position` whose own cause is `cause`.
pub fn begin(cause: Cause, position: u64) {
    NOW.with(|n| {
        n.set(Transition {
            now: Why { cause, position },
            seen: None,
            strict: false,
        })
    });
}

/// Overrides the current transition's cause, whatever it read: an unmodelled instruction, or
/// a store through an unknown address, is the cause of what it loses.
pub fn insist(cause: Cause) {
    update(|t| {
        t.now.cause = cause;
        t.strict = true;
    });
}

/// The cause the current transition insisted on, if it did.
pub fn insisted() -> Option<Cause> {
    let t = NOW.with(Cell::get);
    t.strict.then_some(t.now.cause)
}

/// Notes that an unknown value was read, and why it was unknown.
pub fn saw(why: Why) {
    update(|t| {
        if t.seen.is_none() {
            t.seen = Some(why);
        }
    });
}

/// The cause for a value made unknown now.
pub fn current() -> Why {
    let t = NOW.with(Cell::get);
    match (t.strict, t.seen) {
        (false, Some(seen)) => seen,
        _ => t.now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_input_passes_its_cause_on_unless_the_transition_insists() {
        begin(Cause::Inputs(Mnemonic::Add), 7);
        assert_eq!(current().cause, Cause::Inputs(Mnemonic::Add));
        saw(Why {
            cause: Cause::Syscall(0),
            position: 3,
        });
        saw(Why {
            cause: Cause::Untraced,
            position: 5,
        });
        assert_eq!(
            current(),
            Why {
                cause: Cause::Syscall(0),
                position: 3
            },
            "the first cause seen"
        );
        insist(Cause::Unmodelled(Mnemonic::Div));
        assert_eq!(
            current(),
            Why {
                cause: Cause::Unmodelled(Mnemonic::Div),
                position: 7
            }
        );
        begin(Cause::Untraced, 8);
        assert_eq!(
            current().cause,
            Cause::Untraced,
            "a new transition forgets what was seen"
        );
        assert_eq!(Cause::Syscall(16).to_string(), "system call 16 (ioctl)");
    }
}

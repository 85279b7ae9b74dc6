//! What the backends cannot follow yet, in the words they end a recording with (issue 43):
//! the recording stops before the call, and the program runs on unrecorded.

/// A `clone` or `clone3` that creates a thread (under the qemu and msr backends; the step
/// backend records threads).
pub const THREAD: &str = "the program creates a thread, which this backend does not record yet (`--backend step` does)";

/// An `execve` or `execveat` (under the msr backend, which does not follow it yet).
pub const EXECVE: &str =
    "the program calls execve, and this backend does not follow execve yet (`--backend qemu` and `--backend step` do)";

/// An `execve` made while other threads run (it ends them), under the step backend (the
/// qemu backend follows it).
pub const EXECVE_THREADS: &str = "the program calls execve while other threads run, which rtit does not follow yet";

use crate::sideband::nr;

/// What system call `number` with first argument `first` would start that the recording
/// cannot follow, if anything; `clone3_flags` reads the flags of `clone3`'s argument block
/// at `first` (`None`: unreadable, then the call is taken as creating a thread: a thread
/// missed would put two threads' code in one stream, silently).
pub fn at_syscall(number: u64, first: u64, clone3_flags: impl FnOnce(u64) -> Option<u64>) -> Option<&'static str> {
    match number {
        nr::EXECVE | nr::EXECVEAT => Some(EXECVE),
        nr::CLONE if first & nr::CLONE_THREAD != 0 => Some(THREAD),
        nr::CLONE3 if clone3_flags(first).map_or(true, |f| f & nr::CLONE_THREAD != 0) => Some(THREAD),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_and_execve_are_named_and_a_fork_is_not() {
        assert_eq!(at_syscall(nr::EXECVE, 0, |_| None), Some(EXECVE));
        assert_eq!(at_syscall(nr::EXECVEAT, 0, |_| None), Some(EXECVE));
        assert_eq!(at_syscall(nr::CLONE, nr::CLONE_THREAD | 0x100, |_| None), Some(THREAD));
        assert_eq!(at_syscall(nr::CLONE, 0x11, |_| None), None, "fork's clone(SIGCHLD)");
        assert_eq!(
            at_syscall(nr::CLONE3, 0x1000, |a| Some(if a == 0x1000 {
                nr::CLONE_THREAD
            } else {
                0
            })),
            Some(THREAD)
        );
        assert_eq!(at_syscall(nr::CLONE3, 0x1000, |_| Some(0)), None);
        assert_eq!(
            at_syscall(nr::CLONE3, 0x1000, |_| None),
            Some(THREAD),
            "unreadable flags"
        );
        assert_eq!(at_syscall(nr::EXIT_GROUP, 0, |_| None), None);
    }
}

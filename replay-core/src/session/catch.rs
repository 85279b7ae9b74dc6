//! gdb's `catch syscall` on a recording: `continue` and `reverse-continue` stop at the system
//! calls the recording logged, as rr does, besides breakpoints. A call is two stops: its entry
//! at the `syscall` instruction's position (the registers as the call found them: its number
//! in rax, its arguments), and its return at the next position (its result in rax). A live
//! Linux thread stops at both with rip already past the instruction; a position holds one
//! state, so the entry shows rip at the instruction itself. A call after which a signal
//! handler runs returns into the handler: the history has no position for its return, which
//! is left out (the handler's `rt_sigreturn` returns to where the call would have).

use std::collections::HashSet;

use super::{Session, Stop};

/// Which system calls stop a `continue` (gdb's `QCatchSyscalls`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Catch {
    /// None.
    #[default]
    Nothing,
    /// Every one.
    All,
    /// Those with these numbers.
    Numbers(HashSet<u64>),
}

impl Catch {
    fn wants(&self, nr: u64) -> bool {
        match self {
            Catch::Nothing => false,
            Catch::All => true,
            Catch::Numbers(set) => set.contains(&nr),
        }
    }
}

/// How long a `continue` waits for the values to tell which call ended the program.
const RAX_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// A stop at a system call: where, and which (see [`Stop::Syscall`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Event {
    position: u64,
    nr: u64,
    entry: bool,
}

impl Session {
    /// Forwards to the next position whose instruction is a breakpoint, or the next entry to
    /// or return from a system call `catch` wants, or to the end (see
    /// [`Self::continue_forward`]).
    pub fn continue_forward_catching(
        &mut self,
        breakpoints: &HashSet<u64>,
        catch: &Catch,
        mut interrupted: impl FnMut() -> bool,
    ) -> Stop {
        // No catch: nothing to wait for the history's system calls for.
        let event = match catch {
            Catch::Nothing => None,
            _ => self.next_event(catch),
        };
        let Some(event) = event else {
            return self.continue_forward(breakpoints, interrupted);
        };
        if let Err(stop) = self.await_history(&mut interrupted) {
            return stop;
        }
        let hit = self.search_forward(self.position + 1, event.position, breakpoints, interrupted);
        self.land(hit, |s| s.at_event(event))
    }

    /// Backwards to the previous position whose instruction is a breakpoint, or the previous
    /// entry to or return from a system call `catch` wants, or to position 0 (see
    /// [`Self::continue_backward`]).
    pub fn continue_backward_catching(
        &mut self,
        breakpoints: &HashSet<u64>,
        catch: &Catch,
        interrupted: impl FnMut() -> bool,
    ) -> Stop {
        let event = match catch {
            Catch::Nothing => None,
            _ => self.previous_event(catch),
        };
        let Some(event) = event else {
            return self.continue_backward(breakpoints, interrupted);
        };
        let from = self.position.min(self.retired());
        let hit = self.search_backward(from, event.position + 1, breakpoints, interrupted);
        self.land(hit, |s| s.at_event(event))
    }

    /// At a system call's `event`, no breakpoint before it.
    fn at_event(&mut self, event: Event) -> Stop {
        self.position = event.position;
        Stop::Syscall {
            nr: event.nr,
            entry: event.entry,
        }
    }

    /// The first stop at a system call after the current position.
    fn next_event(&mut self, catch: &Catch) -> Option<Event> {
        let d = self.decoded()?;
        let (last, c, exit) = (self.last(), self.position, d.final_syscall);
        let from = d.syscalls.partition_point(|&(p, _)| p < c);
        let handler = |p: u64| d.handler_entries.binary_search(&p).is_ok();
        let logged = d.syscalls[from..]
            .iter()
            .filter(|(_, nr)| catch.wants(*nr))
            .find_map(|&(p, nr)| {
                if p > c {
                    Some(Event {
                        position: p,
                        nr,
                        entry: true,
                    })
                } else {
                    // At its entry: its return is next, unless it never returned (the last)
                    // or returned into a signal handler (then the next call's).
                    (p < last && !handler(p + 1)).then_some(Event {
                        position: p + 1,
                        nr,
                        entry: false,
                    })
                }
            });
        match exit.filter(|&f| f > c && logged.map_or(true, |e| f < e.position)) {
            // The call that ended the program: its number is rax there.
            Some(f) => self
                .rax_at(f)
                .filter(|&nr| catch.wants(nr))
                .map(|nr| Event {
                    position: f,
                    nr,
                    entry: true,
                })
                .or(logged),
            None => logged,
        }
    }

    /// rax at `position`, if known, waiting a little for the values worked out in the
    /// background (a `continue` right after connecting to a long recording).
    fn rax_at(&mut self, position: u64) -> Option<u64> {
        let here = self.position;
        self.position = position;
        let mut rax = self.register("rax");
        if rax.is_none() {
            self.wait_values(RAX_PATIENCE);
            rax = self.register("rax");
        }
        self.position = here;
        rax
    }

    /// The last stop at a system call before the current position.
    fn previous_event(&self, catch: &Catch) -> Option<Event> {
        let d = self.decoded()?;
        let c = self.position;
        let handler = |p: u64| d.handler_entries.binary_search(&p).is_ok();
        let below = d.syscalls.partition_point(|&(p, _)| p < c);
        d.syscalls[..below]
            .iter()
            .rev()
            .find(|(_, nr)| catch.wants(*nr))
            .map(|&(p, nr)| match p + 1 < c && !handler(p + 1) {
                true => Event {
                    position: p + 1,
                    nr,
                    entry: false,
                },
                false => Event {
                    position: p,
                    nr,
                    entry: true,
                },
            })
    }
}

//! System calls the engine settles after the vCPU went on (issue 20). At a system call the
//! vCPU used to take every block waiting in the ring and run the engine on them itself
//! before the call could go on, while the feeder, which had been running the engine on the
//! other core with its caches warm, waited for the lock: on gzip about a third of the
//! vCPU's time. Now an ordinary call is noted in the ring as a mark, in its place among the
//! blocks, and the engine settles it when it gets there. What the vCPU must do at the call
//! itself (read the memory it wrote at its return, follow the memory map, set the handler
//! table `rtit record` reads) it still does; what needs the engine (the call's position,
//! whether the trace holds it) is filled in once the engine reached the mark, by the end of
//! the recording at the latest.
//!
//! Calls that change what the engine does next are not deferred: before tracing starts,
//! `execve`, a `clone` that creates a thread (the recording stops there), and `exit`.

use std::collections::VecDeque;

use rtit_replay_core::recording::{ChildProcess, MapChange};
use rtit_replay_core::syscall::SyscallRecord;

/// The ring entry that marks a deferred system call (no block has this id).
pub use rtit_recorder::qemu::engine::SYSCALL_MARK as MARK;

/// A system call the vCPU noted for the engine.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// Its number.
    pub number: u64,
    /// The signal handler an `rt_sigaction` installs, which the engine must know from this
    /// call on (an indirect branch to it is a signal delivery).
    pub handler: Option<u64>,
}

/// What the engine found at a deferred call.
#[derive(Debug, Clone, Copy)]
struct Placed {
    /// Its position and address, if the trace holds it.
    call: Option<(u64, u64)>,
    /// The position after it (where a change of the memory map takes effect).
    after: u64,
}

/// A log entry that waits for its call's place, by index in its list.
#[derive(Debug, Clone, Copy)]
pub enum Waiting {
    /// `syscalls[i]`.
    Record(usize),
    /// `children[i]`.
    Child(usize),
    /// `changes[i]`.
    Change(usize),
}

/// The deferred calls: those the engine has still to reach, in order, what it found at
/// those it reached, and the entries waiting for them.
#[derive(Debug, Default)]
pub struct Deferred {
    queue: VecDeque<Call>,
    placed: Vec<Placed>,
    /// Calls deferred so far: the next one's number in order.
    count: usize,
    waiting: Vec<(Waiting, usize)>,
}

impl Deferred {
    /// Notes a call the vCPU makes now (its mark goes into the ring next); returns its
    /// number in order.
    pub fn defer(&mut self, call: Call) -> usize {
        self.queue.push_back(call);
        self.count += 1;
        self.count - 1
    }

    /// The numbers of the calls the engine has still to reach, in order.
    pub fn queued(&self) -> impl Iterator<Item = u64> + '_ {
        self.queue.iter().map(|c| c.number)
    }

    /// The engine reached the next mark: the call it stands for.
    pub fn next(&mut self) -> Option<Call> {
        self.queue.pop_front()
    }

    /// What the engine found at the call it reached last ([`Self::next`]).
    pub fn placed(&mut self, call: Option<(u64, u64)>, after: u64) {
        self.placed.push(Placed { call, after });
    }

    /// `entry` waits for call `seq`.
    pub fn wait(&mut self, entry: Waiting, seq: usize) {
        self.waiting.push((entry, seq));
    }

    /// Fills in the positions of the waiting entries, once the engine reached every mark it
    /// will: a record or a child of a call the trace does not hold (or the engine never
    /// reached: the recording ended before it) goes, as it would have gone had the engine
    /// settled the call at once; a change of the map takes effect after its call.
    pub fn settle(
        &mut self,
        syscalls: &mut Vec<SyscallRecord>,
        children: &mut Vec<ChildProcess>,
        changes: &mut Vec<MapChange>,
    ) {
        let mut drop_record = vec![false; syscalls.len()];
        let mut drop_child = vec![false; children.len()];
        let mut drop_change = vec![false; changes.len()];
        for &(entry, seq) in &self.waiting {
            let placed = self.placed.get(seq);
            let call = placed.and_then(|p| p.call);
            match entry {
                Waiting::Record(i) => match call {
                    Some((position, ip)) => {
                        syscalls[i].position = position;
                        syscalls[i].ip = ip;
                    }
                    None => drop_record[i] = true,
                },
                Waiting::Child(i) => match call {
                    Some((position, _)) => children[i].position = position,
                    None => drop_child[i] = true,
                },
                Waiting::Change(i) => match placed {
                    Some(p) => changes[i].position = p.after,
                    None => drop_change[i] = true,
                },
            }
        }
        self.waiting.clear();
        retain_marked(syscalls, &drop_record);
        retain_marked(children, &drop_child);
        retain_marked(changes, &drop_change);
    }
}

/// Removes the elements of `v` whose flag in `gone` is set.
fn retain_marked<T>(v: &mut Vec<T>, gone: &[bool]) {
    let mut i = 0;
    v.retain(|_| {
        i += 1;
        !gone[i - 1]
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(nr: u64) -> SyscallRecord {
        SyscallRecord {
            position: 0,
            ip: 0,
            nr,
            before: Default::default(),
            after: Default::default(),
            writes: Vec::new(),
            complete: true,
            unlogged: Vec::new(),
        }
    }

    /// Entries get their call's place; those of a call the trace does not hold, or that the
    /// engine never reached, go; a map change takes the position after its call.
    #[test]
    fn waiting_entries_take_their_calls_place_or_go() {
        let mut d = Deferred::default();
        let (a, b, c) = (
            d.defer(Call {
                number: 0,
                handler: None,
            }),
            d.defer(Call {
                number: 1,
                handler: None,
            }),
            d.defer(Call {
                number: 57,
                handler: None,
            }),
        );
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(d.next().map(|c| c.number), Some(0));
        d.placed(Some((10, 0x401000)), 11);
        assert_eq!(d.next().map(|c| c.number), Some(1));
        d.placed(None, 20); // filtered out of the trace
        let mut syscalls = vec![record(0), record(1), record(57)];
        let mut children = vec![ChildProcess {
            position: 0,
            syscall: "fork".into(),
            pid: Some(7),
        }];
        let mut changes = vec![
            MapChange {
                position: 0,
                syscall: "mmap".into(),
                added: Vec::new(),
                removed: Vec::new(),
                mapped_start: None,
                mapped_end: None,
            };
            2
        ];
        d.wait(Waiting::Record(0), a);
        d.wait(Waiting::Record(1), b);
        d.wait(Waiting::Record(2), c); // never reached
        d.wait(Waiting::Child(0), c);
        d.wait(Waiting::Change(0), b);
        d.wait(Waiting::Change(1), c);
        d.settle(&mut syscalls, &mut children, &mut changes);
        assert_eq!(syscalls.len(), 1);
        assert_eq!(
            (syscalls[0].nr, syscalls[0].position, syscalls[0].ip),
            (0, 10, 0x401000)
        );
        assert!(children.is_empty());
        assert_eq!(changes.iter().map(|c| c.position).collect::<Vec<_>>(), [20]);
    }
}

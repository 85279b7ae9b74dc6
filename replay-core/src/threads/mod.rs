//! The threads of a recording and which one runs at each position (issue 43). The step
//! backend runs a program's threads one at a time in one stream and logs every switch in
//! `signals.jsonl` (a [`ThreadSwitch`] with the incoming thread's registers); from those and
//! the system call log this says which thread runs at a position, which threads exist there,
//! where a thread runs next or ran last, and a waiting thread's registers.
//!
//! A thread that is not running keeps the registers it had after its last instruction until
//! it runs again (the kernel changes none of them meanwhile but a system call's result, and a
//! thread that waits inside a call resumes before it, its registers still the ones it entered
//! with): they are the registers logged where it resumes.

use std::collections::BTreeMap;

use crate::recording::{SignalEntry, ThreadSwitch};
use crate::syscall::SyscallRecord;

/// `exit`: a thread ends (the process goes on while others remain).
const EXIT: u64 = 60;
/// `clone` and `clone3`: their result in the parent is the new thread's id.
const CLONE: u64 = 56;
const CLONE3: u64 = 435;

/// Which thread runs where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The thread that runs at position 0.
    first: i64,
    /// Every switch: its position (the incoming thread's first instruction there), the
    /// threads, and the incoming thread's registers there; by position.
    switches: Vec<(u64, ThreadSwitch, BTreeMap<String, String>)>,
    /// The registers of each thread that waits where the recording ends (an entry from and
    /// to the same thread, one past the last position).
    ends: Vec<(i64, BTreeMap<String, String>)>,
    /// Each thread: from which position it exists, and the position of its `exit` (it exists
    /// there, not after), in the order they appear.
    lives: Vec<(i64, u64, Option<u64>)>,
}

impl Schedule {
    /// The schedule of a recording with these handler entries and system calls; `None` if it
    /// has no switch (one thread ran).
    pub fn new(signals: &[SignalEntry], syscalls: &[SyscallRecord]) -> Option<Self> {
        let mut switches: Vec<_> = signals
            .iter()
            .filter_map(|e| e.switch.map(|s| (e.position, s, e.registers.clone())))
            .collect();
        let ends = (switches.iter())
            .filter(|s| s.1.from == s.1.to)
            .map(|s| (s.1.to, s.2.clone()))
            .collect();
        switches.retain(|s| s.1.from != s.1.to);
        switches.sort_by_key(|s| s.0);
        let first = switches.first()?.1.from;
        let mut schedule = Self {
            first,
            switches,
            ends,
            lives: vec![(first, 0, None)],
        };
        let hex = |v: &str| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok();
        let mut calls: Vec<&SyscallRecord> = syscalls.iter().collect();
        calls.sort_by_key(|r| r.position);
        for r in calls {
            match r.nr {
                CLONE | CLONE3 => {
                    let Some(tid) = r.after.get("rax").and_then(|v| hex(v)).map(|v| v as i64) else {
                        continue;
                    };
                    if tid > 0 && schedule.switches.iter().any(|s| s.1.to == tid) {
                        schedule.lives.push((tid, r.position + 1, None));
                    }
                }
                EXIT => {
                    let tid = schedule.running(r.position);
                    if let Some(life) = schedule.lives.iter_mut().find(|l| l.0 == tid && l.2.is_none()) {
                        life.2 = Some(r.position);
                    }
                }
                _ => {}
            }
        }
        // A thread seen running whose creation was not logged exists from its first run.
        let seen: Vec<(i64, u64)> = schedule.switches.iter().map(|s| (s.1.to, s.0)).collect();
        for (tid, at) in seen {
            if !schedule.lives.iter().any(|l| l.0 == tid) {
                schedule.lives.push((tid, at, None));
            }
        }
        Some(schedule)
    }

    /// The thread that runs at position `p` (whose instruction is there).
    pub fn running(&self, p: u64) -> i64 {
        let i = self.switches.partition_point(|s| s.0 <= p);
        match i {
            0 => self.first,
            _ => self.switches[i - 1].1.to,
        }
    }

    /// The threads that exist at position `p`, in the order they appeared.
    pub fn alive(&self, p: u64) -> Vec<i64> {
        (self.lives.iter())
            .filter(|(_, from, exit)| *from <= p && exit.map_or(true, |e| p <= e))
            .map(|l| l.0)
            .collect()
    }

    /// Every thread of the recording, in the order they appeared.
    pub fn threads(&self) -> Vec<i64> {
        self.lives.iter().map(|l| l.0).collect()
    }

    /// How many switches there are.
    pub fn switches(&self) -> usize {
        self.switches.len()
    }

    /// The first position after `p` where thread `tid` runs.
    pub fn next_run(&self, tid: i64, p: u64) -> Option<u64> {
        let after = p + 1;
        if self.running(after) == tid {
            return Some(after);
        }
        let from = self.switches.partition_point(|s| s.0 <= after);
        self.switches[from..].iter().find(|s| s.1.to == tid).map(|s| s.0)
    }

    /// The last position before `p` where thread `tid` ran.
    pub fn previous_run(&self, tid: i64, p: u64) -> Option<u64> {
        let before = p.checked_sub(1)?;
        if self.running(before) == tid {
            return Some(before);
        }
        let upto = self.switches.partition_point(|s| s.0 <= before);
        // Where it stopped running: the instruction before a switch away from it.
        self.switches[..upto]
            .iter()
            .rev()
            .find(|s| s.1.from == tid)
            .and_then(|s| s.0.checked_sub(1))
    }

    /// The registers of thread `tid` at position `p` where it does not run there: the ones
    /// logged where it runs next, or where the recording ends if it waits then; `None` if it
    /// runs at `p`, or never again and was not waiting at the end.
    pub fn waiting_registers(&self, tid: i64, p: u64) -> Option<&BTreeMap<String, String>> {
        if self.running(p) == tid {
            return None;
        }
        let from = self.switches.partition_point(|s| s.0 <= p);
        (self.switches[from..].iter())
            .find(|s| s.1.to == tid)
            .map(|s| &s.2)
            .or_else(|| self.ends.iter().find(|e| e.0 == tid).map(|e| &e.1))
    }
}

#[cfg(test)]
mod tests;

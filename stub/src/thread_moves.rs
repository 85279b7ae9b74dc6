//! `stepi` and `reverse-stepi` of one thread in a recording of several (issue 43): gdb steps
//! the thread it has selected (scheduler locking in replay, its default), and the other
//! threads' instructions in between run as they were recorded. Where the thread's next (or
//! previous) instruction is the next (previous) position, the ordinary step applies.

use rtit_replay_core::threads::Schedule;

/// Where `stepi` of thread `tid` from position `p` goes when it is not the ordinary step:
/// after its next instruction, that is where it runs next after that one (`Some(None)`: it
/// has no further instruction in the history); `None` when the ordinary step applies (it
/// runs at `p` and at `p + 1`).
pub fn step_target(schedule: &Schedule, tid: i64, p: u64) -> Option<Option<u64>> {
    if schedule.running(p) == tid {
        if schedule.running(p + 1) == tid {
            return None;
        }
        return Some(schedule.next_run(tid, p));
    }
    Some(schedule.next_run(tid, p).and_then(|next| schedule.next_run(tid, next)))
}

/// Where `reverse-stepi` of thread `tid` from position `p` goes when it is not the ordinary
/// step back: to its previous instruction (`Some(None)`: it has none); `None` when the
/// ordinary step applies (it runs at `p` and at `p - 1`).
pub fn reverse_target(schedule: &Schedule, tid: i64, p: u64) -> Option<Option<u64>> {
    if p > 0 && schedule.running(p) == tid && schedule.running(p - 1) == tid {
        return None;
    }
    Some(schedule.previous_run(tid, p))
}

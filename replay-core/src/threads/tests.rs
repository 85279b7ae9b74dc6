use super::*;
use crate::syscall::MemoryWrite;

/// A switch at `position` from thread `from` to `to`, whose `rdi` is `rdi` there.
fn switch(position: u64, from: i64, to: i64, rdi: u64) -> SignalEntry {
    SignalEntry {
        position,
        ip: 0x1000,
        registers: [("rdi".to_string(), format!("{rdi:#x}"))].into(),
        frame: MemoryWrite::new(0x8000, &[]),
        only_kernel: true,
        switch: Some(ThreadSwitch { from, to }),
    }
}

fn call(position: u64, nr: u64, rax: u64) -> SyscallRecord {
    SyscallRecord {
        position,
        ip: 0x2000,
        nr,
        before: Default::default(),
        after: [("rax".to_string(), format!("{rax:#x}"))].into(),
        writes: Vec::new(),
        complete: true,
        unlogged: Vec::new(),
    }
}

/// Thread 10 creates 11 at 5 (its clone), runs to 9; 11 runs 10..19 and ends with `exit` at
/// 19; 10 runs from 20.
fn two() -> Schedule {
    let signals = [switch(10, 10, 11, 0xb), switch(20, 11, 10, 0xa)];
    let calls = [call(5, CLONE3, 11), call(19, EXIT, 0)];
    Schedule::new(&signals, &calls).expect("switches")
}

#[test]
fn one_thread_has_no_schedule() {
    let not_a_switch = SignalEntry {
        switch: None,
        ..switch(3, 1, 1, 0)
    };
    assert_eq!(Schedule::new(&[not_a_switch], &[]), None);
}

#[test]
fn the_running_thread_changes_at_each_switch() {
    let s = two();
    assert_eq!([0, 9, 10, 19, 20, 30].map(|p| s.running(p)), [10, 10, 11, 11, 10, 10]);
    assert_eq!(s.switches(), 2);
    assert_eq!(s.threads(), [10, 11]);
}

#[test]
fn a_thread_exists_from_its_clone_to_its_exit() {
    let s = two();
    assert_eq!(s.alive(5), [10]);
    assert_eq!(s.alive(6), [10, 11]);
    assert_eq!(s.alive(19), [10, 11]);
    assert_eq!(s.alive(20), [10]);
}

#[test]
fn next_and_previous_runs_skip_the_other_threads() {
    let s = two();
    assert_eq!(s.next_run(10, 3), Some(4));
    assert_eq!(
        s.next_run(10, 9),
        Some(20),
        "after its last instruction before the switch"
    );
    assert_eq!(s.next_run(11, 3), Some(10), "a waiting thread's next instruction");
    assert_eq!(s.next_run(11, 19), None, "it ended");
    assert_eq!(s.previous_run(10, 20), Some(9));
    assert_eq!(s.previous_run(10, 25), Some(24));
    assert_eq!(s.previous_run(11, 25), Some(19));
    assert_eq!(s.previous_run(11, 10), None);
    assert_eq!(s.previous_run(10, 0), None);
}

#[test]
fn a_waiting_threads_registers_are_those_where_it_resumes() {
    let s = two();
    let rdi = |tid, p| s.waiting_registers(tid, p).and_then(|r| r.get("rdi").cloned());
    assert_eq!(rdi(11, 7).as_deref(), Some("0xb"));
    assert_eq!(rdi(10, 12).as_deref(), Some("0xa"));
    assert_eq!(rdi(10, 5), None, "it runs there: the values say");
    assert_eq!(rdi(11, 25), None, "it never runs again");
}

/// Where the recording ends, a thread that waits then has its registers in an entry from
/// and to itself, which is no switch.
#[test]
fn a_thread_that_waits_at_the_end_has_its_registers_there() {
    let signals = [switch(10, 10, 11, 0xb), switch(30, 10, 10, 0xc)];
    let s = Schedule::new(&signals, &[call(5, CLONE3, 11)]).expect("a switch");
    assert_eq!(s.switches(), 1);
    assert_eq!(s.running(29), 11, "the end entry does not switch");
    let rdi = s.waiting_registers(10, 20).and_then(|r| r.get("rdi").cloned());
    assert_eq!(rdi.as_deref(), Some("0xc"));
    assert_eq!(s.alive(29), [10, 11]);
}

//! The table and the records: bounds from arguments and results, names, indirect writes.

use super::*;

#[test]
fn outputs_are_bounded_by_arguments_and_results() {
    let args = [Some(3), Some(0x1000), Some(64), None, None, None];
    assert_eq!(effect(0, &args, Some(10)), Effect::Writes(vec![(0x1000, 10)]));
    assert_eq!(effect(0, &args, None), Effect::Writes(vec![(0x1000, 64)]));
    assert_eq!(effect(0, &args, Some(-14i64 as u64)), Effect::Writes(vec![(0x1000, 0)]));
    assert_eq!(effect(1, &args, Some(64)), Effect::Writes(vec![]));
    assert_eq!(
        effect(5, &[Some(1), None, None, None, None, None], Some(0)),
        Effect::Anywhere
    );
    assert_eq!(effect(999, &args, None), Effect::Anywhere);
    assert_eq!(effect(15, &args, None), Effect::Restores);
    let set_fs = [Some(0x1002), Some(0x4ac380), None, None, None, None];
    assert_eq!(
        effect(158, &set_fs, Some(0)),
        Effect::SetsBase {
            fs: true,
            value: Some(0x4ac380)
        }
    );
    let w = MemoryWrite::new(0x10, &[0xde, 0xad]);
    assert_eq!(w.data(), Some(vec![0xde, 0xad]));
}

#[test]
fn memory_writes_are_two_lower_case_digits_a_byte_and_back() {
    let all: Vec<u8> = (0..=255).collect();
    let w = MemoryWrite::new(0, &all);
    let expected: String = all.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(w.bytes, expected);
    assert_eq!(w.data(), Some(all));
    for bad in ["0", "0g", "zz", "+f"] {
        let w = MemoryWrite {
            address: 0,
            bytes: bad.to_string(),
        };
        assert_eq!(w.data(), None, "{bad}");
    }
}

#[test]
fn a_call_that_does_not_exist_wrote_nothing() {
    let args = [Some(0x1000), Some(88), None, None, None, None];
    assert_eq!(effect(435, &args, None), Effect::Anywhere, "clone3 before its result");
    assert_eq!(
        effect(435, &args, Some(38u64.wrapping_neg())),
        Effect::Writes(vec![]),
        "ENOSYS"
    );
    assert_eq!(
        effect(
            0,
            &[Some(3), Some(0x1000), Some(8), None, None, None],
            Some(38u64.wrapping_neg())
        ),
        Effect::Writes(vec![])
    );
}

#[test]
fn futex_writes_by_operation() {
    let futex = |op: u64| {
        effect(
            202,
            &[Some(0x1000), Some(op), Some(1), None, Some(0x2000), None],
            Some(0),
        )
    };
    assert_eq!(futex(0x80), Effect::Writes(vec![]), "FUTEX_WAIT_PRIVATE");
    assert_eq!(futex(0x81), Effect::Writes(vec![]), "FUTEX_WAKE_PRIVATE");
    assert_eq!(futex(5), Effect::Writes(vec![(0x2000, 4)]), "FUTEX_WAKE_OP");
    assert_eq!(futex(6), Effect::Writes(vec![(0x1000, 4)]), "FUTEX_LOCK_PI");
    assert_eq!(futex(11), Effect::Writes(vec![(0x1000, 4), (0x2000, 4)]));
    assert_eq!(futex(0x7f), Effect::Anywhere, "an operation not listed");
    assert_eq!(effect(202, &[None; 6], None), Effect::Anywhere);
}

#[test]
fn the_numbers_the_table_lists_are_the_calls_it_means() {
    for (n, want) in [
        (78, "getdents"),
        (217, "getdents64"),
        (79, "getcwd"),
        (98, "getrusage"),
        (100, "times"),
        (115, "getgroups"),
        (118, "getresuid"),
        (120, "getresgid"),
        (127, "rt_sigpending"),
        (230, "clock_nanosleep"),
        (38, "setitimer"),
        (36, "getitimer"),
        (232, "epoll_wait"),
        (281, "epoll_pwait"),
        (87, "unlink"),
        (95, "umask"),
        (263, "unlinkat"),
        (436, "close_range"),
        (439, "faccessat2"),
    ] {
        assert_eq!(name(n), want, "{n}");
    }
}

#[test]
fn directory_entries_and_ids_are_bounded() {
    let args = [Some(3), Some(0x1000), Some(32768), None, None, None];
    assert_eq!(effect(217, &args, Some(480)), Effect::Writes(vec![(0x1000, 480)]));
    let ids = [Some(0x10), Some(0x20), Some(0x30), None, None, None];
    assert_eq!(
        effect(118, &ids, Some(0)),
        Effect::Writes(vec![(0x10, 4), (0x20, 4), (0x30, 4)])
    );
    assert_eq!(
        effect(115, &[Some(0), None, None, None, None, None], Some(3)),
        Effect::Writes(vec![])
    );
    assert_eq!(
        effect(115, &[Some(8), Some(0x40), None, None, None, None], Some(3)),
        Effect::Writes(vec![(0x40, 12)])
    );
    assert_eq!(effect(87, &args, Some(0)), Effect::Writes(vec![]));
}

/// Memory of little-endian words, for the indirect effects.
fn words(at: &[(u64, u64)]) -> impl Fn(u64, u32) -> Option<u64> + '_ {
    move |a, width| {
        at.iter()
            .find(|&&(x, _)| x == a)
            .map(|&(_, v)| if width == 4 { v & 0xffff_ffff } else { v })
    }
}

#[test]
fn scattered_and_message_writes_come_from_the_iovecs_and_the_msghdr() {
    for (n, want) in [
        (19, "readv"),
        (295, "preadv"),
        (327, "preadv2"),
        (310, "process_vm_readv"),
        (47, "recvmsg"),
        (45, "recvfrom"),
        (43, "accept"),
        (288, "accept4"),
        (51, "getsockname"),
        (52, "getpeername"),
        (55, "getsockopt"),
    ] {
        assert_eq!(name(n), want, "{n}");
    }
    // readv(fd, iov = 0x100, 3) read 10 bytes: 4 into the first buffer, 6 of the second's 8.
    let iov = [
        (0x100, 0x1000),
        (0x108, 4),
        (0x110, 0x2000),
        (0x118, 8),
        (0x120, 0x3000),
        (0x128, 8),
    ];
    let e = effect(19, &[Some(3), Some(0x100), Some(3), None, None, None], Some(10));
    assert_eq!(e.ranges(&words(&iov)), Some(vec![(0x1000, 4), (0x2000, 6)]));
    // Unknown result: every buffer whole; an iovec not known: unbounded.
    let e = effect(19, &[Some(3), Some(0x100), Some(3), None, None, None], None);
    assert_eq!(
        e.ranges(&words(&iov)),
        Some(vec![(0x1000, 4), (0x2000, 8), (0x3000, 8)])
    );
    assert_eq!(e.ranges(&words(&iov[..3])), None);
    assert_eq!(
        effect(19, &[Some(3), None, Some(3), None, None, None], None),
        Effect::Anywhere
    );
    // recvmsg: msghdr at 0x200 with a name, one iovec, control data.
    let msg = [
        (0x200, 0x4000),
        (0x208, 16),
        (0x210, 0x100),
        (0x218, 1),
        (0x220, 0x5000),
        (0x228, 24),
        (0x100, 0x1000),
        (0x108, 64),
    ];
    let e = effect(47, &[Some(3), Some(0x200), Some(0), None, None, None], Some(5));
    assert_eq!(
        e.ranges(&words(&msg)),
        Some(vec![
            (0x208, 4),
            (0x228, 8),
            (0x230, 4),
            (0x4000, 16),
            (0x5000, 24),
            (0x1000, 5)
        ])
    );
    // recvfrom: the data, the sender's address and its length.
    let e = effect(
        45,
        &[Some(3), Some(0x1000), Some(64), Some(0), Some(0x4000), Some(0x300)],
        Some(7),
    );
    assert_eq!(
        e.ranges(&words(&[(0x300, 16)])),
        Some(vec![(0x1000, 7), (0x300, 4), (0x4000, 16)])
    );
    let e = effect(
        45,
        &[Some(3), Some(0x1000), Some(64), Some(0), Some(0), Some(0)],
        Some(7),
    );
    assert_eq!(e.ranges(&words(&[])), Some(vec![(0x1000, 7)]), "no address asked for");
}

#[test]
fn a_log_holds_the_bytes_after_the_call_and_says_when_it_cannot() {
    let memory: Vec<u8> = (0..=255).collect();
    let read = |a: u64, b: &mut [u8]| {
        let from = (a as usize).min(memory.len());
        let n = b.len().min(memory.len() - from);
        b[..n].copy_from_slice(&memory[from..from + n]);
        n
    };
    let logged = logged_writes(&Effect::Writes(vec![(0x10, 2), (0x20, 0)]), &read);
    assert_eq!(
        logged,
        Logged {
            writes: vec![MemoryWrite::new(0x10, &[0x10, 0x11])],
            unlogged: vec![],
            complete: true
        }
    );
    // A byte that cannot be read after the call: the range is still known.
    let logged = logged_writes(&Effect::Writes(vec![(0xff, 2)]), &read);
    assert_eq!(logged.writes, vec![MemoryWrite::new(0xff, &[0xff])]);
    assert_eq!(logged.unlogged, vec![Unlogged { address: 0x100, len: 1 }]);
    assert!(!logged.complete, "a byte could not be read");
    assert_eq!(
        logged_writes(&Effect::Anywhere, &read),
        Logged::default(),
        "nowhere known"
    );
    // Over the bound: the bytes up to it, then ranges alone.
    let big = |a: u64, b: &mut [u8]| {
        b.iter_mut().enumerate().for_each(|(i, x)| *x = (a as usize + i) as u8);
        b.len()
    };
    let logged = logged_writes(
        &Effect::Writes(vec![(0, LOG_BOUND - 2), (0x1_0000_0000, 5), (0x2_0000_0000, 3)]),
        &big,
    );
    let lens: Vec<usize> = logged.writes.iter().map(|w| w.bytes.len() / 2).collect();
    assert_eq!(lens, [LOG_BOUND as usize - 2, 2], "the bound in all");
    assert_eq!(
        logged.unlogged,
        vec![
            Unlogged {
                address: 0x1_0000_0002,
                len: 3
            },
            Unlogged {
                address: 0x2_0000_0000,
                len: 3
            }
        ]
    );
    assert!(!logged.complete, "too large to log");
    // readv with its iovec (at 0x40: base 0x80, length 3) in the memory read.
    let mut with_iov = memory.clone();
    with_iov[0x40..0x48].copy_from_slice(&0x80u64.to_le_bytes());
    with_iov[0x48..0x50].copy_from_slice(&3u64.to_le_bytes());
    let read = |a: u64, b: &mut [u8]| {
        let from = (a as usize).min(with_iov.len());
        let n = b.len().min(with_iov.len() - from);
        b[..n].copy_from_slice(&with_iov[from..from + n]);
        n
    };
    let e = effect(19, &[Some(3), Some(0x40), Some(1), None, None, None], Some(3));
    let logged = logged_writes(&e, &read);
    assert_eq!(
        (logged.writes, logged.complete),
        (vec![MemoryWrite::new(0x80, &[0x80, 0x81, 0x82])], true)
    );
}

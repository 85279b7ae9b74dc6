//! The table: which user memory each call may write, given its arguments and result.

use super::{nr, Args, Effect, Indirect};

/// `arch_prctl` codes.
const ARCH_SET_GS: u64 = 0x1001;
const ARCH_SET_FS: u64 = 0x1002;
const ARCH_GET_FS: u64 = 0x1003;
const ARCH_GET_GS: u64 = 0x1004;

/// ENOSYS: the call does not exist.
const ENOSYS: u64 = 38;

/// What call `nr` with `args` may write; `ret` is its result if known (it bounds reads).
pub fn effect(nr: u64, args: &Args, ret: Option<u64>) -> Effect {
    use Effect::{Anywhere, Writes};
    let a = |i: usize| args[i];
    // A buffer of `len` at `addr`, both needed.
    let buf = |addr: Option<u64>, len: Option<u64>| match (addr, len) {
        (Some(addr), Some(len)) => Writes(vec![(addr, len)]),
        _ => Anywhere,
    };
    // A result of at most `len` bytes: the result bounds it when it is a count.
    let counted = |addr: Option<u64>, len: Option<u64>| {
        let n = match ret {
            Some(r) if (r as i64) >= 0 => Some(r),
            Some(_) => Some(0),
            None => len,
        };
        buf(addr, n)
    };
    // An optional out-pointer of a fixed size.
    let optional = |addr: Option<u64>, len: u64| match addr {
        Some(0) => Writes(vec![]),
        addr => buf(addr, Some(len)),
    };
    // The result, where it is a count of bytes.
    let count = ret.filter(|&r| (r as i64) >= 0);
    let indirect = |parts: Option<Vec<Indirect>>| parts.map_or(Anywhere, Effect::Indirect);
    if ret == Some(ENOSYS.wrapping_neg()) {
        // No such call (QEMU 10 has no clone3, and glibc falls back to clone): nothing ran.
        return Writes(vec![]);
    }
    match nr {
        0 | 17 => counted(a(1), a(2)), // read, pread64
        // readv, preadv, preadv2, process_vm_readv (the local iovecs).
        19 | 295 | 327 | 310 => indirect((|| {
            Some(vec![Indirect::Iovecs {
                iov: a(1)?,
                count: a(2)?,
                total: count,
            }])
        })()),
        47 => indirect((|| {
            Some(vec![Indirect::Message {
                msg: a(1)?,
                total: count,
            }])
        })()), // recvmsg
        // recvfrom: the data, and the sender's address if asked.
        45 => indirect((|| {
            let data = Indirect::Buffer {
                addr: a(1)?,
                len: count.unwrap_or(a(2)?),
            };
            let from = Indirect::Sized {
                addr: a(4)?,
                len: a(5)?,
                max: super::indirect::MAX_ADDR,
            };
            Some(vec![data, from])
        })()),
        // accept, accept4, getsockname, getpeername: an address and its length.
        43 | 288 | 51 | 52 => indirect((|| {
            Some(vec![Indirect::Sized {
                addr: a(1)?,
                len: a(2)?,
                max: super::indirect::MAX_ADDR,
            }])
        })()),
        // getsockopt: the option and its length.
        55 => indirect((|| {
            Some(vec![Indirect::Sized {
                addr: a(3)?,
                len: a(4)?,
                max: 4096,
            }])
        })()),
        89 => counted(a(1), a(2)),     // readlink
        267 => counted(a(2), a(3)),    // readlinkat
        318 => counted(a(0), a(1)),    // getrandom
        204 => counted(a(2), a(1)),    // sched_getaffinity
        4..=6 => buf(a(1), Some(144)), // stat, fstat, lstat
        262 => buf(a(2), Some(144)),   // newfstatat
        332 => buf(a(4), Some(256)),   // statx
        7 => buf(a(0), a(1).map(|n| n.saturating_mul(8))),
        13 => optional(a(2), 32),                // rt_sigaction: the old action
        14 => optional(a(2), a(3).unwrap_or(8)), // rt_sigprocmask: the old mask
        16 => match a(1) {
            Some(0x5401) => buf(a(2), Some(36)), // TCGETS
            Some(0x5413) => buf(a(2), Some(8)),  // TIOCGWINSZ
            _ => Anywhere,
        },
        22 | 293 => buf(a(0), Some(8)), // pipe, pipe2
        35 => optional(a(1), 16),       // nanosleep: the remainder
        63 => buf(a(0), Some(390)),     // uname
        96 => match (optional(a(0), 16), optional(a(1), 8)) {
            (Writes(mut x), Writes(y)) => {
                x.extend(y);
                Writes(x)
            }
            _ => Anywhere,
        },
        97 => buf(a(1), Some(16)),       // getrlimit
        302 => optional(a(3), 16),       // prlimit64: the old limit
        99 => buf(a(0), Some(112)),      // sysinfo
        201 => optional(a(0), 8),        // time
        228 | 229 => optional(a(1), 16), // clock_gettime, clock_getres
        61 => match (optional(a(1), 4), optional(a(3), 144)) {
            (Writes(mut x), Writes(y)) => {
                x.extend(y);
                Writes(x)
            }
            _ => Anywhere,
        },
        72 => match a(1) {
            Some(5) => buf(a(2), Some(32)), // F_GETLK
            Some(_) => Writes(vec![]),
            None => Anywhere,
        },
        56 => match a(0) {
            // clone: CLONE_PARENT_SETTID writes the child's id for the parent.
            Some(flags) if flags & 0x0010_0000 != 0 => buf(a(2), Some(4)),
            Some(_) => Writes(vec![]),
            None => Anywhere,
        },
        334 => buf(a(0), a(1)),            // rseq: the kernel writes the area from now on
        131 => optional(a(1), 24),         // sigaltstack: the old stack
        137 | 138 => buf(a(1), Some(120)), // statfs, fstatfs
        202 => match a(1).map(|op| op & 0x7f) {
            // futex: waits, wakes and requeues write no user memory; WAKE_OP writes the
            // second word, the PI operations the first (the owner's id), and
            // WAIT_REQUEUE_PI / CMP_REQUEUE_PI both.
            Some(0..=4 | 9 | 10) => Writes(vec![]),
            Some(5) => buf(a(4), Some(4)),
            Some(6..=8 | 13) => buf(a(0), Some(4)),
            Some(11 | 12) => match (buf(a(0), Some(4)), buf(a(4), Some(4))) {
                (Writes(mut x), Writes(y)) => {
                    x.extend(y);
                    Writes(x)
                }
                _ => Anywhere,
            },
            _ => Anywhere,
        },
        nr::ARCH_PRCTL => match a(0) {
            Some(ARCH_SET_FS) => Effect::SetsBase { fs: true, value: a(1) },
            Some(ARCH_SET_GS) => Effect::SetsBase { fs: false, value: a(1) },
            Some(ARCH_GET_FS | ARCH_GET_GS) => buf(a(1), Some(8)),
            _ => Anywhere,
        },
        nr::RT_SIGRETURN => Effect::Restores,
        78 | 217 => counted(a(1), a(2)), // getdents, getdents64: the entries read
        79 => counted(a(0), a(1)),       // getcwd: the path and its NUL
        98 => buf(a(1), Some(144)),      // getrusage
        100 => optional(a(0), 32),       // times
        115 => match a(0) {
            Some(0) => Writes(vec![]), // getgroups(0, _): the count alone
            _ => buf(a(1), ret.filter(|&r| (r as i64) >= 0).map(|r| r * 4)),
        },
        // getresuid, getresgid: three 4-byte ids.
        118 | 120 => match (a(0), a(1), a(2)) {
            (Some(x), Some(y), Some(z)) => Writes(vec![(x, 4), (y, 4), (z, 4)]),
            _ => Anywhere,
        },
        127 => buf(a(0), a(1)),    // rt_sigpending
        230 => optional(a(3), 16), // clock_nanosleep: the remainder
        38 => optional(a(2), 32),  // setitimer: the old timer
        36 => buf(a(1), Some(32)), // getitimer
        // epoll_wait, epoll_pwait: the events, 12 bytes each.
        232 | 281 => buf(a(1), ret.filter(|&r| (r as i64) >= 0).map(|r| r * 12)),
        // Calls that write no user memory (map changes are in maps.json).
        37
        | 41
        | 42
        | 44
        | 46
        | 48..=50
        | 74..=77
        | 80..=84
        | 86..=88
        | 90..=95
        | 105
        | 106
        | 109
        | 111
        | 112
        | 121
        | 124
        | 160
        | 203
        | 213
        | 233
        | 258
        | 263
        | 268
        | 269
        | 291
        | 316
        | 324
        | 436
        | 439
        | 1..=3
        | 8..=12
        | 18
        | 20
        | 21
        | 24
        | 25
        | 28
        | 32..=34
        | 39
        | 57
        | 58
        | 60
        | 62
        | 102
        | 104
        | 107
        | 108
        | 110
        | 186
        | 200
        | 218
        | 221
        | 231
        | 234
        | 257
        | 273 => Writes(vec![]),
        _ => Anywhere,
    }
}

//! What a Linux x86-64 system call does to the user state, as far as the state layer and the
//! recorders need it: which user memory it may write, given its arguments, and the log record
//! a recorder writes for each call it saw (rr logs the same: results and the memory the
//! kernel wrote).
//!
//! The table errs on one side only: a call it does not know, or whose output bound depends on
//! an unknown argument, may write [`Effect::Anywhere`]. Map changes (mmap, munmap, brk,
//! mremap) are not listed: `maps.json` records them with their positions.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hex;

/// System call numbers the table and the engine name.
pub mod nr {
    /// read
    pub const READ: u64 = 0;
    /// rt_sigreturn: restores every register from the signal frame.
    pub const RT_SIGRETURN: u64 = 15;
    /// execve: a new program.
    pub const EXECVE: u64 = 59;
    /// execveat: a new program.
    pub const EXECVEAT: u64 = 322;
    /// arch_prctl: may set the FS or GS base.
    pub const ARCH_PRCTL: u64 = 158;
    /// exit
    pub const EXIT: u64 = 60;
    /// rseq: registers an area the kernel keeps rewriting.
    pub const RSEQ: u64 = 334;
    /// exit_group
    pub const EXIT_GROUP: u64 = 231;
    /// restart_syscall: what an interrupted sleep returns to (-ERESTART_RESTARTBLOCK).
    pub const RESTART_SYSCALL: u64 = 219;
}

/// Linux x86-64 system call names by number (`asm/unistd_64.h`), `?` where none, for messages.
const NAMES: &str = "\
    read write open close stat fstat lstat poll lseek mmap mprotect munmap brk rt_sigaction \
     rt_sigprocmask rt_sigreturn ioctl pread64 pwrite64 readv writev access pipe select sched_yield \
     mremap msync mincore madvise shmget shmat shmctl dup dup2 pause nanosleep getitimer alarm \
     setitimer getpid sendfile socket connect accept sendto recvfrom sendmsg recvmsg shutdown bind \
     listen getsockname getpeername socketpair setsockopt getsockopt clone fork vfork execve exit \
     wait4 kill uname semget semop semctl shmdt msgget msgsnd msgrcv msgctl fcntl flock fsync \
     fdatasync truncate ftruncate getdents getcwd chdir fchdir rename mkdir rmdir creat link unlink \
     symlink readlink chmod fchmod chown fchown lchown umask gettimeofday getrlimit getrusage \
     sysinfo times ptrace getuid syslog getgid setuid setgid geteuid getegid setpgid getppid \
     getpgrp setsid setreuid setregid getgroups setgroups setresuid getresuid setresgid getresgid \
     getpgid setfsuid setfsgid getsid capget capset rt_sigpending rt_sigtimedwait rt_sigqueueinfo \
     rt_sigsuspend sigaltstack utime mknod uselib personality ustat statfs fstatfs sysfs \
     getpriority setpriority sched_setparam sched_getparam sched_setscheduler sched_getscheduler \
     sched_get_priority_max sched_get_priority_min sched_rr_get_interval mlock munlock mlockall \
     munlockall vhangup modify_ldt pivot_root _sysctl prctl arch_prctl adjtimex setrlimit chroot \
     sync acct settimeofday mount umount2 swapon swapoff reboot sethostname setdomainname iopl \
     ioperm create_module init_module delete_module get_kernel_syms query_module quotactl \
     nfsservctl getpmsg putpmsg afs_syscall tuxcall security gettid readahead setxattr lsetxattr \
     fsetxattr getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr removexattr \
     lremovexattr fremovexattr tkill time futex sched_setaffinity sched_getaffinity set_thread_area \
     io_setup io_destroy io_getevents io_submit io_cancel get_thread_area lookup_dcookie \
     epoll_create epoll_ctl_old epoll_wait_old remap_file_pages getdents64 set_tid_address \
     restart_syscall semtimedop fadvise64 timer_create timer_settime timer_gettime timer_getoverrun \
     timer_delete clock_settime clock_gettime clock_getres clock_nanosleep exit_group epoll_wait \
     epoll_ctl tgkill utimes vserver mbind set_mempolicy get_mempolicy mq_open mq_unlink \
     mq_timedsend mq_timedreceive mq_notify mq_getsetattr kexec_load waitid add_key request_key \
     keyctl ioprio_set ioprio_get inotify_init inotify_add_watch inotify_rm_watch migrate_pages \
     openat mkdirat mknodat fchownat futimesat newfstatat unlinkat renameat linkat symlinkat \
     readlinkat fchmodat faccessat pselect6 ppoll unshare set_robust_list get_robust_list splice \
     tee sync_file_range vmsplice move_pages utimensat epoll_pwait signalfd timerfd_create eventfd \
     fallocate timerfd_settime timerfd_gettime accept4 signalfd4 eventfd2 epoll_create1 dup3 pipe2 \
     inotify_init1 preadv pwritev rt_tgsigqueueinfo perf_event_open recvmmsg fanotify_init \
     fanotify_mark prlimit64 name_to_handle_at open_by_handle_at clock_adjtime syncfs sendmmsg \
     setns getcpu process_vm_readv process_vm_writev kcmp finit_module sched_setattr sched_getattr \
     renameat2 seccomp getrandom memfd_create kexec_file_load bpf execveat userfaultfd membarrier \
     mlock2 copy_file_range preadv2 pwritev2 pkey_mprotect pkey_alloc pkey_free statx io_pgetevents \
     rseq ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? \
     ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? \
     pidfd_send_signal io_uring_setup io_uring_enter io_uring_register open_tree move_mount fsopen \
     fsconfig fsmount fspick pidfd_open clone3 close_range openat2 pidfd_getfd faccessat2 \
     process_madvise epoll_pwait2 mount_setattr quotactl_fd landlock_create_ruleset \
     landlock_add_rule landlock_restrict_self memfd_secret process_mrelease futex_waitv \
     set_mempolicy_home_node";

/// The name of system call `nr`, or `?` if it has none.
pub fn name(nr: u64) -> &'static str {
    usize::try_from(nr)
        .ok()
        .and_then(|n| NAMES.split_ascii_whitespace().nth(n))
        .unwrap_or("?")
}

/// `arch_prctl` codes.
const ARCH_SET_GS: u64 = 0x1001;
const ARCH_SET_FS: u64 = 0x1002;
const ARCH_GET_FS: u64 = 0x1003;
const ARCH_GET_GS: u64 = 0x1004;

/// What a call does to user memory and registers besides `rax`, `rcx` and `r11`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Writes at most these (address, length) ranges.
    Writes(Vec<(u64, u64)>),
    /// May write user memory nobody can bound.
    Anywhere,
    /// Replaces every register (rt_sigreturn); writes no memory.
    Restores,
    /// Sets the FS base (`Some(fs)`) or the GS base (`None`) to a value, if known.
    SetsBase {
        /// FS (true) or GS.
        fs: bool,
        /// The new base.
        value: Option<u64>,
    },
}

/// The arguments in `rdi, rsi, rdx, r10, r8, r9` order, each if known.
pub type Args = [Option<u64>; 6];

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
    match nr {
        0 | 17 => counted(a(1), a(2)), // read, pread64
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

/// One run of bytes the kernel wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryWrite {
    /// Where.
    #[serde(with = "hex")]
    pub address: u64,
    /// The bytes, as hex digits.
    pub bytes: String,
}

impl MemoryWrite {
    /// A write of `bytes` at `address`.
    pub fn new(address: u64, bytes: &[u8]) -> Self {
        Self {
            address,
            bytes: bytes.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }

    /// The bytes, if the hex digits are well formed.
    pub fn data(&self) -> Option<Vec<u8>> {
        let s = self.bytes.as_bytes();
        if s.len() % 2 != 0 {
            return None;
        }
        s.chunks(2)
            .map(|c| u8::from_str_radix(std::str::from_utf8(c).ok()?, 16).ok())
            .collect()
    }
}

/// A system call as a recorder saw it (`syscalls.jsonl`, one per line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallRecord {
    /// The position of the `syscall` instruction in the history.
    pub position: u64,
    /// Its address (the replay checks it, so a misplaced record is never applied).
    #[serde(with = "hex")]
    pub ip: u64,
    /// The call number.
    pub nr: u64,
    /// Registers before the call that the recorder knows (name → value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub before: BTreeMap<String, String>,
    /// Registers after it (at least `rax`, the result, where known).
    #[serde(default)]
    pub after: BTreeMap<String, String>,
    /// The user memory it wrote.
    #[serde(default)]
    pub writes: Vec<MemoryWrite>,
    /// Whether `writes` is all it wrote (false: it may have written elsewhere too).
    pub complete: bool,
}

#[cfg(test)]
mod tests {
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
}

#[cfg(test)]
mod table_tests {
    use super::*;

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
}

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

/// What a call does to user memory and registers besides `rax`, `rcx` and `r11`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Writes at most these (address, length) ranges.
    Writes(Vec<(u64, u64)>),
    /// Writes where user memory says (`readv`, `recvmsg` …).
    Indirect(Vec<Indirect>),
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

impl Effect {
    /// The ranges it may write, reading what they depend on with `read` (a little-endian word
    /// of 4 or 8 bytes at an address, if known); `None` where nobody can bound them.
    pub fn ranges(&self, read: &dyn Fn(u64, u32) -> Option<u64>) -> Option<Vec<(u64, u64)>> {
        match self {
            Effect::Writes(r) => Some(r.clone()),
            Effect::Indirect(parts) => {
                let mut out = Vec::new();
                for p in parts {
                    out.extend(p.ranges(read)?);
                }
                Some(out)
            }
            Effect::Anywhere => None,
            Effect::Restores | Effect::SetsBase { .. } => Some(Vec::new()),
        }
    }
}

/// Bytes one log record may hold: what a call wrote beyond them is logged as ranges without
/// their bytes ([`SyscallRecord::unlogged`]). Large enough for a program that reads its whole
/// input at once (`sort` reads a 1.8 MB file in one `read`, and lost every value after it
/// under the old bound of 1 MiB, when such a call forgot all memory).
pub const LOG_BOUND: u64 = 16 << 20;

/// What a recorder logs of a call's effect ([`logged_writes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Logged {
    /// The bytes of the ranges it wrote, as far as [`LOG_BOUND`] allows and memory could be
    /// read after the call.
    pub writes: Vec<MemoryWrite>,
    /// The rest of the ranges it wrote, without their bytes.
    pub unlogged: Vec<Unlogged>,
    /// Whether `writes` is all it wrote ([`SyscallRecord::complete`]).
    pub complete: bool,
}

/// What a recorder logs of a call's effect, reading the process's memory after it with `read`
/// (which returns how many bytes it could read): the bytes of every range it may have
/// written, up to [`LOG_BOUND`] in all, and the ranges whose bytes it could not log (over the
/// bound, or unreadable); nothing, and not complete, where the ranges are not known
/// (an effect that may write anywhere, or arguments that could not be read).
pub fn logged_writes(effect: &Effect, read: &dyn Fn(u64, &mut [u8]) -> usize) -> Logged {
    let word = |at: u64, width: u32| {
        let mut b = [0u8; 8];
        (read(at, &mut b[..width as usize]) == width as usize).then(|| u64::from_le_bytes(b))
    };
    let Some(ranges) = effect.ranges(&word) else {
        return Logged::default();
    };
    let mut logged = Logged::default();
    let mut budget = LOG_BOUND;
    for (address, len) in ranges.into_iter().filter(|r| r.1 > 0) {
        let mut bytes = vec![0u8; len.min(budget) as usize];
        let n = if bytes.is_empty() { 0 } else { read(address, &mut bytes) };
        if n > 0 {
            logged.writes.push(MemoryWrite::new(address, &bytes[..n]));
        }
        budget -= n as u64;
        if (n as u64) < len {
            logged.unlogged.push(Unlogged {
                address: address.wrapping_add(n as u64),
                len: len - n as u64,
            });
        }
    }
    logged.complete = logged.unlogged.is_empty();
    logged
}

/// A range a call wrote whose bytes its log record does not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unlogged {
    /// Where.
    #[serde(with = "hex")]
    pub address: u64,
    /// How many bytes.
    pub len: u64,
}

/// The arguments in `rdi, rsi, rdx, r10, r8, r9` order, each if known.
pub type Args = [Option<u64>; 6];

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
    /// A write of `bytes` at `address`. Two digits a byte from a table, into bytes: a
    /// `format!` a byte took about a millisecond for the 16 KiB a signal handler's entry
    /// logs, while the program waited (a 1 ms interval timer then left it no time to run),
    /// and pushing them as chars into a `String` still took 7 ns a byte, on QEMU's thread at
    /// every `read` (55 ms of gzip's 8 MB, issue 20).
    pub fn new(address: u64, bytes: &[u8]) -> Self {
        let mut hex = vec![0u8; 2 * bytes.len()];
        for (pair, &b) in hex.chunks_exact_mut(2).zip(bytes) {
            pair[0] = DIGITS[usize::from(b >> 4)];
            pair[1] = DIGITS[usize::from(b & 0xf)];
        }
        let bytes = String::from_utf8(hex).unwrap_or_default();
        Self { address, bytes }
    }

    /// The bytes, if the hex digits are well formed.
    pub fn data(&self) -> Option<Vec<u8>> {
        let s = self.bytes.as_bytes();
        if s.len() % 2 != 0 {
            return None;
        }
        let mut out = Vec::with_capacity(s.len() / 2);
        for pair in s.chunks_exact(2) {
            let (hi, lo) = (VALUES[usize::from(pair[0])], VALUES[usize::from(pair[1])]);
            if (hi | lo) & 0xf0 != 0 {
                return None;
            }
            out.push(hi << 4 | lo);
        }
        Some(out)
    }
}

/// Hex digits, lower case.
const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// What each byte is as a hex digit (either case), 0xff where none.
const VALUES: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

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
    /// Ranges it wrote whose bytes `writes` does not hold ([`LOG_BOUND`], or unreadable after
    /// the call): with them, `writes` and `unlogged` are everywhere it wrote. `complete` stays
    /// false then, so that a reader older than this field forgets all memory, as it must
    /// without it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unlogged: Vec<Unlogged>,
}

impl SyscallRecord {
    /// Whether the record tells everywhere the call wrote: all of it logged, or the rest as
    /// [`Self::unlogged`] ranges.
    pub fn ranges_known(&self) -> bool {
        self.complete || !self.unlogged.is_empty()
    }
}

mod indirect;
mod table;

pub use indirect::Indirect;
pub use table::effect;

#[cfg(test)]
mod tests;

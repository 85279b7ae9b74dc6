//! Which threads of the program are inside a system call, so that `rtit record` sends its
//! sample signal (a register sample, an anchor: `rtit_recorder::qemu::gdbstub`) only to a
//! thread outside one.
//!
//! QEMU's host handler for a signal the program does not catch is installed without
//! `SA_RESTART`: a signal that comes while a thread blocks in the host's system call (a
//! `write` to a full pipe) makes that call fail, and the program sees `EINTR`
//! (`sort: write failed: 'standard output': Interrupted system call`), where Linux would
//! have restarted it, the signal being withheld (rtit withholds it). A signal taken before
//! the host's call is safe: QEMU then goes back to the `syscall` instruction and makes the
//! call again once the signal is dealt with (its `safe_syscall`; the recording notes
//! `-ERESTARTSYS`, which replay reads as a restart).
//!
//! So each side writes its own word, then reads the other's (Dekker's handshake, both
//! sequentially consistent): `rtit record` names the thread it is about to signal in
//! [`SIGNALLING`], then reads [`IN_CALL`] and gives up (for a later try) if that thread is
//! inside a call; a thread entering a call marks itself in [`IN_CALL`], then reads
//! [`SIGNALLING`], and if it is the one named, waits here, before QEMU's host call, until
//! the signal has been taken or rtit gave up. Either rtit sees the mark, or the thread sees
//! the name: the signal never lands inside the host's call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::published::Line;

/// How many threads' marks [`IN_CALL`] holds, by vCPU index (QEMU gives a new thread the
/// lowest free index, so these are the first this many threads alive at once).
pub const SLOTS: usize = 256;

/// The id of the thread inside a system call, by its vCPU's index (0: none). A thread whose
/// index is beyond the table counts in [`CROWDED`] instead.
pub static IN_CALL: Line<[AtomicU64; SLOTS]> = Line([const { AtomicU64::new(0) }; SLOTS]);

/// Threads inside a system call whose vCPU index is beyond [`IN_CALL`]: while any is,
/// `rtit record` signals no thread (it cannot tell which are inside).
pub static CROWDED: Line<AtomicU64> = Line(AtomicU64::new(0));

/// Written by `rtit record` (from outside): the id of the thread it is about to signal, with
/// [`SENT`] set once the signal is sent; 0 once the stop is over or it gave up.
pub static SIGNALLING: Line<AtomicU64> = Line(AtomicU64::new(0));

/// The bit of [`SIGNALLING`] that says the signal was sent.
pub const SENT: u64 = 1 << 63;

/// How long a thread entering a call waits at most for rtit's signal: rtit sends it within
/// microseconds of naming the thread; a recorder gone meanwhile must not hang the program.
const WAIT_AT_MOST: Duration = Duration::from_millis(200);

thread_local! {
    /// This thread's id, read once.
    static TID: u64 = nix::unistd::gettid().as_raw() as u64;
}

/// The thread on vCPU `vcpu` enters a system call: marks it, and waits while rtit is about
/// to signal it (see the module's text).
pub fn enter(vcpu: u32) {
    let tid = TID.with(|t| *t);
    match IN_CALL.get(vcpu as usize) {
        Some(slot) => slot.store(tid, Ordering::SeqCst),
        None => {
            CROWDED.fetch_add(1, Ordering::SeqCst);
        }
    }
    let deadline = Instant::now() + WAIT_AT_MOST;
    loop {
        let named = SIGNALLING.load(Ordering::SeqCst);
        if named & !SENT != tid {
            return;
        }
        if named & SENT != 0 {
            // Sent: pending, or taken already. Any return from the kernel takes a pending
            // signal, so a call that does nothing makes sure QEMU has it before its own.
            // SAFETY: the getppid system call, which takes no argument and cannot fail.
            unsafe { nix::libc::syscall(nix::libc::SYS_getppid) };
            return;
        }
        if Instant::now() >= deadline {
            return;
        }
        // Interrupted by the signal (it is taken): QEMU has it before its own call.
        if nap_interrupted() {
            return;
        }
    }
}

/// Sleeps 20 µs: true if a signal handler ran meanwhile (`nanosleep` fails with `EINTR`
/// then, whatever the handler's flags).
fn nap_interrupted() -> bool {
    let nap = nix::libc::timespec {
        tv_sec: 0,
        tv_nsec: 20_000,
    };
    // SAFETY: nanosleep with a valid request and no remainder wanted.
    let r = unsafe { nix::libc::nanosleep(&nap, std::ptr::null_mut()) };
    r != 0 && nix::errno::Errno::last() == nix::errno::Errno::EINTR
}

/// The thread on vCPU `vcpu` is back from its system call.
pub fn leave(vcpu: u32) {
    match IN_CALL.get(vcpu as usize) {
        Some(slot) => slot.store(0, Ordering::SeqCst),
        None => {
            CROWDED.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

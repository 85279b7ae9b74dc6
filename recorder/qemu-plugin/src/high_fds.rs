//! QEMU's own descriptors out of the program's way. QEMU runs the program in its own process,
//! so the program's descriptors share QEMU's table, and the gdbstub `rtit record` talks to
//! (`-g SOCKET`) took descriptors 3 and 4 (its listening socket and the connection) before the
//! program ran: every file the program opened got a number two higher than without rtit (a
//! user's check: `openat` returned 5 where native and plain QEMU give 3). `rtit record`
//! preloads this library into QEMU (see `kill` in `lib.rs`), so QEMU's `socket` and `accept`
//! are these: until the program's first block runs ([`program_started`]), what they return
//! moves to a descriptor at or above `HIGH_FD`, as the plugin's own files do; after it, they
//! are the plain system calls (QEMU carries out the program's `socket` with libc's).

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::libc;
use rtit_recorder::qemu::report::HIGH_FD;

/// Whether the program's first block has run.
static STARTED: AtomicBool = AtomicBool::new(false);

/// The program runs from now on: sockets are its own.
pub fn program_started() {
    STARTED.store(true, Ordering::Relaxed);
}

/// `fd` at or above `HIGH_FD` with the same descriptor flags, the low one closed; `fd` itself
/// where it cannot move (an error, or the program's own).
fn raised(fd: c_int) -> c_int {
    if !(0..HIGH_FD).contains(&fd) || STARTED.load(Ordering::Relaxed) {
        return fd;
    }
    // SAFETY: fcntl and close on a descriptor this call owns.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        let high = libc::fcntl(fd, libc::F_DUPFD, HIGH_FD);
        if flags < 0 || high < 0 {
            return fd;
        }
        libc::fcntl(high, libc::F_SETFD, flags);
        libc::close(fd);
        high
    }
}

/// QEMU's `socket`: the system call, raised while the program has not started.
#[no_mangle]
pub extern "C" fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
    // SAFETY: the socket system call with plain integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_socket, domain, kind, protocol) } as c_int;
    raised(fd)
}

/// QEMU's `accept` (its gdbstub's, with `addr` and `len` null): the system call, raised while
/// the program has not started.
///
/// # Safety
/// `addr` and `len` are null or point where the kernel may write an address and its length,
/// as for accept(2).
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int {
    let fd = libc::syscall(libc::SYS_accept, fd, addr, len) as c_int;
    raised(fd)
}

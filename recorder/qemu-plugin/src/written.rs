//! The pages the program writes, as the kernel tracks them (issue 40: the anchors `rtit
//! record` takes while the program runs hold every page written since the one before, so
//! that a replay knows the whole state there without walking the history up to it).
//!
//! QEMU user mode keeps the program's memory at the program's own addresses in QEMU's
//! process, so the plugin registers the program's private mappings with a userfaultfd in
//! write-protect mode, asynchronous (Linux 6.7: the kernel resolves each first write itself,
//! no thread of ours handles a fault): a page's first write after it was protected clears
//! its protection, and `rtit record` finds the pages written since its last look with the
//! pagemap's PAGEMAP_SCAN, which protects them again (`rtit_recorder::qemu::written`). A
//! write the kernel makes for a system call counts as one. Shared mappings are not
//! registered (another process's writes to them touch no page table of QEMU's): replay
//! forgets them at every anchor. [`TRACKING`] says whether the tracking covers every other
//! mapping; a mapping that cannot be registered turns it off for good.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::fcntl::{fcntl, FcntlArg};
use rtit_recorder::qemu::report::HIGH_FD;
use rtit_replay_core::recording::Mapping;

/// Whether the pages the program writes are tracked ([`ON`]), not yet or not at all
/// ([`OFF`]), or no longer ([`LOST`]: a mapping could not be registered): `rtit record`
/// reads it at every anchor and takes anchors only while it is [`ON`].
pub static TRACKING: AtomicU64 = AtomicU64::new(OFF);
/// Not tracking.
pub const OFF: u64 = 0;
/// Tracking every private mapping of the program's.
pub const ON: u64 = 1;
/// Tracking stopped: some mapping is not covered.
pub const LOST: u64 = 2;

/// `_IOWR(type, nr, size)`.
const fn iowr(kind: u64, nr: u64, size: u64) -> u64 {
    3 << 30 | size << 16 | kind << 8 | nr
}
const UFFDIO: u64 = 0xaa;
const UFFD_API: u64 = 0xaa;
const UFFDIO_API: u64 = iowr(UFFDIO, 0x3f, 24);
const UFFDIO_REGISTER: u64 = iowr(UFFDIO, 0x00, 32);
const UFFDIO_WRITEPROTECT: u64 = iowr(UFFDIO, 0x06, 24);
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
/// The userfaultfd flag that lets a process without privilege create one: only faults in
/// user mode are reported, which async write-protection needs none of.
const UFFD_USER_MODE_ONLY: i32 = 1;

/// The program's pages as the kernel tracks their writes.
pub struct Written {
    uffd: OwnedFd,
}

impl Written {
    /// Starts tracking the program's mappings `maps`; why not, where the kernel cannot
    /// (before Linux 6.7, or userfaultfd forbidden).
    pub fn start(maps: &[Mapping]) -> Result<Self, String> {
        // SAFETY: a system call with integer arguments; the descriptor it returns is ours.
        #[allow(unsafe_code)]
        let fd = unsafe {
            nix::libc::syscall(
                nix::libc::SYS_userfaultfd,
                nix::libc::O_CLOEXEC | nix::libc::O_NONBLOCK | UFFD_USER_MODE_ONLY,
            )
        };
        if fd < 0 {
            return Err(format!("userfaultfd: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` was just created and nothing else owns it.
        #[allow(unsafe_code)]
        let low = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        // Out of the program's way, as the plugin's files are: its next `open` gets the number
        // it would get without rtit (the low descriptor closes when `low` drops).
        let high = fcntl(low.as_raw_fd(), FcntlArg::F_DUPFD_CLOEXEC(HIGH_FD)).map_err(|e| format!("fcntl: {e}"))?;
        // SAFETY: `high` is a new descriptor that nothing else owns.
        #[allow(unsafe_code)]
        let uffd = unsafe { OwnedFd::from_raw_fd(high) };
        drop(low);
        let mut api = [UFFD_API, UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED, 0];
        ioctl(&uffd, UFFDIO_API, &mut api)
            .map_err(|e| format!("UFFDIO_API with asynchronous write-protection: {e}"))?;
        let written = Self { uffd };
        // Every page as the start snapshot has it: protected, so its first write shows.
        for m in private(maps) {
            written.register(m)?;
            let mut protect = [m.start, m.end - m.start, UFFDIO_WRITEPROTECT_MODE_WP];
            ioctl(&written.uffd, UFFDIO_WRITEPROTECT, &mut protect)
                .map_err(|e| lost(m, &format!("UFFDIO_WRITEPROTECT: {e}")))?;
        }
        TRACKING.store(ON, Ordering::Release);
        Ok(written)
    }

    /// Tracks mappings `added` after a change of the map (new ones, and those `mprotect` or
    /// `mremap` changed): registers each private one. Not protected again: a page written
    /// since the last anchor must still show as written at the next. A new mapping's pages
    /// are not there yet and count as protected (`UFFD_FEATURE_WP_UNPOPULATED`); pages a
    /// `mremap` moved, whose registration it dropped, show as written once, which only
    /// copies them at the next anchor. A failure stops the tracking for good ([`LOST`]): an
    /// anchor could no longer say every page written.
    pub fn follow(&self, added: &[Mapping]) -> Result<(), String> {
        private(added).try_for_each(|m| self.register(m))
    }

    fn register(&self, m: &Mapping) -> Result<(), String> {
        let mut register = [m.start, m.end - m.start, UFFDIO_REGISTER_MODE_WP, 0];
        ioctl(&self.uffd, UFFDIO_REGISTER, &mut register).map_err(|e| lost(m, &format!("UFFDIO_REGISTER: {e}")))
    }
}

/// The mappings whose writes the tracking covers: private ones (another process's writes to
/// a shared one touch no page table of this one).
fn private(maps: &[Mapping]) -> impl Iterator<Item = &Mapping> {
    maps.iter().filter(|m| !m.perms.ends_with('s'))
}

/// Stops the tracking for good, and says which mapping and why.
fn lost(m: &Mapping, why: &str) -> String {
    TRACKING.store(LOST, Ordering::Release);
    format!(
        "the pages written to {:#x}-{:#x} ({}) cannot be tracked: {why}",
        m.start, m.end, m.perms
    )
}

/// An ioctl on the userfaultfd with its argument structure as words.
fn ioctl<const N: usize>(uffd: &OwnedFd, request: u64, arg: &mut [u64; N]) -> Result<(), std::io::Error> {
    use std::os::fd::AsRawFd;
    // SAFETY: `arg` is the structure this request reads and writes (all u64 fields, laid
    // out as the kernel's), alive for the call.
    #[allow(unsafe_code)]
    let r = unsafe { nix::libc::ioctl(uffd.as_raw_fd(), request as _, arg.as_mut_ptr()) };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

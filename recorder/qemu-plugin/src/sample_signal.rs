//! The signal `rtit record` stops the program with, for a register sample or an anchor
//! (`rtit_recorder::qemu::gdbstub::SAMPLE_SIGNAL`), must reach QEMU's gdbstub, which reports
//! it and lets rtit withhold it from the program. QEMU 7.2 catches every host signal. QEMU 9
//! and later leave a signal the program has no handler for and whose default is to end the
//! process without a host handler (only those that dump core get one), so the kernel
//! would end QEMU at the first sample, its gdbstub none the wiser (or, ignored, drop it,
//! and rtit would wait for a stop that never comes). The plugin gives it QEMU's own host
//! handler (the one QEMU installs for SIGSEGV): QEMU then passes it to the program's signal
//! queue and its gdbstub, as 7.2 did, and the program's view of it is unchanged (QEMU's table
//! still says default or ignored, and applies that once rtit passes on a signal it did not
//! send). QEMU sets the host action again whenever the program sets the signal's, so the
//! plugin looks again after each `rt_sigaction`.
#![allow(unsafe_code)]

use nix::libc::{sigaction, SA_SIGINFO, SIGSEGV, SIG_DFL, SIG_IGN};

/// Installs QEMU's host handler for the sample signal if the host's action is the default
/// or to ignore it; once QEMU has set up its signals (at vCPU 0's start), and after each
/// `rt_sigaction`. Does nothing where QEMU catches it already.
pub fn catch() {
    let sample = rtit_recorder::qemu::gdbstub::SAMPLE_SIGNAL as i32;
    // SAFETY: reads and sets host signal actions with valid, zero-initialised structures.
    unsafe {
        let mut now: sigaction = std::mem::zeroed();
        if sigaction(sample, std::ptr::null(), &mut now) != 0 || !matches!(now.sa_sigaction, SIG_DFL | SIG_IGN) {
            return;
        }
        let mut qemus: sigaction = std::mem::zeroed();
        if sigaction(SIGSEGV, std::ptr::null(), &mut qemus) != 0
            || qemus.sa_sigaction == SIG_DFL
            || qemus.sa_sigaction == SIG_IGN
            || qemus.sa_flags & SA_SIGINFO == 0
        {
            // QEMU has not set up its signals yet (7.2 does that after vCPU 0 exists, and
            // then catches every signal).
            return;
        }
        sigaction(sample, &qemus, std::ptr::null_mut());
    }
}

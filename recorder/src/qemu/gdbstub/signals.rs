//! Signal deliveries under QEMU, logged as the step backend logs them: QEMU hands every
//! signal to its gdbstub before the program gets it. If the program handles the signal (the
//! plugin keeps the handler each successful `rt_sigaction` installed, in a table rtit reads
//! from QEMU's memory), rtit puts a breakpoint on the handler, lets QEMU deliver the signal,
//! and at the breakpoint, where the handler's first instruction is about to run, reads every
//! register, the plugin's position and 16 KiB of stack from the handler's stack pointer: the
//! frame QEMU wrote. Without it a handler's registers, and what the program does after
//! `rt_sigreturn`, would be unknown in replay (`next` over `raise` ran to the end).

use std::time::Duration;

use nix::unistd::Pid;
use rtit_replay_core::recording::SignalEntry;
use rtit_replay_core::syscall::MemoryWrite;

use super::remote::{register, registers, stop, Received, Remote, Stop};
use super::GdbstubError;
use crate::qemu::report::Counters;

/// SIGTRAP in GDB's numbering: a breakpoint.
const GDB_SIGTRAP: u8 = 5;
/// Bytes of stack logged at a handler's entry (as the step backend logs).
const FRAME: usize = 16 << 10;
/// Where the interrupted code's RIP is in the frame at a handler's entry, from the stack
/// pointer (Linux's x86-64 `struct rt_sigframe`, which QEMU writes as the kernel does: the
/// return address to `__restore_rt`, 8 bytes; the `ucontext`, whose `uc_mcontext` is 40 bytes
/// in; its `rip`, 128 bytes into that).
const FRAME_RIP: usize = 8 + 40 + 128;
/// Linux's signal numbers for GDB's (`gdb/signals.def`, which QEMU's gdbstub speaks):
/// `LINUX[gdb]`, 0 where Linux has none. Real-time signals are not listed: they are passed on
/// unlogged.
const LINUX: [u8; 34] = [
    0, 1, 2, 3, 4, 5, 6, 0, 8, 9, 7, 11, 31, 13, 14, 15, 23, 19, 20, 18, 17, 21, 22, 29, 24, 25, 26, 27, 28, 0, 10, 12,
    30, 29,
];

/// Linux's number for GDB signal `s`, 0 if it has none here.
fn linux(s: u8) -> u8 {
    LINUX.get(usize::from(s)).copied().unwrap_or(0)
}

/// The handler the program installed for GDB signal `s`, if it is a function.
fn handler(pid: Pid, counters: &Counters, s: u8) -> Option<u64> {
    let linux = Some(linux(s)).filter(|&l| l != 0)?;
    let bytes = super::guest::read(pid, counters.handlers + 8 * u64::from(linux), 8);
    let h = u64::from_le_bytes(bytes.try_into().ok()?);
    (h > 1).then_some(h)
}

/// Where the interrupted code resumes, from the frame at a handler's entry (its saved RIP).
fn resume_of(frame: &[u8]) -> Option<u64> {
    frame
        .get(FRAME_RIP..FRAME_RIP + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
}

/// Tells the plugin's engine, which is up to date and waits for the handler's block, that
/// the signal interrupted code that resumes at `resume`, as the frame at the handler's entry
/// says: where the interrupted block's last branch went, or the instruction that faulted,
/// which the blocks alone do not tell (`Engine::signal_delivered`). Nothing if the frame is
/// short or the plugin has no place for it (the engine then writes a gap, as without it).
/// Whether it told.
fn tell_delivery(pid: Pid, counters: &Counters, handler: u64, resume: Option<u64>, signal: u8) -> bool {
    match (counters.delivered, resume) {
        // The resume address and the signal first: the plugin reads the handler's word, then
        // them.
        (Some(at), Some(resume)) => {
            super::guest::write_words(pid, at + 8, &[resume, u64::from(signal)])
                && super::guest::write_words(pid, at, &[handler])
        }
        _ => false,
    }
}

/// What [`deliver`] passes on and logs, besides the signal itself.
pub struct Delivery<'a> {
    /// `rtit record`'s own sampling signal (GDB's number), never the program's: when it
    /// comes while a handler is being reached, it is withheld and `withheld` set.
    pub withhold: Option<u8>,
    /// Whether the sampling signal was withheld.
    pub withheld: bool,
    /// Where the handlers' entries go.
    pub entries: &'a mut Vec<SignalEntry>,
    /// The indices in `entries` of those the plugin's engine was told of, in order: it
    /// reports their exact positions (`Engine::deliveries`).
    pub told: &'a mut Vec<usize>,
    /// No user code runs untraced (no IP filter).
    pub only_kernel: bool,
    /// The registers at the last signal the program did not handle: where a fatal one
    /// stopped it, the end's registers (the plugin cannot read them).
    pub unhandled: &'a mut Option<crate::outcome::RegisterMap>,
}

/// Lets the program have signal `s` (as reported by a stop); if it handles it, runs it to
/// the handler's entry and logs it (see [`Delivery`]). Returns false if the program ended
/// meanwhile (or `done` says rtit stopped waiting).
pub fn deliver(
    remote: &mut Remote,
    pid: Pid,
    counters: &Counters,
    s: u8,
    d: &mut Delivery<'_>,
    done: &dyn Fn() -> bool,
) -> Result<bool, GdbstubError> {
    let only_kernel = d.only_kernel;
    let Some(at) = handler(pid, counters, s) else {
        // If it ends the program, within a block, the engine needs where (`Engine::signal_at`).
        // A reply it cannot read only leaves that unknown (a gap where the program dies).
        if let Some(faulted) = counters.faulted {
            let regs = registers(&remote.request("g")?).ok();
            if let Some(rip) = regs.as_ref().and_then(|r| register(r, "rip")) {
                super::guest::write_words(pid, faulted, &[rip]);
            }
            *d.unhandled = regs;
        }
        remote.send(&format!("C{s:02x}"))?;
        return Ok(true);
    };
    let breakpoint = format!("{at:x},1");
    if remote.request(&format!("Z0,{breakpoint}"))? != "OK" {
        remote.send(&format!("C{s:02x}"))?;
        return Ok(true);
    }
    remote.send(&format!("C{s:02x}"))?;
    let ended = loop {
        let reply = match remote.receive(Some(Duration::from_millis(100)))? {
            Received::Closed => break true,
            Received::TimedOut if done() => break true,
            Received::TimedOut => continue,
            Received::Packet(reply) => reply,
        };
        match stop(&reply)? {
            Stop::Ended => break true,
            Stop::Signal(GDB_SIGTRAP) => {
                let regs = registers(&remote.request("g")?)?;
                if regs.get("rip").map(String::as_str) != Some(&format!("{at:#x}")) {
                    // The program's own trap: it goes on to get it.
                    remote.send(&format!("C{GDB_SIGTRAP:02x}"))?;
                    continue;
                }
                let rsp = register(&regs, "rsp");
                let frame = rsp.map(|rsp| (rsp, super::guest::read(pid, rsp, FRAME)));
                let resume = frame.as_ref().and_then(|(_, f)| resume_of(f));
                // A fault cut the interrupted block short where the frame resumes.
                let position = super::guest::position(pid, *counters, resume);
                if let (Some(position), Some((rsp, frame))) = (position, frame) {
                    if tell_delivery(pid, counters, at, resume, linux(s)) {
                        d.told.push(d.entries.len());
                    }
                    d.entries.push(SignalEntry {
                        position,
                        ip: at,
                        frame: MemoryWrite::new(rsp, &frame),
                        registers: regs,
                        only_kernel,
                        switch: None,
                    });
                }
                break false;
            }
            // rtit's own sampling signal, sent just as the program's came: withheld (a
            // program without a handler for it died of it).
            Stop::Signal(other) if Some(other) == d.withhold => {
                d.withheld = true;
                remote.send("c")?;
            }
            // Another signal before the handler ran: it is delivered too (unlogged).
            Stop::Signal(other) => remote.send(&format!("C{other:02x}"))?,
        }
    };
    if ended {
        return Ok(false);
    }
    if remote.request(&format!("z0,{breakpoint}"))? != "OK" {
        return Err(GdbstubError::Protocol(format!(
            "the breakpoint at the handler {at:#x} cannot be removed"
        )));
    }
    remote.send("c")?;
    Ok(true)
}

//! QEMU's memory as the recorder reads it (`process_vm_readv`) and, for the plugin, writes it: QEMU user mode keeps the
//! program's memory at the program's own addresses, and the plugin publishes where its
//! position counters are (`counters.json`).

use std::io::{IoSlice, IoSliceMut};
use std::time::{Duration, Instant};

use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;

use crate::qemu::report::Counters;

/// Reads `len` bytes of QEMU's memory at `at` (QEMU user mode keeps the program's memory at
/// its own addresses); fewer where it cannot.
pub(crate) fn read(pid: Pid, at: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let remote = [RemoteIoVec {
            base: at as usize + done,
            len: len - done,
        }];
        match process_vm_readv(pid, &mut [IoSliceMut::new(&mut buf[done..])], &remote) {
            Ok(n) if n > 0 => done += n,
            _ => break,
        }
    }
    buf.truncate(done);
    buf
}

/// Writes `u64`s into QEMU's memory at `at` (consecutive words), all or none; false if it
/// could not.
pub(super) fn write_words(pid: Pid, at: u64, words: &[u64]) -> bool {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let remote = [RemoteIoVec {
        base: at as usize,
        len: bytes.len(),
    }];
    process_vm_writev(pid, &[IoSlice::new(&bytes)], &remote).is_ok_and(|n| n == bytes.len())
}

/// How long rtit waits for the threads waiting inside QEMU's execution loop to leave it
/// (at the running thread's next system call) before it gives a stop up ([`hold`]).
const HOLD_WAIT: Duration = Duration::from_millis(20);

/// Asks the plugin to interrupt no thread of the program while rtit stops it (a sample, an
/// anchor): true once none waits inside QEMU's execution loop, where QEMU 10.0's stop (a
/// flush of its translations, in an exclusive section) would wait for it for ever (such a
/// thread leaves it when the running one makes a system call); else, after [`HOLD_WAIT`],
/// the request is taken back, for a later try. True for a plugin that has no threads to
/// hold.
pub(super) fn hold(pid: Pid, counters: Counters) -> bool {
    let (Some(hold), Some(inside)) = (counters.hold, counters.inside) else {
        return true;
    };
    if !write_words(pid, hold, &[1]) {
        return true;
    }
    let deadline = Instant::now() + HOLD_WAIT;
    loop {
        match word(pid, inside) {
            Some(0) => return true,
            None => break,
            Some(_) if Instant::now() >= deadline => break,
            Some(_) => std::thread::sleep(Duration::from_micros(500)),
        }
    }
    release(pid, counters);
    false
}

/// How long rtit waits for the running thread to park (it does at its next block; not while
/// every thread waits in a system call).
const PARK_WAIT: Duration = Duration::from_millis(50);

/// Asks the plugin to park the running thread at its next block, for an anchor taken
/// without QEMU's gdbstub (the plugin's `park`): where it parked (the position of the
/// instruction it stops before) and its registers; `None` if the plugin cannot, or did not
/// within [`PARK_WAIT`] (the request is then taken back). [`unpark`] lets it go on.
pub(super) fn park(pid: Pid, counters: Counters) -> Option<(u64, crate::outcome::RegisterMap)> {
    let (park, parked, at, text) = (
        counters.park?,
        counters.parked?,
        counters.parked_at?,
        counters.parked_registers?,
    );
    if !write_words(pid, park, &[1]) {
        return None;
    }
    let deadline = Instant::now() + PARK_WAIT;
    let found = loop {
        match word(pid, parked) {
            Some(1) => break words(pid, [at, at + 8]),
            Some(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_micros(200)),
            _ => break None,
        }
    };
    let parsed = found.and_then(|[position, len]| {
        let bytes = read(pid, text, len as usize);
        let regs = serde_json::from_slice(&bytes).ok()?;
        Some((position, regs))
    });
    if parsed.is_none() {
        unpark(pid, counters);
    }
    parsed
}

/// Lets the parked thread go on ([`park`]).
pub(super) fn unpark(pid: Pid, counters: Counters) {
    if let Some(park) = counters.park {
        write_words(pid, park, &[0]);
    }
}

/// What came of [`signal_outside_calls`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Signalled {
    /// The signal is on its way.
    Sent,
    /// The thread is inside a system call: not sent (try again later).
    InsideCall,
    /// The process is gone.
    Gone,
}

/// The bit of the plugin's `signalling` word that says the signal was sent.
const SENT: u64 = 1 << 63;

/// Sends `signal` to the thread of the program that runs, where the plugin says which (its
/// threads take turns: a signal to the process goes to any thread, and one that waits for
/// its turn would see it only once it runs again), else to the program's first thread; but
/// only while that thread is outside a system call. A signal that came while it blocked
/// in the host's call (a `write` to a full pipe) would make the call fail with `EINTR` in
/// the program, which Linux would have restarted (QEMU's host handler has no `SA_RESTART`);
/// one taken before the host's call makes QEMU restart it. rtit names the thread in the
/// plugin's `signalling` word, then reads which threads are inside a call; the plugin marks
/// a thread entering one, then waits there while it is the one named (the plugin's
/// `in_call`). Each side's write is seen by the other's read: two system calls apart here,
/// the kernel's locked instructions between them order this side's write before its read,
/// and the plugin's side is sequentially consistent. [`release`] takes the name back.
pub(super) fn signal_outside_calls(pid: Pid, counters: Counters, signal: nix::sys::signal::Signal) -> Signalled {
    let running = counters.running.and_then(|at| word(pid, at)).filter(|&t| t != 0);
    let target = running.unwrap_or(pid.as_raw() as u64);
    let named = counters.signalling;
    if let (Some(named), Some(table), Some(slots), Some(crowded)) =
        (named, counters.in_call, counters.in_call_slots, counters.crowded)
    {
        if !write_words(pid, named, &[target]) {
            return Signalled::Gone;
        }
        let inside = read(pid, table, slots as usize * 8);
        let crowded = word(pid, crowded);
        let inside_call = inside.len() != slots as usize * 8
            || crowded != Some(0)
            || inside
                .chunks_exact(8)
                .any(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")) == target);
        if inside_call {
            write_words(pid, named, &[0]);
            return Signalled::InsideCall;
        }
    }
    // SAFETY: the tgkill system call with plain integer arguments.
    #[allow(unsafe_code)]
    let sent = unsafe { nix::libc::syscall(nix::libc::SYS_tgkill, pid.as_raw(), target as i32, signal as i32) } == 0;
    if !(sent || nix::sys::signal::kill(pid, signal).is_ok()) {
        return Signalled::Gone;
    }
    if let Some(named) = named {
        write_words(pid, named, &[target | SENT]);
    }
    Signalled::Sent
}

/// Whether the program's threads take turns (the plugin names the one whose turn it is).
pub(super) fn threaded(pid: Pid, counters: Counters) -> bool {
    counters.running.and_then(|at| word(pid, at)).is_some_and(|t| t != 0)
}

/// Whether the thread a stop reply names (`thread:pPID.TID;`) is the one whose turn it is,
/// where the plugin says (its threads take turns): the plugin's position is that thread's.
/// True for a program with one thread, or a reply that names none.
pub(super) fn stopped_runs(pid: Pid, counters: Counters, reply: &str) -> bool {
    let running = counters.running.and_then(|at| word(pid, at)).unwrap_or(0);
    let named = reply
        .split(';')
        .find_map(|f| f.rsplit_once("thread:").map(|(_, t)| t))
        .and_then(|t| t.rsplit('.').next())
        .and_then(|t| u64::from_str_radix(t.trim_start_matches('p'), 16).ok());
    match (running, named) {
        (0, _) | (_, None) => true,
        (r, Some(t)) => r == t,
    }
}

/// Takes back [`hold`]'s request and [`signal_outside_calls`]' name, once the stop is over.
pub(super) fn release(pid: Pid, counters: Counters) {
    if let Some(hold) = counters.hold {
        write_words(pid, hold, &[0]);
    }
    if let Some(named) = counters.signalling {
        write_words(pid, named, &[0]);
    }
}

/// Reads one `u64` of QEMU's memory at `at`.
pub(crate) fn word(pid: Pid, at: u64) -> Option<u64> {
    words(pid, [at]).map(|[w]| w)
}

/// Reads `u64`s of QEMU's memory at `at`, all or none.
fn words<const N: usize>(pid: Pid, at: [u64; N]) -> Option<[u64; N]> {
    let mut bufs = [[0u8; 8]; N];
    let remote: Vec<RemoteIoVec> = at
        .iter()
        .map(|&a| RemoteIoVec {
            base: a as usize,
            len: 8,
        })
        .collect();
    let mut local: Vec<IoSliceMut<'_>> = bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
    let n = process_vm_readv(pid, &mut local, &remote).ok()?;
    (n == 8 * N).then(|| bufs.map(u64::from_le_bytes))
}

/// How long the plugin's feeder thread may take to catch up with the vCPU, which is stopped.
const CATCH_UP: Duration = Duration::from_secs(5);

/// The position of the instruction the program stopped before, at `ip`: the running block's
/// base plus its started instructions (the stop is between blocks, or inside the running
/// block where it was cut short, which `ip`, where it stopped, then places: `super::cut`). `None` while not
/// tracing, or if the plugin's engine does not catch up with the blocks the vCPU noted, or
/// for a cut block that `ip` does not place.
pub(super) fn position(pid: Pid, counters: Counters, ip: Option<u64>) -> Option<u64> {
    if let (Some(pushed), Some(taken)) = (counters.pushed, counters.taken) {
        // The engine runs behind the vCPU on a thread of its own: wait until it has taken
        // every block noted before the stop.
        let deadline = Instant::now() + CATCH_UP;
        loop {
            let [p, t] = words(pid, [pushed, taken])?;
            if p == t {
                break;
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    let started_at = match counters.started_via {
        // 0 before the program's first instruction: nothing counted yet.
        Some(via) => word(pid, via).filter(|&at| at != 0)?,
        None => counters.started,
    };
    let (base, started) = match counters.started_base {
        Some(at) => {
            let [base, now, then] = words(pid, [counters.position, started_at, at])?;
            (base, now.wrapping_sub(then))
        }
        None => {
            let [base, started] = words(pid, [counters.position, started_at])?;
            (base, started)
        }
    };
    if base == u64::MAX {
        return None;
    }
    let started = match (started, counters.pending_start) {
        // A plugin that counts a block at once: 0 for the running block cut short.
        (0, Some(at)) => {
            let (start, ip) = (word(pid, at).filter(|&s| s != 0)?, ip?);
            let span = ip.checked_sub(start).filter(|&d| d < super::cut::SPAN)?;
            super::cut::retired_before(&read(pid, start, span as usize), start, ip)?
        }
        (n, _) => n,
    };
    Some(base.wrapping_add(started))
}

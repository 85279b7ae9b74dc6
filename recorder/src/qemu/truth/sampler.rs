//! The sampling thread: waits a random 0.1–0.7 ms, stops the program through QEMU's gdbstub,
//! reads the registers and the plugin's counters, and lets it go on.

use std::io::IoSliceMut;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;

use super::remote::{registers, stop, Received, Remote, Stop};
use super::TruthError;
use crate::outcome::RegisterMap;
use crate::qemu::report::Counters;

/// The signal that stops the program for a sample. QEMU passes every signal whose default
/// is to end the process to its gdbstub first; rtit continues without it. SIGVTALRM, because
/// programs seldom use it: one the program sends itself at the same moment would be lost.
pub const SAMPLE_SIGNAL: Signal = Signal::SIGVTALRM;

/// SIGVTALRM in GDB's signal numbering (as in Linux's).
const GDB_SAMPLE_SIGNAL: u8 = 26;

/// How long QEMU may take to open its gdbstub socket.
const CONNECT_WITHIN: Duration = Duration::from_secs(10);

/// While waiting for a stop, how often the thread looks whether it should give up.
const POLL: Duration = Duration::from_millis(100);

/// A running sampler.
pub struct Sampler {
    thread: JoinHandle<Result<Vec<(u64, RegisterMap)>, TruthError>>,
    done: Arc<AtomicBool>,
}

impl Sampler {
    /// Connects to QEMU (process `pid`) at `socket`, where it waits before the program's first
    /// instruction, and starts sampling. `dir` holds the plugin's counters file; with
    /// `at_entry` the registers at that first instruction are the sample at position 0.
    pub fn start(socket: &Path, dir: &Path, pid: u32, at_entry: bool) -> Result<Self, TruthError> {
        let stream = connect(socket)?;
        let counters = read_counters(&dir.join(crate::qemu::report::files::COUNTERS))?;
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let pid = Pid::from_raw(pid as i32);
        let thread = std::thread::Builder::new()
            .name("rtit-sampler".into())
            .spawn(move || sample(Remote::new(stream), pid, counters, at_entry, &flag))
            .map_err(TruthError::Io)?;
        Ok(Self { thread, done })
    }

    /// The samples, once QEMU has ended: (position, registers before the instruction there).
    pub fn finish(self) -> Result<Vec<(u64, RegisterMap)>, TruthError> {
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().map_err(|_| TruthError::Panicked)?
    }
}

fn connect(socket: &Path) -> Result<UnixStream, TruthError> {
    let deadline = Instant::now() + CONNECT_WITHIN;
    loop {
        match UnixStream::connect(socket) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => {
                return Err(TruthError::Connect {
                    path: socket.display().to_string(),
                    source: e,
                })
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn read_counters(path: &PathBuf) -> Result<Counters, TruthError> {
    let bad = |problem: String| TruthError::Counters {
        path: path.display().to_string(),
        problem,
    };
    let text = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))
}

/// A small xorshift: sample moments that no loop of the program can stay in step with.
struct Jitter(u64);

impl Jitter {
    fn next(&mut self) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_micros(100 + self.0 % 600)
    }
}

fn sample(
    mut remote: Remote,
    pid: Pid,
    counters: Counters,
    at_entry: bool,
    done: &AtomicBool,
) -> Result<Vec<(u64, RegisterMap)>, TruthError> {
    let mut samples = Vec::new();
    let first = remote.request("?")?;
    if !matches!(stop(&first)?, Stop::Signal(_)) {
        return Ok(samples);
    }
    if at_entry {
        samples.push((0, registers(&remote.request("g")?)?));
    }
    remote.send("c")?;
    let mut jitter = Jitter(u64::from(pid.as_raw() as u32) | 1 << 40);
    loop {
        match remote.receive(Some(jitter.next()))? {
            Received::Closed => return Ok(samples),
            // The program's own signal (or its end) while it ran: passed on as it came.
            Received::Packet(reply) => match stop(&reply)? {
                Stop::Ended => return Ok(samples),
                Stop::Signal(s) => remote.send(&format!("C{s:02x}"))?,
            },
            Received::TimedOut => {
                if done.load(Ordering::Relaxed) || kill(pid, SAMPLE_SIGNAL).is_err() {
                    return Ok(samples);
                }
                match our_stop(&mut remote, done)? {
                    None => return Ok(samples),
                    Some(()) => {
                        let at = position(pid, counters);
                        let regs = registers(&remote.request("g")?)?;
                        if let Some(at) = at {
                            samples.push((at, regs));
                        }
                        remote.send("c")?;
                    }
                }
            }
        }
    }
}

/// Waits for the stop the sample signal causes, passing the program's own signals on;
/// `None` if the program ended first.
fn our_stop(remote: &mut Remote, done: &AtomicBool) -> Result<Option<()>, TruthError> {
    loop {
        match remote.receive(Some(POLL))? {
            Received::Closed => return Ok(None),
            Received::TimedOut if done.load(Ordering::Relaxed) => return Ok(None),
            Received::TimedOut => {}
            Received::Packet(reply) => match stop(&reply)? {
                Stop::Ended => return Ok(None),
                Stop::Signal(GDB_SAMPLE_SIGNAL) => return Ok(Some(())),
                Stop::Signal(s) => remote.send(&format!("C{s:02x}"))?,
            },
        }
    }
}

/// The position of the instruction the program stopped before: the running block's base
/// plus its started instructions (the stop is between blocks). `None` while not tracing.
fn position(pid: Pid, counters: Counters) -> Option<u64> {
    let mut base = [0u8; 8];
    let mut started = [0u8; 8];
    let remote = [
        RemoteIoVec {
            base: counters.position as usize,
            len: 8,
        },
        RemoteIoVec {
            base: counters.started as usize,
            len: 8,
        },
    ];
    let mut local = [IoSliceMut::new(&mut base), IoSliceMut::new(&mut started)];
    let n = process_vm_readv(pid, &mut local, &remote).ok()?;
    if n != 16 {
        return None;
    }
    let base = u64::from_le_bytes(base);
    (base != u64::MAX).then(|| base.wrapping_add(u64::from_le_bytes(started)))
}

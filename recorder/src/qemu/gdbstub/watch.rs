//! The thread that holds QEMU's gdbstub connection for the whole run: it reads the
//! registers where tracing starts, then (for `--truth`) waits a random 0.1–0.7 ms, stops
//! the program, reads the registers and the plugin's counters, and lets it go on, again and
//! again; and it passes the program's own signals on, logging each delivery to a handler
//! (`super::signals`).

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::guest::Signalled;
use super::remote::{register, registers, stop, Received, Remote, Stop};
use super::start::{run_to, Reached, StartPoint};
use super::GdbstubError;
use rtit_replay_core::recording::SignalEntry;

use crate::interrupt::Interrupt;
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

/// What the thread is to do.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Sample registers at random moments (`--truth`).
    pub sample: bool,
    /// With `sample`, the registers at the first instruction are the sample at position 0
    /// (tracing starts there).
    pub sample_entry: bool,
    /// Where tracing starts when not at the first instruction: the registers there are read.
    pub start: Option<StartPoint>,
    /// Whether only the kernel runs between traced code and a signal handler (no IP filter
    /// leaves user code untraced).
    pub only_kernel: bool,
    /// Take anchors while the program runs.
    pub anchors: Option<super::anchors::AnchorPlan>,
}

/// What the thread read.
#[derive(Debug, Default)]
pub struct Watched {
    /// Register samples: (position, registers before the instruction there).
    pub samples: Vec<(u64, RegisterMap)>,
    /// The registers where the plan's start point first ran, or why they were not read.
    pub start: Option<Result<RegisterMap, String>>,
    /// Signal handlers' entries while tracing.
    pub signals: Vec<SignalEntry>,
    /// The indices in `signals` of the entries the plugin's engine was told of, in order
    /// (`super::signals::Delivery::told`).
    pub told: Vec<usize>,
    /// With anchors planned: whether they were taken (the plugin tracked the written
    /// pages), and why they stopped before the end, if they did.
    pub anchors: Option<Option<String>>,
    /// The registers at the last signal the program did not handle (a fatal one ends it
    /// there).
    pub unhandled: Option<RegisterMap>,
    /// How long anchors were put off, due but not taken: a thread waited inside QEMU's
    /// execution loop each time rtit tried to stop the program (`super::guest::hold`).
    pub anchors_put_off: Duration,
}

/// A running watch over QEMU's gdbstub.
pub struct Watch {
    thread: JoinHandle<Result<Watched, GdbstubError>>,
    done: Arc<AtomicBool>,
}

impl Watch {
    /// Connects to QEMU (process `pid`) at `socket`, where it waits before the program's first
    /// instruction, and carries out `plan`. `dir` holds the plugin's counters file. Gives up
    /// waiting for the socket when `interrupted` is raised.
    pub fn start(
        socket: &Path,
        dir: &Path,
        pid: u32,
        plan: Plan,
        interrupted: &Interrupt,
    ) -> Result<Self, GdbstubError> {
        let stream = connect(socket, interrupted)?;
        let counters = read_counters(&dir.join(crate::qemu::report::files::COUNTERS))?;
        let guest_maps = dir.join(crate::qemu::report::files::GUEST_MAPS);
        let report = dir.join(crate::qemu::report::files::REPORT);
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let pid = Pid::from_raw(pid as i32);
        let thread = std::thread::Builder::new()
            .name("rtit-gdbstub".into())
            .spawn(move || {
                let program = Program::new(pid, counters, report, &plan);
                watch(Remote::new(stream), &guest_maps, program, &plan, &flag)
            })
            .map_err(GdbstubError::Io)?;
        Ok(Self { thread, done })
    }

    /// What was read, once QEMU has ended.
    pub fn finish(self) -> Result<Watched, GdbstubError> {
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().map_err(|_| GdbstubError::Panicked)?
    }
}

fn connect(socket: &Path, interrupted: &Interrupt) -> Result<UnixStream, GdbstubError> {
    let deadline = Instant::now() + CONNECT_WITHIN;
    loop {
        match UnixStream::connect(socket) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline || interrupted.is_set() => {
                return Err(GdbstubError::Connect {
                    path: socket.display().to_string(),
                    source: e,
                })
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn read_counters(path: &PathBuf) -> Result<Counters, GdbstubError> {
    let bad = |problem: String| GdbstubError::Counters {
        path: path.display().to_string(),
        problem,
    };
    let text = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))
}

/// A small xorshift: sample moments that no loop of the program can stay in step with, 3 to
/// 13 ms apart. Each sample stops QEMU and costs `check-values` a walk, so the gap bounds
/// both: about 120 samples a second of the program's run under `--truth`.
struct Jitter(u64);

impl Jitter {
    fn next(&mut self) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_micros(3_000 + self.0 % 10_000)
    }
}

/// What the thread needs to pass a signal on: the program, the plugin's counters, and where
/// the entries go.
struct Program {
    pid: Pid,
    counters: Counters,
    /// The plugin's report, written when the recording ends: where the program runs on
    /// after it (a thread or execve stopped the recording), nothing more is sampled or
    /// logged, and its signals are only passed on.
    report: PathBuf,
    /// The report was seen.
    ended: bool,
    only_kernel: bool,
    signals: Vec<SignalEntry>,
    told: Vec<usize>,
    /// The stop reply of the last stop the sampling signal made (which thread stopped).
    sample_stop: String,
    /// Whether rtit sends the sampling signal.
    sampling: bool,
    /// Whether a sampling signal was withheld while a handler was being reached.
    withheld: bool,
    /// The registers at the last signal the program did not handle.
    unhandled: Option<RegisterMap>,
}

impl Program {
    fn new(pid: Pid, counters: Counters, report: PathBuf, plan: &Plan) -> Self {
        Self {
            pid,
            counters,
            report,
            ended: false,
            only_kernel: plan.only_kernel,
            signals: Vec::new(),
            told: Vec::new(),
            sample_stop: String::new(),
            sampling: plan.sample || plan.anchors.is_some(),
            withheld: false,
            unhandled: None,
        }
    }

    /// Whether the recording has ended while the program runs on. Read while the program is
    /// stopped it is exact: the plugin writes the report on the vCPU's thread, the one that
    /// stops in QEMU's gdbstub, and no other vCPU runs before it ends (the recording stops
    /// before a second thread starts).
    fn recording_ended(&mut self) -> bool {
        self.ended = self.ended || self.report.exists();
        self.ended
    }

    /// Passes signal `s` on (logging its delivery to a handler); false if the program ended.
    /// While sampling, a sampling signal that comes meanwhile is withheld; the result says so.
    fn pass(&mut self, remote: &mut Remote, s: u8, done: &AtomicBool) -> Result<bool, GdbstubError> {
        let done = || done.load(Ordering::Relaxed);
        // After the recording's end a delivery is not the recording's: logged nowhere.
        let (mut unlogged, mut untold, mut unseen) = (Vec::new(), Vec::new(), None);
        let ended = self.recording_ended();
        let mut d = super::signals::Delivery {
            withhold: self.sampling.then_some(GDB_SAMPLE_SIGNAL),
            withheld: false,
            entries: if ended { &mut unlogged } else { &mut self.signals },
            told: if ended { &mut untold } else { &mut self.told },
            only_kernel: self.only_kernel,
            unhandled: if ended { &mut unseen } else { &mut self.unhandled },
        };
        let running = super::signals::deliver(remote, self.pid, &self.counters, s, &mut d, &done)?;
        self.withheld |= d.withheld;
        Ok(running)
    }
}

fn watch(
    mut remote: Remote,
    guest_maps: &Path,
    mut program: Program,
    plan: &Plan,
    done: &AtomicBool,
) -> Result<Watched, GdbstubError> {
    let pid = program.pid;
    let mut watched = Watched::default();
    let first = remote.request("?")?;
    if !matches!(stop(&first)?, Stop::Signal(_)) {
        return Ok(watched);
    }
    // Before the first instruction, where the plugin looks for it.
    if let Some(maps) = remote.guest_file("/proc/self/maps")? {
        std::fs::write(guest_maps, maps).map_err(GdbstubError::Io)?;
    }
    if plan.sample && plan.sample_entry {
        watched.samples.push((0, registers(&remote.request("g")?)?));
    }
    if let Some(start) = &plan.start {
        match run_to(&mut remote, start, || done.load(Ordering::Relaxed))? {
            Reached::Registers(regs) => watched.start = Some(Ok(regs)),
            Reached::Not(why) => watched.start = Some(Err(why)),
            Reached::Ended => return Ok(watched),
        }
    }
    remote.send("c")?;
    let mut anchors = match &plan.anchors {
        Some(a) => super::anchors::Anchors::new(a, pid, program.counters)?,
        None => None,
    };
    program.sampling = plan.sample || anchors.is_some();
    let samples = plan.sample.then_some(&mut watched.samples);
    watched.anchors_put_off = run(&mut remote, &mut program, done, samples, anchors.as_mut())?;
    watched.signals = program.signals;
    watched.told = program.told;
    watched.unhandled = program.unhandled;
    watched.anchors = anchors.map(super::anchors::Anchors::finish).transpose()?;
    Ok(watched)
}

/// How often the watch looks whether an anchor is due while the program runs.
const ANCHOR_POLL: Duration = Duration::from_millis(1);

/// Passes the program's signals on until it ends; meanwhile, with `samples`, samples the
/// registers at random moments, and with `anchors`, takes an anchor whenever one is due.
/// Returns how long anchors were put off while a thread waited inside QEMU.
fn run(
    remote: &mut Remote,
    program: &mut Program,
    done: &AtomicBool,
    mut samples: Option<&mut Vec<(u64, RegisterMap)>>,
    mut anchors: Option<&mut super::anchors::Anchors>,
) -> Result<Duration, GdbstubError> {
    // Since when an anchor due was put off, and for how long in all before.
    let (mut put_off, mut skipped) = (None::<Instant>, Duration::ZERO);
    let pid = program.pid;
    let mut jitter = Jitter(u64::from(pid.as_raw() as u32) | 1 << 40);
    let mut next_sample = samples.is_some().then(|| Instant::now() + jitter.next());
    loop {
        let now = Instant::now();
        let poll = if anchors.is_some() { ANCHOR_POLL } else { POLL };
        let wait = next_sample.map_or(poll, |t| t.saturating_duration_since(now).min(poll));
        match remote.receive(Some(wait))? {
            Received::Closed => return Ok(skipped + put_off.map_or(Duration::ZERO, |t| t.elapsed())),
            // The program's own signal (or its end) while it ran: passed on as it came.
            Received::Packet(reply) => match stop(&reply)? {
                Stop::Ended => return Ok(skipped + put_off.map_or(Duration::ZERO, |t| t.elapsed())),
                Stop::Signal(s) => {
                    if !program.pass(remote, s, done)? {
                        return Ok(skipped + put_off.map_or(Duration::ZERO, |t| t.elapsed()));
                    }
                    // No sampling signal is pending here: none can have been withheld.
                    program.withheld = false;
                }
            },
            Received::TimedOut => {
                if done.load(Ordering::Relaxed) {
                    return Ok(skipped + put_off.map_or(Duration::ZERO, |t| t.elapsed()));
                }
                let now = Instant::now();
                if program.recording_ended() {
                    // The program runs on unrecorded: its signals are still passed on.
                    (next_sample, anchors) = (None, None);
                    continue;
                }
                let sample = next_sample.is_some_and(|t| now >= t);
                let mut anchor = anchors.as_mut().is_some_and(|a| a.due());
                if sample {
                    next_sample = Some(now + jitter.next());
                }
                if let (true, Some(a)) = (anchor, anchors.as_mut()) {
                    // Parked where the plugin can (`Anchors::take_parked`). Where threads
                    // take turns, only so: a stop of QEMU's gdbstub can find the running
                    // thread inside a system call that ended its turn, whose block the
                    // engine places only once the thread runs again, and the plugin's
                    // position is then not where that thread is (an anchor had a worker's
                    // registers one position past its system call's).
                    if a.parks && a.take_parked()? {
                        if let Some(since) = put_off.take() {
                            skipped += since.elapsed();
                        }
                        anchor = false;
                    } else if super::guest::threaded(pid, program.counters) {
                        put_off.get_or_insert(now);
                        anchor = false;
                    }
                }
                if !(sample || anchor) {
                    continue;
                }
                if !super::guest::hold(pid, program.counters) {
                    // A thread waits for its turn inside QEMU: a stop now would never end
                    // (no sample so; where threads take turns an anchor was parked above, or
                    // put off). An anchor still due is tried again at the next look.
                    continue;
                }
                match super::guest::signal_outside_calls(pid, program.counters, SAMPLE_SIGNAL) {
                    Signalled::Sent => {}
                    // A signal inside a blocking call would make it fail in the program:
                    // tried again at a later look (an anchor still due at the next; the
                    // program runs no instruction while it blocks, so none is put off).
                    Signalled::InsideCall => {
                        super::guest::release(pid, program.counters);
                        continue;
                    }
                    Signalled::Gone => return Ok(skipped + put_off.map_or(Duration::ZERO, |t| t.elapsed())),
                }
                if let (true, Some(since)) = (anchor, put_off.take()) {
                    skipped += since.elapsed();
                }
                match our_stop(remote, program, done)? {
                    None => return Ok(skipped + put_off.map_or(Duration::ZERO, |t| t.elapsed())),
                    // It came while the program's own signal was being delivered: neither.
                    Some(false) => {}
                    // The recording ended meanwhile: nothing of it to read.
                    Some(true) if program.recording_ended() => remote.send("c")?,
                    // A thread waiting for its turn stopped: the plugin's position is not
                    // where it is.
                    Some(true) if !super::guest::stopped_runs(pid, program.counters, &program.sample_stop) => {
                        remote.send("c")?
                    }
                    Some(true) => {
                        if let (true, Some(samples)) = (sample, samples.as_mut()) {
                            let regs = registers(&remote.request("g")?)?;
                            let at = super::guest::position(pid, program.counters, register(&regs, "rip"));
                            if let Some(at) = at {
                                samples.push((at, regs));
                            }
                        }
                        if let (true, Some(anchors)) = (anchor, anchors.as_mut()) {
                            anchors.take(remote)?;
                        }
                        remote.send("c")?;
                    }
                }
                // QEMU 10.0 flushes its translations once the program goes on from the stop,
                // while every thread is outside its execution loop (no thread is interrupted
                // until then).
                std::thread::sleep(HOLD_AFTER);
                super::guest::release(pid, program.counters);
            }
        }
    }
}

/// How long the plugin interrupts no thread after a stop rtit made ([`super::guest::hold`]).
const HOLD_AFTER: Duration = Duration::from_millis(5);

/// Waits for the stop the sample signal causes, passing the program's own signals on: true
/// at it, false if it was withheld while one of those was delivered (the program runs on);
/// `None` if the program ended first.
fn our_stop(remote: &mut Remote, program: &mut Program, done: &AtomicBool) -> Result<Option<bool>, GdbstubError> {
    loop {
        match remote.receive(Some(POLL))? {
            Received::Closed => return Ok(None),
            Received::TimedOut if done.load(Ordering::Relaxed) => return Ok(None),
            Received::TimedOut => {}
            Received::Packet(reply) => match stop(&reply)? {
                Stop::Ended => return Ok(None),
                Stop::Signal(GDB_SAMPLE_SIGNAL) => {
                    program.sample_stop = reply;
                    return Ok(Some(true));
                }
                Stop::Signal(s) => {
                    if !program.pass(remote, s, done)? {
                        return Ok(None);
                    }
                    if std::mem::take(&mut program.withheld) {
                        return Ok(Some(false));
                    }
                }
            },
        }
    }
}

//! The traced program under the msr backend: started stopped under ptrace, pinned to the
//! traced CPU, then let run at full speed (the hardware traces it). ptrace stops it at every
//! system call's entry and exit, where rtit logs what the call returned and wrote (and any map
//! change), at each signal handler's entry, where it logs the registers and the frame the
//! kernel wrote, and at its exit, where it reads the end state: the step backend's sideband,
//! which no trace holds. Each of those stops is a place in the trace (`Ran::Sideband`).

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use rtit_replay_core::recording::{EndState, MapChange, Mapping, SignalEntry};
use rtit_replay_core::syscall::{MemoryWrite, SyscallRecord};

use super::session::{Ran, Target};
use crate::outcome::RegisterMap;
use crate::sideband::{diff, nr, Images, Snapshot};
use crate::step::sideband as step_sideband;
use crate::step::tracee::Tracee;
use crate::step::{check_executable, regs_map, resolve, StartAt, StepError};

/// The state of the program when tracing started or ended.
#[derive(Debug, Default, Clone)]
pub struct Moment {
    /// Registers by name.
    pub registers: RegisterMap,
    /// The memory map.
    pub maps: Vec<Mapping>,
    /// Writable memory.
    pub memory: Snapshot,
}

/// A change of the memory map, with the whole map after it.
#[derive(Debug, Clone)]
pub struct MapStop {
    /// The change (its position is found later, from the trace offset of the stop).
    pub change: MapChange,
    /// The map after it.
    pub after: Vec<Mapping>,
}

/// What a sideband stop holds; its position is found later from its trace offset.
#[derive(Debug, Clone)]
pub enum Stop {
    /// A system call returned: its log record, and the change of the map it made.
    Syscall {
        /// The record (its position not yet known).
        record: Box<SyscallRecord>,
        /// The map change, if any.
        change: Option<MapStop>,
    },
    /// A signal handler is about to run: its registers and frame.
    Signal(Box<SignalEntry>),
}

/// A program under ptrace, for the msr backend.
pub struct PtraceTarget {
    tracee: Tracee,
    running: bool,
    /// Between a system-call-entry stop and its exit stop: the call's number and the
    /// registers at its entry.
    in_syscall: Option<(u64, crate::step::Regs)>,
    /// The memory map as last read.
    current_map: Vec<Mapping>,
    /// The sideband stops while tracing, in order.
    pub stops: Vec<Stop>,
    /// Whether code outside the IP filter runs untraced (then a signal delivery may follow
    /// user code the trace does not show).
    pub filtered: bool,
    /// The images its code may run from, noted at the start, at each change and at the end.
    pub images: Images,
    /// A signal to deliver when it next continues.
    pending: Option<Signal>,
    /// When tracing started.
    pub start: Option<Moment>,
    /// At its exit (PTRACE_EVENT_EXIT).
    pub end: Option<Moment>,
    /// The last fatal-looking signal it got, with the faulting address and IP.
    fault: Option<(Signal, u64, u64)>,
    /// What to warn the user about the program (set-user-ID...).
    pub warnings: Vec<String>,
}

impl PtraceTarget {
    /// Starts `program` stopped at `start` (run to natively), pinned to `cpu`.
    pub fn spawn(
        program: &Path,
        args: &[OsString],
        aslr: bool,
        cpu: usize,
        start: &StartAt,
        interrupted: &crate::interrupt::Interrupt,
    ) -> Result<Self, StepError> {
        let program = resolve(program)?;
        let warnings = check_executable(&program, args)?;
        let tracee = Tracee::spawn(&program, args, aslr)?;
        let options = ptrace::Options::PTRACE_O_EXITKILL
            | ptrace::Options::PTRACE_O_TRACEEXIT
            | ptrace::Options::PTRACE_O_TRACESYSGOOD;
        ptrace::setoptions(tracee.pid, options).map_err(|e| StepError::Ptrace(format!("PTRACE_SETOPTIONS: {e}")))?;
        super::linux::pin(tracee.pid, cpu).map_err(StepError::Ptrace)?;
        crate::step::run_to(&tracee, start, options, interrupted)?;
        Ok(Self {
            tracee,
            running: false,
            in_syscall: None,
            current_map: Vec::new(),
            stops: Vec::new(),
            filtered: false,
            images: Images::default(),
            pending: None,
            start: None,
            end: None,
            fault: None,
            warnings,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> nix::unistd::Pid {
        self.tracee.pid
    }

    /// Registers (vector registers and XCR0's components included), map and memory now (it
    /// must be stopped).
    pub fn moment(&self) -> Result<Moment, StepError> {
        let maps = self.tracee.maps()?;
        let mut registers = regs_map(&self.tracee.regs()?);
        registers.extend(self.tracee.vectors()?.0);
        Ok(Moment {
            registers,
            memory: step_sideband::snapshot(&self.tracee, &maps),
            maps,
        })
    }

    /// XCR0, as the kernel reports it (it must be stopped).
    pub fn xcr0(&self) -> Option<u64> {
        self.tracee.vectors().ok().and_then(|v| v.1)
    }

    /// At a system call's entry stop, a call the recording cannot follow (a thread, execve),
    /// with the program's state there noted as the recording's end: a second thread on the
    /// traced CPU would land in the same stream with no switch marked (issue 43). The call
    /// has not run: `rax` still holds its number (the kernel shows -ENOSYS at the stop).
    fn unfollowed(&mut self) -> Result<Option<&'static str>, StepError> {
        if self.in_syscall.is_some() {
            return Ok(None);
        }
        let regs = self.tracee.regs()?;
        let reason = crate::unfollowed::at_syscall(regs.orig_rax, regs.rdi, |at| {
            let mut flags = [0u8; 8];
            (self.tracee.read(at, &mut flags) == 8).then(|| u64::from_le_bytes(flags))
        });
        if reason.is_some() {
            let mut end = self.moment()?;
            end.registers.insert("rax".into(), format!("{:#x}", regs.orig_rax));
            self.images.note(&end.maps);
            self.end = Some(end);
        }
        Ok(reason)
    }

    /// After a recording that stopped at [`Self::unfollowed`], with tracing off: the
    /// program runs on to its end, untraced and no longer pinned, and this says how it ended.
    pub fn run_on(&mut self, interrupted: &crate::interrupt::Interrupt) -> Option<EndState> {
        let _ = super::linux::unpin(self.tracee.pid);
        crate::step::run_on(self.tracee.pid, interrupted)
    }

    /// At a system-call stop: at an exit, the call's log record and the map change it made.
    fn syscall_stop(&mut self) -> Result<Option<Stop>, StepError> {
        let regs = self.tracee.regs()?;
        let Some((nr, before)) = self.in_syscall.take() else {
            self.in_syscall = Some((regs.orig_rax, regs));
            return Ok(None);
        };
        // At the entry stop rip is past the two-byte `syscall`.
        let ip = before.rip.wrapping_sub(2);
        let record = crate::step::syscall_log::record(&self.tracee, 0, ip, nr, &before, &regs);
        let mut change = None;
        if nr::changes_map(nr) {
            let now = self.tracee.maps()?;
            // The position is not known here; it comes from the trace offset of this stop.
            let mapped = crate::sideband::mapped(nr, before.rsi, regs.rax);
            change = diff(&self.current_map, &now, 0, nr, mapped).map(|change| MapStop {
                change,
                after: now.clone(),
            });
            self.current_map = now;
        }
        Ok(Some(Stop::Syscall {
            record: Box::new(record),
            change,
        }))
    }

    /// At a signal stop for a signal the program handles: lets the kernel deliver it with a
    /// single step, which stops at the handler's first instruction before it runs, and logs
    /// the registers and the frame there.
    fn signal_entry(&mut self, signal: Signal) -> Result<Stop, StepError> {
        let pid = self.tracee.pid;
        ptrace::step(pid, Some(signal)).map_err(|e| StepError::Ptrace(format!("PTRACE_SINGLESTEP: {e}")))?;
        match waitpid(pid, None) {
            Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => {}
            other => return Err(StepError::Ptrace(format!("delivering {signal}: {other:?}"))),
        }
        let regs = self.tracee.regs()?;
        let mut registers = regs_map(&regs);
        registers.extend(self.tracee.vectors()?.0);
        let mut frame = vec![0u8; crate::step::SIGNAL_FRAME_BOUND];
        let n = self.tracee.read(regs.rsp, &mut frame);
        Ok(Stop::Signal(Box::new(SignalEntry {
            position: 0,
            ip: regs.rip,
            registers,
            frame: MemoryWrite::new(regs.rsp, &frame[..n]),
            only_kernel: !self.filtered,
            switch: None,
        })))
    }

    fn ended(&self, status: WaitStatus) -> Option<EndState> {
        match status {
            WaitStatus::Exited(_, code) => Some(EndState::Exited { code }),
            WaitStatus::Signaled(_, signal, _) => Some(match self.fault {
                Some((sig, addr, ip)) if sig == signal => EndState::Signaled {
                    signal: signal as i32,
                    name: signal.as_str().to_string(),
                    address: Some(format!("{addr:#x}")),
                    ip: Some(format!("{ip:#x}")),
                },
                _ => EndState::Signaled {
                    signal: signal as i32,
                    name: signal.as_str().to_string(),
                    address: None,
                    ip: None,
                },
            }),
            _ => None,
        }
    }
}

impl Target for PtraceTarget {
    type Error = StepError;

    fn next_ip(&mut self) -> Result<u64, StepError> {
        Ok(self.tracee.regs()?.rip)
    }

    fn step(&mut self) -> Result<(), StepError> {
        ptrace::step(self.tracee.pid, None).map_err(|e| StepError::Ptrace(format!("PTRACE_SINGLESTEP: {e}")))?;
        match waitpid(self.tracee.pid, None) {
            Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => Ok(()),
            other => Err(StepError::Ptrace(format!("single step: {other:?}"))),
        }
    }

    fn run(&mut self, slice: Duration) -> Result<Ran, StepError> {
        let pid = self.tracee.pid;
        let until = Instant::now() + slice;
        loop {
            if !self.running {
                // Stops at every system call's entry and exit, to log it.
                ptrace::syscall(pid, self.pending.take())
                    .map_err(|e| StepError::Ptrace(format!("PTRACE_SYSCALL: {e}")))?;
                self.running = true;
            }
            let status =
                waitpid(pid, Some(WaitPidFlag::WNOHANG)).map_err(|e| StepError::Ptrace(format!("waitpid: {e}")))?;
            match status {
                WaitStatus::StillAlive => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(Ran::Slice);
                    }
                    std::thread::sleep(left.min(Duration::from_millis(1)));
                }
                WaitStatus::PtraceSyscall(_) => {
                    self.running = false;
                    if let Some(reason) = self.unfollowed()? {
                        return Ok(Ran::Ended(EndState::Unsupported {
                            reason: reason.to_string(),
                            afterwards: None,
                        }));
                    }
                    if let Some(stop) = self.syscall_stop()? {
                        if let Stop::Syscall { change: Some(c), .. } = &stop {
                            self.images.note(&c.change.added);
                        }
                        self.stops.push(stop);
                        return Ok(Ran::Sideband);
                    }
                }
                WaitStatus::PtraceEvent(_, _, event) if event == ptrace::Event::PTRACE_EVENT_EXIT as i32 => {
                    self.running = false;
                    let end = self.moment()?;
                    self.images.note(&end.maps);
                    self.end = Some(end);
                }
                WaitStatus::Stopped(_, signal) => {
                    self.running = false;
                    if matches!(
                        signal,
                        Signal::SIGSEGV | Signal::SIGBUS | Signal::SIGILL | Signal::SIGFPE
                    ) {
                        let addr = ptrace::getsiginfo(pid)
                            .map(|i| {
                                // SAFETY: for these signals the kernel fills si_addr.
                                #[allow(unsafe_code)]
                                unsafe {
                                    i.si_addr() as u64
                                }
                            })
                            .unwrap_or(0);
                        self.fault = Some((signal, addr, self.tracee.regs()?.rip));
                    }
                    let (caught, _) = self.tracee.disposition(signal);
                    if caught && !matches!(signal, Signal::SIGSTOP | Signal::SIGKILL) {
                        let entry = self.signal_entry(signal)?;
                        self.stops.push(entry);
                        return Ok(Ran::Sideband);
                    }
                    self.pending = Some(signal);
                }
                other => {
                    if let Some(end) = self.ended(other) {
                        return Ok(Ran::Ended(end));
                    }
                    self.running = false;
                }
            }
        }
    }

    fn starting(&mut self) -> Result<(), StepError> {
        let start = self.moment()?;
        self.images = step_sideband::images_from_maps(&self.tracee, &start.maps);
        self.current_map = start.maps.clone();
        self.start = Some(start);
        Ok(())
    }

    fn kill(&mut self) {
        let _ = nix::sys::signal::kill(self.tracee.pid, Signal::SIGKILL);
        let _ = waitpid(self.tracee.pid, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ptrace half of the backend runs here (no RTIT needed): a program started stopped,
    /// stepped once, run to its end in slices, with its end state read at the exit.
    #[test]
    fn a_program_runs_in_slices_to_its_exit() {
        let mut t = PtraceTarget::spawn(
            Path::new("/bin/sh"),
            &["-c".into(), "exit 7".into()],
            false,
            0,
            &StartAt::Entry,
            &crate::interrupt::Interrupt::new(),
        )
        .expect("spawn");
        let first = t.next_ip().expect("ip");
        t.step().expect("step");
        assert_ne!(t.next_ip().expect("ip"), first, "one instruction executed");
        t.starting().expect("start state");
        let end = loop {
            match t.run(Duration::from_millis(5)).expect("run") {
                Ran::Ended(end) => break end,
                Ran::Sideband | Ran::Slice => {}
            }
        };
        assert_eq!(end, EndState::Exited { code: 7 });
        let at_exit = t.end.expect("exit stop seen");
        assert!(at_exit.registers.contains_key("rip"));
        assert!(at_exit.maps.iter().any(|m| m.path.as_deref() == Some("[stack]")));
        // Every system call is logged; the dynamic loader mapped the C library: changes, each
        // seen at its system call.
        let changes: Vec<&MapStop> = t
            .stops
            .iter()
            .filter_map(|s| match s {
                Stop::Syscall { change, .. } => change.as_ref(),
                Stop::Signal(_) => None,
            })
            .collect();
        let calls = t.stops.iter().filter(|s| matches!(s, Stop::Syscall { .. })).count();
        assert!(calls > changes.len(), "every call, not only map changes: {calls}");
        assert!(!changes.is_empty());
        for stop in &changes {
            assert!(stop.change.added.iter().all(|m| stop.after.contains(m)), "{stop:?}");
            assert!(["mmap", "mprotect", "munmap", "brk", "mremap"].contains(&stop.change.syscall.as_str()));
        }
        assert!(changes.iter().any(|s| s
            .change
            .added
            .iter()
            .any(|m| m.path.as_deref().is_some_and(|p| p.contains("libc")))));
        assert!(t.images.files().any(|(p, _)| p.contains("libc")), "noted as an image");
    }

    /// Runs `program` with `args` from its entry until the recording's end.
    fn run_to_end(program: &str, args: &[&str]) -> (PtraceTarget, EndState) {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let mut t = PtraceTarget::spawn(
            Path::new(program),
            &args,
            false,
            0,
            &StartAt::Entry,
            &crate::interrupt::Interrupt::new(),
        )
        .expect("spawn");
        t.starting().expect("start state");
        let end = loop {
            match t.run(Duration::from_millis(5)).expect("run") {
                Ran::Ended(end) => break end,
                Ran::Sideband | Ran::Slice => {}
            }
        };
        (t, end)
    }

    /// execve and a thread end the recording at the call's entry (a second thread would
    /// share the traced CPU's stream, unmarked), with the state there; then the program runs
    /// on to its own end (issue 43).
    #[test]
    fn execve_and_threads_end_the_recording_and_the_program_runs_on() {
        let (mut t, end) = run_to_end("/bin/sh", &["-c", "exec /bin/sh -c 'exit 4'"]);
        assert_eq!(
            end,
            EndState::Unsupported {
                reason: crate::unfollowed::EXECVE.into(),
                afterwards: None
            }
        );
        let at = t.end.as_ref().expect("the state at the call");
        assert_eq!(
            at.registers.get("rax").map(String::as_str),
            Some("0x3b"),
            "execve's number, not -ENOSYS"
        );
        let interrupted = crate::interrupt::Interrupt::new();
        assert_eq!(t.run_on(&interrupted), Some(EndState::Exited { code: 4 }));

        let python = "import threading; t = threading.Thread(target=print, args=('x',)); t.start(); t.join(); raise SystemExit(6)";
        let (mut t, end) = run_to_end("/usr/bin/python3", &["-c", python]);
        assert!(
            matches!(&end, EndState::Unsupported { reason, .. } if reason == crate::unfollowed::THREAD),
            "{end:?}"
        );
        assert_eq!(t.run_on(&interrupted), Some(EndState::Exited { code: 6 }));
    }

    /// A caught signal stops the target at its handler's entry, where the registers and the
    /// frame are logged.
    #[test]
    fn a_caught_signal_is_logged_at_the_handlers_entry() {
        let (t, end) = run_to_end("/bin/sh", &["-c", "trap 'exit 3' USR1; kill -USR1 $$; sleep 5"]);
        assert_eq!(end, EndState::Exited { code: 3 }, "the handler ran");
        let entries: Vec<&SignalEntry> = t
            .stops
            .iter()
            .filter_map(|s| match s {
                Stop::Signal(e) => Some(&**e),
                Stop::Syscall { .. } => None,
            })
            .collect();
        assert_eq!(entries.len(), 1, "one delivery");
        let e = entries[0];
        assert_eq!(e.registers["rdi"], "0xa", "the handler's first argument: SIGUSR1");
        assert_eq!(e.registers["rip"], format!("{:#x}", e.ip));
        assert_eq!(e.registers["rsp"], format!("{:#x}", e.frame.address));
        assert!(e.frame.data().is_some_and(|f| f.len() > 512), "the frame");
        assert!(e.only_kernel);
        assert!(e.registers.contains_key("mxcsr"), "vector state too");
    }
}

//! The traced program under the msr backend: started stopped under ptrace, pinned to the
//! traced CPU, then let run at full speed (the hardware traces it); ptrace only reports its
//! signals and its exit, where rtit reads the end state. The sideband is the step backend's:
//! maps, images, registers and memory at the start and at the end.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use rtit_replay_core::recording::{EndState, MapChange, Mapping};

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

/// A program under ptrace, for the msr backend.
pub struct PtraceTarget {
    tracee: Tracee,
    running: bool,
    /// Between a system-call-entry stop and its exit stop, with the call's number.
    in_syscall: Option<u64>,
    /// The memory map as last read.
    current_map: Vec<Mapping>,
    /// The changes of the map while tracing, in order.
    pub changes: Vec<MapStop>,
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
    ) -> Result<Self, StepError> {
        let program = resolve(program)?;
        let warnings = check_executable(&program)?;
        let tracee = Tracee::spawn(&program, args, aslr)?;
        ptrace::setoptions(
            tracee.pid,
            ptrace::Options::PTRACE_O_EXITKILL
                | ptrace::Options::PTRACE_O_TRACEEXIT
                | ptrace::Options::PTRACE_O_TRACESYSGOOD,
        )
        .map_err(|e| StepError::Ptrace(format!("PTRACE_SETOPTIONS: {e}")))?;
        super::linux::pin(tracee.pid, cpu).map_err(StepError::Ptrace)?;
        crate::step::run_to(&tracee, start)?;
        Ok(Self {
            tracee,
            running: false,
            in_syscall: None,
            current_map: Vec::new(),
            changes: Vec::new(),
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

    /// Registers, map and memory now (it must be stopped).
    pub fn moment(&self) -> Result<Moment, StepError> {
        let maps = self.tracee.maps()?;
        Ok(Moment {
            registers: regs_map(&self.tracee.regs()?),
            memory: step_sideband::snapshot(&self.tracee, &maps),
            maps,
        })
    }

    /// At a system-call stop: at the exit of one that changed the map, the change.
    fn syscall_stop(&mut self) -> Result<Option<MapChange>, StepError> {
        let Some(nr) = self.in_syscall.take() else {
            self.in_syscall = Some(self.tracee.regs()?.orig_rax);
            return Ok(None);
        };
        if !nr::changes_map(nr) {
            return Ok(None);
        }
        let now = self.tracee.maps()?;
        // The position is not known here; it comes from the trace offset of this stop.
        let change = diff(&self.current_map, &now, 0, nr);
        self.current_map = now;
        Ok(change)
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
                // Stops at every system call's entry and exit, to see map changes.
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
                    if let Some(change) = self.syscall_stop()? {
                        self.images.note(&change.added);
                        self.changes.push(MapStop {
                            change,
                            after: self.current_map.clone(),
                        });
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
        // The dynamic loader mapped the C library: changes, each seen at its system call.
        assert!(!t.changes.is_empty());
        for stop in &t.changes {
            assert!(stop.change.added.iter().all(|m| stop.after.contains(m)), "{stop:?}");
            assert!(["mmap", "mprotect", "munmap", "brk", "mremap"].contains(&stop.change.syscall.as_str()));
        }
        assert!(t.changes.iter().any(|s| s
            .change
            .added
            .iter()
            .any(|m| m.path.as_deref().is_some_and(|p| p.contains("libc")))));
        assert!(t.images.files().any(|(p, _)| p.contains("libc")), "noted as an image");
    }
}

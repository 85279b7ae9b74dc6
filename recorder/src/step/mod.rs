//! The step backend: runs a program under ptrace, single-steps every user instruction and
//! feeds the unit model what retired, under the design card's configuration (user-only, CR3
//! filter, RET compression). Exact everywhere, slow (every instruction is a ptrace stop).
//!
//! Retirement under ptrace (the rules the issue lists):
//! - a single-step stop (SIGTRAP) retires the instruction at the previous RIP; a REP string
//!   instruction stops after every iteration with the same RIP and retires once, when RIP
//!   moves on;
//! - a fault stop (SIGSEGV, SIGBUS, SIGFPE, SIGILL sent by the kernel) retires nothing: the
//!   instruction faulted, a far transfer from its own address (FUP.PGD under user-only);
//! - another signal is an interrupt at the next instruction; if RIP moved, the instruction
//!   before it retired first (a system call that raised the signal);
//! - delivering a caught signal stops again at the handler having retired nothing: the kernel
//!   entered user mode there (FUP.PGE); an ignored signal changes nothing; a fatal one ends it;
//! - a system call is a far transfer into the kernel and, when it returns, out of it;
//!   `exit_group` ends the recording; an `execve` that runs an x86-64 program ends it too, and
//!   the new program's recording starts at its first instruction (`exec`); an `execve` of
//!   what rtit cannot record, or with threads running, stops it, unsupported, and the program
//!   runs on to its end untraced (`run_on`).

mod exec;
mod insn;
mod recorder;
mod run_on;
mod run_to;
pub(crate) use run_on::run_on;
pub(crate) use run_to::run_to;
pub(crate) mod sideband;
pub(crate) mod syscall_log;
mod threads;
pub(crate) mod tracee;
mod vdso;

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::WaitStatus;
use rtit_replay_core::cofi::{Cofi, FarKind};
use rtit_replay_core::recording::{EndState, InsnResult, Maps, SignalEntry, TraceEndRecord};
use rtit_replay_core::regs::msr;
use rtit_replay_core::syscall::{MemoryWrite, SyscallRecord};

use crate::exec::Target;
use crate::interrupt::Interrupt;
use crate::model::{CpuState, Input, ModelError, ModelOptions, Retired, RtitConfig, UnitModel};
use crate::outcome::{Outcome, Truth};
use crate::sideband::{nr, Snapshot};
pub use exec::{Next, Part};
use insn::{decode, Insn};
use recorder::Recorder;
use threads::{Held, Threads, Waiting};
use tracee::Tracee;
pub use tracee::{check_executable, privilege_warning, regs_map, resolve, Regs};

/// Where the untraced kernel is, for the model's far transfers; no packet ever carries it.
const KERNEL: u64 = 0xffff_ffff_8100_0000;

/// A failure to record.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The program cannot be recorded.
    #[error("{program}: {problem}")]
    Program {
        /// The program.
        program: String,
        /// What is wrong.
        problem: String,
    },
    /// A ptrace or /proc operation failed.
    #[error("ptrace: {0}")]
    Ptrace(String),
    /// The start point is unknown or never reached.
    #[error("--start {at}: {problem}")]
    Start {
        /// The start point given.
        at: String,
        /// What is wrong.
        problem: String,
    },
    /// The unit model refused the configuration.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// rtit record received a signal before tracing started.
    #[error(transparent)]
    Interrupted(#[from] crate::interrupt::Stopped),
}

/// Where tracing starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartAt {
    /// The first instruction after execve (the dynamic loader's, for a dynamic program).
    Entry,
    /// A symbol of the executable, run to natively.
    Symbol(String),
    /// An address, run to natively.
    Address(u64),
}

/// What to record and how.
pub struct StepOptions {
    /// The program (found on PATH if it has no slash).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Leave ASLR on.
    pub aslr: bool,
    /// Where tracing starts.
    pub start: StartAt,
    /// RTIT configuration (RTIT_CR3_MATCH is set to the process's CR3).
    pub config: RtitConfig,
    /// Unit model options.
    pub model: ModelOptions,
    /// Keep every retired instruction address.
    pub truth: bool,
    /// Set by a signal handler to stop recording.
    pub interrupted: Interrupt,
    /// Called every 2^16 instructions with the count so far.
    pub progress: Option<Box<dyn FnMut(u64)>>,
}

/// Registers are sampled for the truth every this many positions: a prime, so samples do not
/// fall on the same instruction of every loop iteration.
const TRUTH_SAMPLE_INTERVAL: u64 = 97;

/// Bytes of stack logged at a signal handler's entry: the frame (return address, siginfo,
/// ucontext, and the XSAVE area, up to 11 KiB with AMX) and whatever lies above it.
pub(crate) const SIGNAL_FRAME_BOUND: usize = 16 << 10;

/// Signals whose default action is to do nothing.
fn ignored_by_default(sig: Signal) -> bool {
    matches!(
        sig,
        Signal::SIGCHLD | Signal::SIGURG | Signal::SIGWINCH | Signal::SIGCONT
    )
}

/// Records a program; if it runs execve, the part returned holds the next program to record.
pub fn record(opts: StepOptions) -> Result<Part, StepError> {
    let program = resolve(&opts.program)?;
    let warnings = check_executable(&program, &opts.args)?;
    opts.interrupted.check(|| "starting the program".into())?;
    // `--start SYMBOL` applies to every program of the run that defines it: a script's
    // interpreter that does not is recorded whole, if it runs another program.
    let elsewhere = match &opts.start {
        StartAt::Symbol(name) => crate::exec::start_elsewhere(&program, &opts.args, name)
            .map_err(|problem| StepError::Start {
                at: name.clone(),
                problem,
            })?
            .map(|interpreter| (name.clone(), interpreter)),
        _ => None,
    };
    let first = if elsewhere.is_some() {
        StartAt::Entry
    } else {
        opts.start.clone()
    };
    let tracee = Tracee::spawn(&program, &opts.args, opts.aslr)?;
    let regs_start = run_to(&tracee, &first, tracee::OPTIONS, &opts.interrupted)?;
    let mut part = record_from(tracee, regs_start, opts, warnings)?;
    if let Some((name, interpreter)) = elsewhere {
        let named = interpreter.display().to_string();
        if part.next.is_none() {
            return Err(StepError::Start {
                at: name,
                problem: format!("{named} does not define it"),
            });
        }
        part.outcome.warnings.push(crate::exec::start_warning(&name, &named));
    }
    Ok(part)
}

/// Records the program `tracee` stands in, from `regs_start`.
fn record_from(tracee: Tracee, regs_start: Regs, opts: StepOptions, warnings: Vec<String>) -> Result<Part, StepError> {
    let (vectors_start, xcr0) = tracee.vectors()?;
    let start_ip = regs_start.rip;
    let cr3 = (u64::from(tracee.pid.as_raw() as u32) << 12) & ((1 << 36) - 1);
    let config = RtitConfig {
        cr3_match: cr3,
        ..opts.config
    };
    let mut model = UnitModel::new(CpuState::user(start_ip, cr3), opts.model);
    model.program(&config)?;
    let initial = tracee.maps()?;
    let images = sideband::images_from_maps(&tracee, &initial);
    let memory_start = sideband::snapshot(&tracee, &initial);
    let mut rec = Recorder {
        tracee,
        model,
        cache: HashMap::new(),
        retired: 0,
        truth: opts.truth.then(Truth::default),
        maps: Maps {
            initial: initial.clone(),
            changes: Vec::new(),
        },
        current_map: initial,
        images,
        syscalls: Vec::new(),
        results: Vec::new(),
        signals: Vec::new(),
        children: Vec::new(),
        progress: opts.progress,
        sample_next: false,
        vectors_before: None,
        untraced_since_traced: false,
    };
    let pid = rec.tracee.pid;
    let mut regs = regs_start;
    let mut regs_end = regs_start;
    let mut pending: Option<Signal> = None;
    // The registers where the REP string instruction being stepped started, after its first
    // iteration (each iteration is a single step).
    let mut rep_start: Option<Regs> = None;
    let mut entering_handler = false;
    let mut fault: Option<(Signal, u64, u64)> = None;
    let mut memory_end = Snapshot::default();
    // The threads that wait for their turn, and the instructions the stepped one ran in its
    // turn; a step that ended while its thread waited, taken as it resumes.
    let mut threads = Threads::default();
    let mut turn = 0u64;
    let mut resumed: Option<(Insn, u64, WaitStatus)> = None;
    // The new program's command line, once execve ran one.
    let mut exec_argv: Option<Vec<OsString>> = None;
    // The file the last execve named (absolute), which the recording names if it ran.
    let mut exec_path: Option<PathBuf> = None;
    let end = loop {
        if opts.interrupted.is_set() {
            regs_end = regs;
            memory_end = sideband::snapshot(&rec.tracee, &rec.current_map);
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
            threads::reap(threads.tids().into_iter().chain([rec.tracee.pid]), pid);
            break opts.interrupted.end_state();
        }
        let tid = rec.tracee.pid;
        let ip = regs.rip;
        let (insn, syscall_nr, status) = if let Some(r) = resumed.take() {
            r
        } else {
            let insn = decode(&rec.tracee, &mut rec.cache, ip);
            let syscall_nr = if insn.cofi == Cofi::Far(FarKind::Syscall) {
                regs.rax
            } else {
                u64::MAX
            };
            if pending.is_none() {
                let unsupported = match syscall_nr {
                    nr::EXECVE | nr::EXECVEAT => match exec::target(&rec.tracee, syscall_nr, &regs) {
                        (Target::Unsupported(why), _) => Some(format!("the program calls execve, which {why}")),
                        // execve ends every other thread; rtit does not follow that yet.
                        (Target::Follow(_), _) if threads.any() => Some(crate::unfollowed::EXECVE_THREADS.to_string()),
                        // The old program's last look, in case the call succeeds (a failing
                        // one goes on, and its end is looked at again).
                        (Target::Follow(_) | Target::Fails, path) => {
                            exec_path = path;
                            regs_end = regs;
                            memory_end = sideband::snapshot(&rec.tracee, &rec.current_map);
                            None
                        }
                    },
                    nr::EXIT | nr::EXIT_GROUP => {
                        regs_end = regs;
                        memory_end = sideband::snapshot(&rec.tracee, &rec.current_map);
                        None
                    }
                    _ => None,
                };
                if let Some(reason) = unsupported {
                    regs_end = regs;
                    memory_end = sideband::snapshot(&rec.tracee, &rec.current_map);
                    // execve ends every other thread; they are let go first.
                    for t in threads.tids() {
                        let _ = ptrace::detach(t, None);
                    }
                    break EndState::Unsupported {
                        reason,
                        afterwards: run_on(tid, &opts.interrupted).map(Box::new),
                    };
                }
                // The turn is over: the next thread that can run gets one (not in the middle of a
                // REP string instruction or a signal's delivery).
                if turn >= threads::SLICE && rep_start.is_none() && !entering_handler {
                    turn = 0;
                    if let Some(next) = threads.take_ready()? {
                        let held = Held {
                            tracee: rec.tracee.thread(tid)?,
                            regs,
                            pending: None,
                        };
                        threads.wait(Waiting { held, flight: None });
                        (regs, pending, resumed) = rec.switch_to(next, true)?;
                        continue;
                    }
                }
            }
            if rec.sample_due() {
                rec.vectors_before = Some(rec.tracee.vectors()?.0);
            }
            // sched_yield: the thread lets the others run, so its turn ends after it.
            if syscall_nr == nr::SCHED_YIELD {
                turn = threads::SLICE;
            }
            ptrace::step(tid, pending.take()).map_err(|e| StepError::Ptrace(format!("PTRACE_SINGLESTEP: {e}")))?;
            let status = loop {
                let patience = threads::patience(syscall_nr, &regs);
                match threads::wait_step(tid, threads.any(), patience, syscall_nr != u64::MAX, &opts.interrupted)? {
                    Some(status) => match threads::clone_event(tid, &status)? {
                        Some(new) => {
                            threads.created(&rec.tracee, new)?;
                            if let Some(at) = threads::clear_tid(&rec.tracee, syscall_nr, &regs) {
                                threads.clear_tids.insert(new, at);
                            }
                            ptrace::step(tid, None)
                                .map_err(|e| StepError::Ptrace(format!("PTRACE_SINGLESTEP: {e}")))?;
                        }
                        None => break Some(status),
                    },
                    None => break None,
                }
            };
            let Some(status) = status else {
                if !threads.any() {
                    // rtit was asked to stop while the only thread waits in a system call:
                    // the top of the loop ends the recording before the call.
                    continue;
                }
                // Blocked in the kernel (a system call waiting for another thread): it waits
                // with its step under way, and the next thread that can run does.
                let held = Held {
                    tracee: rec.tracee.thread(tid)?,
                    regs,
                    pending: None,
                };
                threads.wait(Waiting {
                    held,
                    flight: Some((insn, syscall_nr, None)),
                });
                // `None` only when rtit was asked to stop meanwhile (the blocked thread
                // itself waits): the top of the loop ends the recording.
                let Some(next) = threads.next(&opts.interrupted)? else {
                    continue;
                };
                turn = 0;
                if next.held.tracee.pid == tid {
                    // Its own step ended first: nothing else ran.
                    regs = next.held.regs;
                    resumed = next.flight.and_then(|(i, n, s)| Some((i, n, s?)));
                } else {
                    (regs, pending, resumed) = rec.switch_to(next, true)?;
                }
                continue;
            };
            (insn, syscall_nr, status)
        };
        turn += 1;
        match status {
            WaitStatus::Exited(_, code) => {
                if syscall_nr == nr::EXIT || syscall_nr == nr::EXIT_GROUP {
                    rec.retire(ip, insn, KERNEL, &regs, syscall_nr)?;
                }
                if syscall_nr == nr::EXIT && threads.any() {
                    // A thread ended; the others go on. The kernel cleared its id where it
                    // was asked to (and woke a futex there): a write no return shows.
                    let clear = threads.clear_tids.remove(&tid).filter(|&a| a != 0);
                    rec.syscalls.push(SyscallRecord {
                        position: rec.model.traced() - 1,
                        ip,
                        nr: nr::EXIT,
                        before: Default::default(),
                        after: Default::default(),
                        writes: clear.map(|a| MemoryWrite::new(a, &[0; 4])).into_iter().collect(),
                        complete: true,
                        unlogged: Vec::new(),
                    });
                    if let Some(next) = threads.next(&opts.interrupted)? {
                        turn = 0;
                        (regs, pending, resumed) = rec.switch_to(next, false)?;
                        continue;
                    }
                }
                break EndState::Exited { code };
            }
            WaitStatus::PtraceEvent(_, _, event) if event == ptrace::Event::PTRACE_EVENT_EXEC as i32 => {
                // The call succeeded: the old program's last instruction was the syscall, and
                // the new one stands at its first (`exec`).
                rec.retire(ip, insn, KERNEL, &regs, syscall_nr)?;
                let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                exec_argv = Some(
                    argv.split(|&b| b == 0)
                        .filter(|a| !a.is_empty())
                        .map(|a| std::ffi::OsStr::from_bytes(a).to_os_string())
                        .collect(),
                );
                let program = exec_path
                    .take()
                    .unwrap_or_else(|| std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default());
                break EndState::Exec {
                    program: program.display().to_string(),
                    next: None,
                };
            }
            WaitStatus::Signaled(_, sig, _) => {
                let (address, at) = match fault {
                    Some((s, addr, at)) if s == sig => (Some(format!("{addr:#x}")), Some(format!("{at:#x}"))),
                    _ => (None, None),
                };
                break EndState::Signaled {
                    signal: sig as i32,
                    name: sig.as_str().to_string(),
                    address,
                    ip: at,
                };
            }
            WaitStatus::Stopped(_, Signal::SIGTRAP) if insn.cofi != Cofi::Far(FarKind::Int3) || entering_handler => {
                let new = rec.tracee.regs()?;
                if entering_handler {
                    // The kernel set up the signal frame: the handler is next, nothing retired.
                    entering_handler = false;
                    let r = Retired::new(KERNEL + 0x40, 3, Cofi::Far(FarKind::Iret), new.rip).to_cpl(3);
                    rec.model.apply(&Input::Retire(r));
                    // What the trace cannot show: every register at the handler, and the
                    // signal frame the kernel wrote below the old stack pointer.
                    let mut frame = vec![0u8; SIGNAL_FRAME_BOUND];
                    let n = rec.tracee.read(new.rsp, &mut frame);
                    let mut registers = regs_map(&new);
                    // The kernel gives a handler fresh vector state (the old is in the frame).
                    registers.extend(rec.tracee.vectors()?.0);
                    rec.signals.push(SignalEntry {
                        position: rec.model.traced(),
                        ip: new.rip,
                        registers,
                        frame: MemoryWrite::new(new.rsp, &frame[..n]),
                        only_kernel: !rec.untraced_since_traced,
                        switch: None,
                    });
                } else if insn.rep && new.rip == ip {
                    // One iteration of a REP string instruction: the instruction retires
                    // when the last one does, with the registers it started with.
                    rep_start.get_or_insert(regs);
                } else {
                    let position = rec.model.traced();
                    let before = rep_start.take().unwrap_or(regs);
                    rec.retire(ip, insn, new.rip, &before, syscall_nr)?;
                    if insn.xsavec {
                        if let Some(header) = sideband::xsavec_header(&rec.tracee, ip, &before) {
                            rec.results.push(InsnResult {
                                position,
                                ip,
                                after: [("xstate_bv".to_string(), format!("{header:#x}"))].into(),
                            });
                        }
                    }
                    if !insn.result.is_empty() {
                        let all = regs_map(&new);
                        let after = insn
                            .result
                            .iter()
                            .filter_map(|&r| Some((r.to_string(), all.get(r)?.clone())));
                        rec.results.push(InsnResult {
                            position,
                            ip,
                            after: after.collect(),
                        });
                    }
                    if syscall_nr != u64::MAX {
                        let mut r = syscall_log::record(&rec.tracee, position, ip, syscall_nr, &regs, &new);
                        if matches!(syscall_nr, nr::CLONE | nr::CLONE3) && (new.rax as i64) > 0 {
                            match threads::clone_writes(&rec.tracee, syscall_nr, &regs) {
                                // clone3's argument block names every word it writes.
                                Some(w) if syscall_nr == nr::CLONE3 => {
                                    r.writes.extend(w);
                                    (r.complete, r.unlogged) = (true, Vec::new());
                                }
                                Some(w) => r.writes.extend(w),
                                None => {}
                            }
                        }
                        if syscall_nr == nr::SET_TID_ADDRESS {
                            threads.clear_tids.insert(tid, regs.rdi);
                        }
                        rec.syscalls.push(r);
                        if let Some(child) = rec.child(syscall_nr, position, &regs, &new) {
                            rec.children.push(child);
                        }
                    }
                }
                regs = new;
            }
            WaitStatus::Stopped(_, sig) => {
                let new = rec.tracee.regs()?;
                let info = ptrace::getsiginfo(tid).map_err(|e| StepError::Ptrace(format!("PTRACE_GETSIGINFO: {e}")))?;
                let kernel_sent = info.si_code > 0;
                let is_fault = kernel_sent
                    && matches!(sig, Signal::SIGSEGV | Signal::SIGBUS | Signal::SIGFPE | Signal::SIGILL)
                    && new.rip == ip;
                if insn.cofi == Cofi::Far(FarKind::Int3) && sig == Signal::SIGTRAP {
                    // INT3 retired (a trap into the kernel), which now delivers SIGTRAP.
                    rec.retire(ip, insn, KERNEL, &regs, u64::MAX)?;
                } else if !is_fault && new.rip != ip {
                    let before = rep_start.take().unwrap_or(regs);
                    rec.retire(ip, insn, new.rip, &before, syscall_nr)?;
                }
                regs = new;
                let (caught, ignored) = rec.tracee.disposition(sig);
                pending = Some(sig);
                if ignored || (!caught && ignored_by_default(sig)) {
                    continue;
                }
                if !caught {
                    // The signal ends the process: this is the last look at it.
                    regs_end = regs;
                    memory_end = sideband::snapshot(&rec.tracee, &rec.current_map);
                }
                if is_fault {
                    // SAFETY: for SIGSEGV, SIGBUS, SIGFPE and SIGILL sent by the kernel
                    // (si_code > 0) the kernel filled the fault-address member of the union,
                    // which is what si_addr() reads.
                    #[allow(unsafe_code)]
                    let addr = unsafe { info.si_addr() } as u64;
                    fault = Some((sig, addr, ip));
                    rec.model.apply(&Input::Fault {
                        handler: KERNEL,
                        cpl: 0,
                    });
                } else if insn.cofi != Cofi::Far(FarKind::Int3) {
                    rec.model.apply(&Input::Interrupt {
                        handler: KERNEL,
                        cpl: 0,
                    });
                }
                entering_handler = caught;
            }
            other => return Err(StepError::Ptrace(format!("unexpected stop: {other:?}"))),
        }
    };
    // The threads that wait where the recording ends never run again: their registers there.
    threads.log_ends(&mut rec.signals, rec.model.traced());
    let Recorder {
        tracee,
        mut model,
        truth,
        maps,
        images,
        syscalls,
        results,
        signals,
        children,
        progress,
        ..
    } = rec;
    // What the unit still holds: tracing stops here without a FUP.PGD when the program did
    // not end by itself (§4.2.8), so the last branches' bits are only in RTIT_TNT_BUFF.
    let tnt_buff = model.rdmsr(msr::TNT_BUFF)?;
    let next = exec_argv.map(|argv| {
        let opts = StepOptions {
            progress,
            interrupted: opts.interrupted.clone(),
            program: opts.program.clone(),
            args: Vec::new(),
            ..opts
        };
        Next::new(tracee, opts, argv)
    });
    let outcome = Outcome {
        syscalls,
        results,
        syscalls_file: None,
        anchor_files: None,
        code_file: None,
        sync_file: None,
        signals,
        cpuid: Vec::new(),
        xcr0,
        modules: Vec::new(),
        gaps: Vec::new(),
        from_trace: None,
        kernel_text: None,
        trace_end: Some(TraceEndRecord { tnt_buff }),
        children,
        warnings,
        instructions: model.traced(),
        trace: model.take_output().into(),
        truth,
        memory_start,
        memory_end,
        maps,
        images,
        registers_start: {
            let mut m = regs_map(&regs_start);
            m.extend(vectors_start);
            m
        },
        registers_end: regs_map(&regs_end),
        start_ip,
        cr3,
        end,
        config,
    };
    Ok(Part { outcome, next })
}

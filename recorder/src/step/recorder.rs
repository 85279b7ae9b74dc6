//! The step backend's recorder: the tracee being stepped, the unit model it drives, and what
//! it logs beside the trace; what each retired instruction does to them (`retire`), and a
//! switch to another thread (`switch_to`).

use std::collections::HashMap;

use nix::sys::signal::Signal;
use nix::sys::wait::WaitStatus;
use rtit_replay_core::cofi::{Cofi, FarKind};
use rtit_replay_core::recording::{ChildProcess, InsnResult, Maps, SignalEntry, ThreadSwitch};
use rtit_replay_core::syscall::{MemoryWrite, SyscallRecord};

use super::insn::Insn;
use super::threads::Waiting;
use super::tracee::{regs_map, Regs, Tracee};
use super::{StepError, KERNEL, TRUTH_SAMPLE_INTERVAL};
use crate::model::{Input, Retired, UnitModel};
use crate::outcome::Truth;
use crate::sideband::{self as shared, nr, Images};

pub(super) struct Recorder<'a> {
    pub(super) tracee: Tracee,
    pub(super) model: UnitModel,
    pub(super) cache: HashMap<u64, Insn>,
    /// Instructions retired, traced or not (for the progress line).
    pub(super) retired: u64,
    pub(super) truth: Option<Truth>,
    pub(super) maps: Maps,
    pub(super) current_map: Vec<rtit_replay_core::recording::Mapping>,
    pub(super) images: Images,
    pub(super) syscalls: Vec<SyscallRecord>,
    pub(super) results: Vec<InsnResult>,
    pub(super) signals: Vec<SignalEntry>,
    pub(super) children: Vec<ChildProcess>,
    pub(super) progress: Option<Box<dyn FnMut(u64) + 'a>>,
    /// Whether an instruction retired untraced (outside an IP filter) since the last traced
    /// one: a signal delivery logged then may follow user code the trace does not show.
    pub(super) untraced_since_traced: bool,
    /// Sample the truth at the next instruction too: it follows a far transfer (a system
    /// call, where the kernel may deliver a signal), where the state layer is most at risk.
    pub(super) sample_next: bool,
    /// The vector registers and MXCSR before the instruction being stepped, when its
    /// retirement is to be sampled (a REP string instruction's iterations do not change them).
    pub(super) vectors_before: Option<std::collections::BTreeMap<String, String>>,
}

impl Recorder<'_> {
    /// The instruction at `ip` retired and execution went on at `next`.
    /// Whether the next retirement is a truth sample.
    pub(super) fn sample_due(&self) -> bool {
        self.truth.as_ref().is_some_and(|t| {
            self.model.packet_en() && (t.ips.len() as u64 % TRUTH_SAMPLE_INTERVAL == 0 || self.sample_next)
        })
    }

    pub(super) fn retire(
        &mut self,
        ip: u64,
        insn: Insn,
        next: u64,
        regs: &Regs,
        syscall_nr: u64,
    ) -> Result<(), StepError> {
        if let Some(t) = &mut self.truth {
            if self.model.packet_en() {
                if t.ips.len() as u64 % TRUTH_SAMPLE_INTERVAL == 0 || self.sample_next {
                    let mut sample = regs_map(regs);
                    sample.extend(self.vectors_before.take().unwrap_or_default());
                    t.samples.push((t.ips.len() as u64, sample));
                }
                t.ips.push(ip);
            }
            self.sample_next = matches!(insn.cofi, Cofi::Far(_));
        }
        self.untraced_since_traced = !self.model.packet_en();
        self.retired += 1;
        if self.retired & 0xffff == 0 {
            if let Some(p) = &mut self.progress {
                p(self.retired);
            }
        }
        let nlip = ip + u64::from(insn.len);
        match insn.cofi {
            Cofi::Far(kind) => {
                self.model
                    .apply(&Input::Retire(Retired::new(ip, insn.len, insn.cofi, KERNEL).to_cpl(0)));
                // INT3 goes on to signal delivery; exit and exit_group do not come back, nor
                // does an execve that ran a program (its `next` is the kernel: `exec`).
                let returns =
                    kind != FarKind::Int3 && !matches!(syscall_nr, nr::EXIT | nr::EXIT_GROUP) && next != KERNEL;
                if returns {
                    // The kernel returns to user mode.
                    self.model.apply(&Input::Retire(
                        Retired::new(KERNEL + 0x40, 3, Cofi::Far(FarKind::Sysret), next).to_cpl(3),
                    ));
                    if nr::changes_map(syscall_nr) {
                        self.map_changed(syscall_nr, regs.rsi)?;
                    }
                }
            }
            Cofi::Conditional => {
                let r = Retired::new(ip, insn.len, insn.cofi, next).taken(next != nlip);
                self.model.apply(&Input::Retire(r));
            }
            cofi => self.model.apply(&Input::Retire(Retired::new(ip, insn.len, cofi, next))),
        }
        Ok(())
    }

    /// Thread `next` runs from here (issue 43, `threads`): the one stepped until now left
    /// user mode, between two of its instructions as an interrupt takes it (`interrupted`),
    /// or by a system call that does not return; the kernel returns to `next`'s next
    /// instruction, where its registers are logged as a handler's entry's are (no frame).
    /// Returns its registers, its pending signal, and its step that ended while it waited.
    #[allow(clippy::type_complexity)]
    pub(super) fn switch_to(
        &mut self,
        next: Waiting,
        interrupted: bool,
    ) -> Result<(Regs, Option<Signal>, Option<(Insn, u64, WaitStatus)>), StepError> {
        if interrupted {
            self.model.apply(&Input::Interrupt {
                handler: KERNEL,
                cpl: 0,
            });
        }
        let Waiting { held, flight } = next;
        let rip = held.regs.rip;
        let r = Retired::new(KERNEL + 0x40, 3, Cofi::Far(FarKind::Iret), rip).to_cpl(3);
        self.model.apply(&Input::Retire(r));
        let mut registers = regs_map(&held.regs);
        // A thread whose step under way ended it (its `exit`, slow enough to look blocked)
        // is gone: its vector registers are not there to read, and stay unknown.
        if let Ok((vectors, _)) = held.tracee.vectors() {
            registers.extend(vectors);
        }
        self.signals.push(SignalEntry {
            position: self.model.traced(),
            ip: rip,
            registers,
            frame: MemoryWrite::new(held.regs.rsp, &[]),
            only_kernel: !self.untraced_since_traced,
            switch: Some(ThreadSwitch {
                from: i64::from(self.tracee.pid.as_raw()),
                to: i64::from(held.tracee.pid.as_raw()),
            }),
        });
        self.sample_next = true;
        // What was read for a truth sample of the outgoing thread is not the incoming one's
        // (a resumed system call retires next, with no read before it).
        self.vectors_before = None;
        self.tracee = held.tracee;
        let resumed = flight.and_then(|(insn, nr, status)| Some((insn, nr, status?)));
        Ok((held.regs, held.pending, resumed))
    }

    /// The process a system call at `position` created, if it created one (its child runs
    /// untraced: rtit follows one process).
    pub(super) fn child(&self, syscall: u64, position: u64, before: &Regs, after: &Regs) -> Option<ChildProcess> {
        let flags = match syscall {
            nr::CLONE3 => {
                let mut b = [0u8; 8];
                self.tracee.read(before.rdi, &mut b);
                u64::from_le_bytes(b)
            }
            _ => before.rdi,
        };
        let name = nr::creates_process(syscall, flags)?;
        let pid = after.rax as i64;
        (pid > 0).then(|| ChildProcess {
            position,
            syscall: name.to_string(),
            pid: Some(pid),
        })
    }

    /// After system call `syscall` (its second argument `a1`), a change of the map.
    pub(super) fn map_changed(&mut self, syscall: u64, a1: u64) -> Result<(), StepError> {
        let now = self.tracee.maps()?;
        let mapped = shared::mapped(syscall, a1, self.tracee.regs()?.rax);
        if let Some(change) = shared::diff(&self.current_map, &now, self.model.traced(), syscall, mapped) {
            self.images.note(&change.added);
            self.maps.changes.push(change);
        }
        self.current_map = now;
        Ok(())
    }
}

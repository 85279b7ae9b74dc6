//! The gdbstub target over a replay session: registers and memory where known, forward and
//! reverse stepping and continuing, software and hardware breakpoints (both are just addresses
//! in a replay). Monitor commands are in `monitor`, the file extensions in `file_ops`.

use std::collections::HashSet;

use gdbstub::common::Signal;
use gdbstub::target::ext::base::reverse_exec::{ReverseCont, ReverseContOps, ReverseStep, ReverseStepOps};
use gdbstub::target::ext::base::singlethread::{
    SingleThreadBase, SingleThreadResume, SingleThreadResumeOps, SingleThreadSingleStep, SingleThreadSingleStepOps,
};
use gdbstub::target::ext::base::BaseOps;
use gdbstub::target::ext::breakpoints::{
    Breakpoints, BreakpointsOps, HwBreakpoint, HwBreakpointOps, HwWatchpoint, HwWatchpointOps, SwBreakpoint,
    SwBreakpointOps, WatchKind,
};
use gdbstub::target::ext::catch_syscalls::{CatchSyscalls, CatchSyscallsOps, SyscallNumbers};
use gdbstub::target::ext::monitor_cmd::MonitorCmdOps;
use gdbstub::target::{Target, TargetError, TargetResult};
use rtit_replay_core::session::{Catch, Session};
use rtit_replay_core::state::watch::{Watch, WatchKind as Kind};

use crate::arch::{ReplayRegs, X86_64Replay, GPR_NAMES, SEGMENT_NAMES};
use crate::files::Files;

/// XCR0's AVX-512 components: opmask, ZMM_Hi256, Hi16_ZMM.
const AVX512: u64 = 0b111 << 5;

/// What gdb asked for, to be carried out by the event loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// continue
    Continue,
    /// stepi
    Step,
    /// reverse-continue
    ReverseContinue,
    /// reverse-stepi
    ReverseStep,
}

/// A replay session served to gdb.
pub struct ReplayTarget {
    /// The session.
    pub session: Session,
    /// Breakpoint addresses.
    pub breakpoints: HashSet<u64>,
    /// The system calls gdb's `catch syscall` asked to stop at.
    pub catch: Catch,
    /// The watchpoints gdb set (its Z2, Z3 and Z4 packets: `watch`, `rwatch`, `awatch`).
    pub watches: Vec<Watch>,
    /// The resume request gdb made last.
    pub pending: Option<Action>,
    /// The recording's files, as gdb asks for them.
    pub files: Files,
    /// The connected gdb flushes its caches after every monitor command (it said so with
    /// `monitor flushes-caches`, as the gdb `rtit replay` starts does).
    pub gdb_flushes: bool,
    /// The target description: with AVX-512's registers if the recording's XCR0 enabled them.
    description: String,
    pub(crate) avx512: bool,
}

impl ReplayTarget {
    /// A target at position 0 of `session`.
    pub fn new(session: Session) -> Self {
        let avx512 = session
            .recording()
            .manifest
            .cpu
            .xcr0
            .is_some_and(|x| x & AVX512 == AVX512);
        Self {
            files: Files::new(session.recording()),
            description: crate::arch::description(avx512),
            avx512,
            gdb_flushes: false,
            session,
            breakpoints: HashSet::new(),
            catch: Catch::Nothing,
            watches: Vec::new(),
            pending: None,
        }
    }

    /// Back to position 0 with no breakpoints and no open files, as a new gdb expects.
    pub fn reset(&mut self) {
        self.session.set_position(0);
        self.breakpoints.clear();
        self.catch = Catch::Nothing;
        self.pending = None;
        self.files.close_all();
        self.gdb_flushes = false;
    }
}

impl Target for ReplayTarget {
    type Arch = X86_64Replay;
    type Error = &'static str;

    fn base_ops(&mut self) -> BaseOps<'_, Self::Arch, Self::Error> {
        BaseOps::SingleThread(self)
    }

    fn support_catch_syscalls(&mut self) -> Option<CatchSyscallsOps<'_, Self>> {
        Some(self)
    }

    fn support_breakpoints(&mut self) -> Option<BreakpointsOps<'_, Self>> {
        Some(self)
    }

    fn support_monitor_cmd(&mut self) -> Option<MonitorCmdOps<'_, Self>> {
        Some(self)
    }

    fn support_exec_file(&mut self) -> Option<gdbstub::target::ext::exec_file::ExecFileOps<'_, Self>> {
        Some(self)
    }

    fn support_host_io(&mut self) -> Option<gdbstub::target::ext::host_io::HostIoOps<'_, Self>> {
        Some(self)
    }

    fn support_auxv(&mut self) -> Option<gdbstub::target::ext::auxv::AuxvOps<'_, Self>> {
        Some(self)
    }

    fn support_target_description_xml_override(
        &mut self,
    ) -> Option<gdbstub::target::ext::target_description_xml_override::TargetDescriptionXmlOverrideOps<'_, Self>> {
        Some(self)
    }

    fn support_libraries_svr4(&mut self) -> Option<gdbstub::target::ext::libraries::LibrariesSvr4Ops<'_, Self>> {
        Some(self)
    }
}

impl gdbstub::target::ext::target_description_xml_override::TargetDescriptionXmlOverride for ReplayTarget {
    fn target_description_xml(
        &self,
        annex: &[u8],
        offset: u64,
        length: usize,
        buf: &mut [u8],
    ) -> TargetResult<usize, Self> {
        if annex != b"target.xml" {
            return Err(TargetError::NonFatal);
        }
        let xml = self.description.as_bytes();
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(xml.len());
        let n = (xml.len() - start).min(length).min(buf.len());
        buf[..n].copy_from_slice(&xml[start..start + n]);
        Ok(n)
    }
}

impl SingleThreadBase for ReplayTarget {
    fn read_registers(&mut self, regs: &mut ReplayRegs) -> TargetResult<(), Self> {
        let s = &mut self.session;
        for (slot, name) in regs.gprs.iter_mut().zip(GPR_NAMES) {
            *slot = s.register(name);
        }
        regs.rip = s.pc();
        regs.eflags = s.register("eflags").map(|v| v as u32);
        for (slot, name) in regs.segments.iter_mut().zip(SEGMENT_NAMES) {
            *slot = s.register(name).map(|v| v as u32);
        }
        regs.avx512 = self.avx512;
        let vectors = if self.avx512 { 32 } else { 16 };
        for (i, slot) in regs.vectors.iter_mut().enumerate().take(vectors) {
            *slot = s.vector_register(i);
        }
        if self.avx512 {
            for (i, slot) in regs.opmasks.iter_mut().enumerate() {
                *slot = s.opmask(i);
            }
        }
        regs.mxcsr = s.mxcsr();
        regs.bases = [s.register("fs_base"), s.register("gs_base")];
        Ok(())
    }

    fn write_registers(&mut self, _regs: &ReplayRegs) -> TargetResult<(), Self> {
        Err(TargetError::NonFatal)
    }

    /// The known prefix of the range; nothing known is an error (EFAULT). gdbstub calls this
    /// once per `m` packet because [`crate::conn`] keeps every request within one of its
    /// chunks, so a reply is the prefix or the error, never both.
    fn read_addrs(&mut self, start: u64, data: &mut [u8]) -> TargetResult<usize, Self> {
        let known = self.session.read_memory_prefix(start, data.len());
        if known.is_empty() && !data.is_empty() {
            return Err(TargetError::Errno(14));
        }
        data[..known.len()].copy_from_slice(&known);
        Ok(known.len())
    }

    fn write_addrs(&mut self, _start: u64, _data: &[u8]) -> TargetResult<(), Self> {
        Err(TargetError::NonFatal)
    }

    fn support_resume(&mut self) -> Option<SingleThreadResumeOps<'_, Self>> {
        Some(self)
    }
}

impl SingleThreadResume for ReplayTarget {
    fn resume(&mut self, _signal: Option<Signal>) -> Result<(), Self::Error> {
        self.pending = Some(Action::Continue);
        Ok(())
    }

    fn support_single_step(&mut self) -> Option<SingleThreadSingleStepOps<'_, Self>> {
        Some(self)
    }

    fn support_reverse_cont(&mut self) -> Option<ReverseContOps<'_, (), Self>> {
        Some(self)
    }

    fn support_reverse_step(&mut self) -> Option<ReverseStepOps<'_, (), Self>> {
        Some(self)
    }
}

impl SingleThreadSingleStep for ReplayTarget {
    fn step(&mut self, _signal: Option<Signal>) -> Result<(), Self::Error> {
        self.pending = Some(Action::Step);
        Ok(())
    }
}

impl ReverseCont<()> for ReplayTarget {
    fn reverse_cont(&mut self) -> Result<(), Self::Error> {
        self.pending = Some(Action::ReverseContinue);
        Ok(())
    }
}

impl ReverseStep<()> for ReplayTarget {
    fn reverse_step(&mut self, _tid: ()) -> Result<(), Self::Error> {
        self.pending = Some(Action::ReverseStep);
        Ok(())
    }
}

impl Breakpoints for ReplayTarget {
    fn support_sw_breakpoint(&mut self) -> Option<SwBreakpointOps<'_, Self>> {
        Some(self)
    }

    fn support_hw_breakpoint(&mut self) -> Option<HwBreakpointOps<'_, Self>> {
        Some(self)
    }

    fn support_hw_watchpoint(&mut self) -> Option<HwWatchpointOps<'_, Self>> {
        Some(self)
    }
}

/// A watchpoint as the state layer looks for it.
fn watch(addr: u64, len: u64, kind: WatchKind) -> Watch {
    let kind = match kind {
        WatchKind::Write => Kind::Write,
        WatchKind::Read => Kind::Read,
        WatchKind::ReadWrite => Kind::Access,
    };
    Watch {
        address: addr,
        len: len.max(1),
        kind,
    }
}

impl HwWatchpoint for ReplayTarget {
    /// Any number, of any length: a search compares addresses, there are no debug registers
    /// to run out of.
    fn add_hw_watchpoint(&mut self, addr: u64, len: u64, kind: WatchKind) -> TargetResult<bool, Self> {
        self.watches.push(watch(addr, len, kind));
        Ok(true)
    }

    fn remove_hw_watchpoint(&mut self, addr: u64, len: u64, kind: WatchKind) -> TargetResult<bool, Self> {
        let w = watch(addr, len, kind);
        match self.watches.iter().position(|x| *x == w) {
            Some(i) => {
                self.watches.remove(i);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

impl SwBreakpoint for ReplayTarget {
    fn add_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.breakpoints.insert(addr);
        Ok(true)
    }

    fn remove_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        Ok(self.breakpoints.remove(&addr))
    }
}

impl HwBreakpoint for ReplayTarget {
    fn add_hw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        self.breakpoints.insert(addr);
        Ok(true)
    }

    fn remove_hw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        Ok(self.breakpoints.remove(&addr))
    }
}

impl CatchSyscalls for ReplayTarget {
    fn enable_catch_syscalls(&mut self, filter: Option<SyscallNumbers<'_, u64>>) -> TargetResult<(), Self> {
        self.catch = match filter {
            None => Catch::All,
            Some(numbers) => Catch::Numbers(numbers.collect()),
        };
        Ok(())
    }

    fn disable_catch_syscalls(&mut self) -> TargetResult<(), Self> {
        self.catch = Catch::Nothing;
        Ok(())
    }
}

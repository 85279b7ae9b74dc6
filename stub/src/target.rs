//! The gdbstub target over a replay session: registers and memory where known, forward and
//! reverse stepping and continuing, software and hardware breakpoints (both are just addresses
//! in a replay). Monitor commands are in `monitor`, the file extensions in `file_ops`.

use std::collections::HashSet;

use gdbstub::common::{Signal, Tid};
use gdbstub::target::ext::base::multithread::{
    MultiThreadBase, MultiThreadResume, MultiThreadResumeOps, MultiThreadSchedulerLocking,
    MultiThreadSchedulerLockingOps, MultiThreadSingleStep, MultiThreadSingleStepOps,
};
use gdbstub::target::ext::base::reverse_exec::{ReverseCont, ReverseContOps, ReverseStep, ReverseStepOps};
use gdbstub::target::ext::base::BaseOps;
use gdbstub::target::ext::breakpoints::{
    Breakpoints, BreakpointsOps, HwBreakpoint, HwBreakpointOps, HwWatchpoint, HwWatchpointOps, SwBreakpoint,
    SwBreakpointOps, WatchKind,
};
use gdbstub::target::ext::catch_syscalls::{CatchSyscalls, CatchSyscallsOps, SyscallNumbers};
use gdbstub::target::ext::monitor_cmd::MonitorCmdOps;
use gdbstub::target::{Target, TargetError, TargetResult};
use rtit_replay_core::session::{Catch, Session};
use rtit_replay_core::state::flags;
use rtit_replay_core::state::watch::{Watch, WatchKind as Kind};
use rtit_replay_core::threads::Schedule;

use crate::arch::{ReplayRegs, X86_64Replay, GPR_NAMES, SEGMENT_NAMES};
use crate::files::Files;

/// XCR0's AVX-512 components: opmask, ZMM_Hi256, Hi16_ZMM.
const AVX512: u64 = 0b111 << 5;

/// What gdb asked for, to be carried out by the event loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// continue
    Continue,
    /// stepi of a thread
    Step(Tid),
    /// reverse-continue
    ReverseContinue,
    /// reverse-stepi of a thread
    ReverseStep(Tid),
}

/// The one thread of a recording without a schedule (gdbstub's single-thread id).
pub const ONE: Tid = match Tid::new(1) {
    Some(t) => t,
    None => unreachable!(),
};

/// gdb's id of Linux thread `tid`.
pub fn gdb_tid(tid: i64) -> Tid {
    usize::try_from(tid).ok().and_then(Tid::new).unwrap_or(ONE)
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
    /// The thread gdb has in mind: the one the last stop named, or gdb last stepped. gdb's
    /// `bs` (reverse-stepi) names no thread (gdbstub then takes the first), so it is this one.
    pub selected: Tid,
    /// The recording's files, as gdb asks for them.
    pub files: Files,
    /// The connected gdb flushes its caches after every monitor command (it said so with
    /// `monitor flushes-caches`, as the gdb `rtit replay` starts does).
    pub gdb_flushes: bool,
    /// Which thread runs where, for a recording of several (the step backend's).
    pub schedule: Option<Schedule>,
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
            schedule: schedule(session.recording()),
            files: Files::new(session.recording()),
            description: crate::arch::description(avx512),
            avx512,
            gdb_flushes: false,
            session,
            breakpoints: HashSet::new(),
            catch: Catch::Nothing,
            watches: Vec::new(),
            pending: None,
            selected: ONE,
        }
    }

    /// The thread that runs at the current position, as gdb names it.
    pub fn running(&self) -> Tid {
        self.schedule
            .as_ref()
            .map_or(ONE, |s| gdb_tid(s.running(self.session.position())))
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
        BaseOps::MultiThread(self)
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

/// The schedule of `recording`'s threads, if it switched between several.
fn schedule(recording: &rtit_replay_core::recording::Recording) -> Option<Schedule> {
    let signals = recording.signals().ok()?;
    if !signals.iter().any(|e| e.switch.is_some()) {
        return None;
    }
    Schedule::new(&signals, &recording.syscalls().unwrap_or_default())
}

/// The registers of a thread that waits, as logged where it runs next (`map`): the general,
/// segment and base registers; the vector registers stay unknown.
fn waiting_registers(regs: &mut ReplayRegs, map: &std::collections::BTreeMap<String, String>) {
    let get = |name: &str| {
        map.get(name)
            .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
    };
    *regs = ReplayRegs::default();
    for (slot, name) in regs.gprs.iter_mut().zip(GPR_NAMES) {
        *slot = get(name);
    }
    regs.rip = get("rip");
    // gdb takes eflags whole: unknown where the recorder knew only some of its bits.
    let whole = get(flags::KNOWN_NAME).map_or(true, |known| known & flags::ALL == flags::ALL);
    regs.eflags = get("eflags").filter(|_| whole).map(|v| v as u32);
    for (slot, name) in regs.segments.iter_mut().zip(SEGMENT_NAMES) {
        *slot = get(name).map(|v| v as u32);
    }
    regs.bases = [get("fs_base"), get("gs_base")];
}

impl MultiThreadBase for ReplayTarget {
    fn read_registers(&mut self, regs: &mut ReplayRegs, tid: Tid) -> TargetResult<(), Self> {
        if tid != self.running() {
            let p = self.session.position();
            match self
                .schedule
                .as_ref()
                .and_then(|s| s.waiting_registers(tid.get() as i64, p))
            {
                Some(map) => waiting_registers(regs, map),
                // A thread that never runs again: nothing tells its registers, rip included.
                None => *regs = ReplayRegs::default(),
            }
            regs.avx512 = self.avx512;
            return Ok(());
        }
        let s = &mut self.session;
        for (slot, name) in regs.gprs.iter_mut().zip(GPR_NAMES) {
            *slot = s.register(name);
        }
        regs.rip = Some(s.pc());
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

    fn write_registers(&mut self, _regs: &ReplayRegs, _tid: Tid) -> TargetResult<(), Self> {
        Err(TargetError::NonFatal)
    }

    /// The known prefix of the range; nothing known is an error (EFAULT). gdbstub calls this
    /// once per `m` packet because [`crate::conn`] keeps every request within one of its
    /// chunks, so a reply is the prefix or the error, never both.
    fn read_addrs(&mut self, start: u64, data: &mut [u8], _tid: Tid) -> TargetResult<usize, Self> {
        let known = self.session.read_memory_prefix(start, data.len());
        if known.is_empty() && !data.is_empty() {
            return Err(TargetError::Errno(14));
        }
        data[..known.len()].copy_from_slice(&known);
        Ok(known.len())
    }

    fn write_addrs(&mut self, _start: u64, _data: &[u8], _tid: Tid) -> TargetResult<(), Self> {
        Err(TargetError::NonFatal)
    }

    /// The threads that exist at the current position.
    fn list_active_threads(&mut self, thread_is_active: &mut dyn FnMut(Tid)) -> Result<(), Self::Error> {
        match &self.schedule {
            Some(s) => s
                .alive(self.session.position())
                .into_iter()
                .for_each(|t| thread_is_active(gdb_tid(t))),
            None => thread_is_active(ONE),
        }
        Ok(())
    }

    fn support_resume(&mut self) -> Option<MultiThreadResumeOps<'_, Self>> {
        Some(self)
    }
}

impl MultiThreadResume for ReplayTarget {
    fn resume(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }

    /// gdbstub's contract: every thread continues unless told otherwise (a `vCont;c` names
    /// none of them). All-stop: the threads go on in the recorded order.
    fn clear_resume_actions(&mut self) -> Result<(), Self::Error> {
        self.pending = Some(Action::Continue);
        Ok(())
    }

    /// A step asked for one thread at the same time takes precedence (`vCont;s:T;c`).
    fn set_resume_action_continue(&mut self, _tid: Tid, _signal: Option<Signal>) -> Result<(), Self::Error> {
        Ok(())
    }

    fn support_single_step(&mut self) -> Option<MultiThreadSingleStepOps<'_, Self>> {
        Some(self)
    }

    fn support_reverse_cont(&mut self) -> Option<ReverseContOps<'_, Tid, Self>> {
        Some(self)
    }

    fn support_reverse_step(&mut self) -> Option<ReverseStepOps<'_, Tid, Self>> {
        Some(self)
    }

    fn support_scheduler_locking(&mut self) -> Option<MultiThreadSchedulerLockingOps<'_, Self>> {
        Some(self)
    }
}

/// gdb locks the scheduler while it steps a thread (its default in replay, and to step off a
/// breakpoint): a step of one thread here runs the others' instructions in between as
/// recorded, and stops at that thread's next one (`thread_moves`), which is what gdb expects
/// to see of the stepped thread.
impl MultiThreadSchedulerLocking for ReplayTarget {
    fn set_resume_action_scheduler_lock(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

impl MultiThreadSingleStep for ReplayTarget {
    fn set_resume_action_step(&mut self, tid: Tid, _signal: Option<Signal>) -> Result<(), Self::Error> {
        self.pending = Some(Action::Step(tid));
        Ok(())
    }
}

impl ReverseCont<Tid> for ReplayTarget {
    fn reverse_cont(&mut self) -> Result<(), Self::Error> {
        self.pending = Some(Action::ReverseContinue);
        Ok(())
    }
}

impl ReverseStep<Tid> for ReplayTarget {
    fn reverse_step(&mut self, _tid: Tid) -> Result<(), Self::Error> {
        self.pending = Some(Action::ReverseStep(self.selected));
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

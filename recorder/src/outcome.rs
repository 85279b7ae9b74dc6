//! What a backend hands the writer: the trace and its sideband, whatever produced them.

use std::collections::BTreeMap;

use rtit_replay_core::recording::{ChildProcess, EndState, Maps, TraceEndRecord, TraceGap};

use crate::model::RtitConfig;
use crate::sideband::{Images, Snapshot};

/// Register values by name (`rip` → `0x401000`), as the manifest stores them; a register
/// that is not listed is unknown.
pub type RegisterMap = BTreeMap<String, String>;

/// The recorder's truth: every traced instruction's address, and registers at sampled
/// positions where the backend can read them.
#[derive(Debug, Default, Clone)]
pub struct Truth {
    /// Addresses, in order.
    pub ips: Vec<u64>,
    /// (position, registers before the instruction there).
    pub samples: Vec<(u64, RegisterMap)>,
}

/// A relocatable object the traced code ran from (a kernel module, or a `.o` a program
/// loaded itself), with the address of each allocated section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// Its name (`/sys/module/NAME`).
    pub name: String,
    /// The object file to copy.
    pub file: std::path::PathBuf,
    /// Section name → address.
    pub sections: BTreeMap<String, u64>,
    /// The symbols it uses but does not define, with their addresses (from kallsyms).
    pub externals: BTreeMap<String, u64>,
}

/// What a recording run produced.
pub struct Outcome {
    /// The packet bytes.
    pub trace: crate::trace_bytes::TraceBytes,
    /// Instructions retired while tracing.
    pub instructions: u64,
    /// With `truth`: what ran.
    pub truth: Option<Truth>,
    /// Writable memory when tracing started.
    pub memory_start: Snapshot,
    /// At the end, where the process could still be read.
    pub memory_end: Snapshot,
    /// The memory map at the start and its changes.
    pub maps: Maps,
    /// The images to copy.
    pub images: Images,
    /// Registers when tracing started (those the backend knows).
    pub registers_start: RegisterMap,
    /// At the end: before the exit system call, at the fault, or where stopped.
    pub registers_end: RegisterMap,
    /// Where tracing started.
    pub start_ip: u64,
    /// The CR3 the configuration filtered on.
    pub cr3: u64,
    /// How the run ended.
    pub end: EndState,
    /// The RTIT configuration used.
    pub config: RtitConfig,
    /// Relocatable objects to copy with their section addresses.
    pub modules: Vec<Module>,
    /// Where trace bytes were lost (the output region wrapped).
    pub gaps: Vec<TraceGap>,
    /// The system calls, with their results and the memory they wrote, where the backend
    /// logged them.
    pub syscalls: Vec<rtit_replay_core::syscall::SyscallRecord>,
    /// The system calls already written one JSON record a line, as the recording holds them
    /// (the qemu plugin writes them): moved into the recording instead of `syscalls`.
    pub syscalls_file: Option<std::path::PathBuf>,
    /// The anchors' files (`anchors.jsonl` and `anchor-pages.bin`), where the backend took
    /// anchors: moved into the recording.
    pub anchor_files: Option<[std::path::PathBuf; 2]>,
    /// Which code each stretch of the history ran (`code-ran.bin`), where the backend noted
    /// it: moved into the recording.
    pub code_file: Option<std::path::PathBuf>,
    /// Where a decode can start exactly (`sync-points.bin`), where the backend noted it:
    /// moved into the recording.
    pub sync_file: Option<std::path::PathBuf>,
    /// What cpuid, rdtsc, rdtscp and xgetbv returned, where the backend saw it.
    pub results: Vec<rtit_replay_core::recording::InsnResult>,
    /// Signal handlers' entries: registers and the frame, where the backend saw them.
    pub signals: Vec<rtit_replay_core::recording::SignalEntry>,
    /// What CPUID returns on the CPU model the program ran on (qemu backend).
    pub cpuid: Vec<rtit_replay_core::recording::cpuid::CpuidLeaf>,
    /// XCR0 exactly, where the backend read it (the kernel's XSAVE register set).
    pub xcr0: Option<u64>,
    /// What the writer must find by decoding the trace (the hardware backend counts nothing).
    pub from_trace: Option<FromTrace>,
    /// With kernel tracing: the run-time address of the kernel's `_text` (kallsyms).
    pub kernel_text: Option<u64>,
    /// RTIT_TNT_BUFF when tracing stopped, where the backend knows `instructions` exactly.
    pub trace_end: Option<TraceEndRecord>,
    /// Processes the program created, which ran unrecorded.
    pub children: Vec<ChildProcess>,
    /// What the backend warned about, for the manifest.
    pub warnings: Vec<String>,
}

/// What a backend that only sees trace offsets leaves to the writer, which decodes the trace
/// it wrote: the number of instructions (`instructions` is then ignored) and the position of
/// each map change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FromTrace {
    /// For each of `maps.changes`, in order, the trace offset at which it took effect (where
    /// the trace had got to when the target stopped at the system call's exit).
    pub change_offsets: Vec<u64>,
    /// For each of `syscalls`, in order, the trace offset at its exit stop: the call is the
    /// instruction before the position there.
    pub syscall_offsets: Vec<u64>,
    /// For each of `signals`, in order, the trace offset where the target stopped at the
    /// handler's entry: the handler's first instruction is the position there.
    pub signal_offsets: Vec<u64>,
}

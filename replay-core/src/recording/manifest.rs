//! The files' contents as types: the manifest and what it holds, `maps.json`, `memory.json`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::hex;

/// The RTIT registers a trace was written under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RtitRegisters {
    /// RTIT_CTL.
    #[serde(with = "hex")]
    pub ctl: u64,
    /// RTIT_CR3_MATCH.
    #[serde(with = "hex")]
    pub cr3_match: u64,
    /// RTIT_EVENTS.
    #[serde(with = "hex")]
    pub events: u64,
    /// RTIT_LIP0–3.
    #[serde(with = "hex::vec")]
    pub lip: Vec<u64>,
    /// RTIT_PKT_CNT.
    #[serde(with = "hex")]
    pub pkt_cnt: u64,
}

/// The CPU the recording was made on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuInfo {
    /// Vendor string (GenuineIntel, AuthenticAMD).
    pub vendor: String,
    /// Model name from /proc/cpuinfo.
    pub model_name: String,
    /// Family, model, stepping.
    pub family: u32,
    /// Model.
    pub model: u32,
    /// Stepping.
    pub stepping: u32,
    /// XCR0, the XSAVE components the OS enabled, or a superset of it: exact where the
    /// backend read it (the step backend, from the kernel's XSAVE register set), else from
    /// the CPU's features (`/proc/cpuinfo`) or, under QEMU, its CPUID leaf 0xd. It bounds
    /// what XSAVEC and XSAVES write and, with AVX-512, where gdb is shown its registers.
    #[serde(default, with = "crate::hex::option", skip_serializing_if = "Option::is_none")]
    pub xcr0: Option<u64>,
    /// The program ran on a CPU model whose `syscall` leaves rcx, r11 and RFLAGS as they were
    /// (QEMU user mode: it emulates the kernel without the instruction's own register
    /// writes); on a real CPU `syscall` sets rcx and r11.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub syscall_keeps_registers: bool,
    /// Whether the CPU runs `lzcnt` as LZCNT (ABM); without it the same bytes are `bsr`,
    /// whose result differs. Unknown in recordings made before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lzcnt: Option<bool>,
    /// Whether the CPU has BMI1, so `tzcnt` of zero is the operand size rather than `bsf`'s
    /// unchanged destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmi1: Option<bool>,
    /// Whether `and`, `or`, `xor` and `test` clear AF, which the SDM leaves undefined: found by
    /// running them on the recording CPU (QEMU: yes). Unknown: AF is unknown after them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logic_clears_af: Option<bool>,
    /// The program ran on a CPU model whose XSAVE marks every requested component in use in
    /// XSTATE_BV (QEMU does not track XINUSE), so an XRSTOR of what it saved loads every
    /// register back; a real CPU's XINUSE is its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub xsave_all_in_use: bool,
    /// Where XSAVE's standard format puts each component on the recording's CPU (CPUID leaf
    /// 0DH): not the same on every processor (AMD's Zen 4 differs from Intel's). Absent in
    /// recordings made before it was recorded: Intel's then, on an Intel CPU, and unknown
    /// beyond the AVX component elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xsave_layout: Option<super::XsaveLayout>,
}

/// The kind of an image copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageKind {
    /// An ELF file from disk (executable, interpreter, shared object).
    Elf,
    /// The vDSO, copied from the process's memory.
    Vdso,
    /// A relocatable object (a kernel module `.ko`, or a `.o` a program loaded the way the
    /// kernel loads modules), with one address per allocated section.
    Relocatable,
}

/// An image the traced code ran from, copied into the recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// Where it was on the recording machine (or `[vdso]`).
    pub path: String,
    /// The copy, relative to the recording.
    pub file: String,
    /// Where its first segment was mapped.
    #[serde(with = "hex")]
    pub load_address: u64,
    /// ELF file or vDSO.
    pub kind: ImageKind,
    /// The GNU build-id, where the file has one.
    pub build_id: Option<String>,
    /// SHA-256 of the copy.
    pub sha256: String,
    /// For a relocatable object: each allocated section's address, by name (as
    /// `/sys/module/NAME/sections/` lists them).
    #[serde(
        default,
        skip_serializing_if = "std::collections::BTreeMap::is_empty",
        with = "hex::map"
    )]
    pub sections: std::collections::BTreeMap<String, u64>,
    /// For a relocatable object: the addresses of the symbols it uses but does not define
    /// (a module's kernel functions, from kallsyms), so its relocations against them are
    /// applied as the kernel applied them.
    #[serde(
        default,
        skip_serializing_if = "std::collections::BTreeMap::is_empty",
        with = "hex::map"
    )]
    pub externals: std::collections::BTreeMap<String, u64>,
}

impl ImageRecord {
    /// The gdb command that loads a relocatable image's symbols at its section addresses
    /// (`add-symbol-file FILE -s .text ADDR -s .data ADDR ...`), as one does for a `.ko`;
    /// `None` for other images, whose symbols gdb finds by itself.
    pub fn add_symbol_file_command(&self, recording: &Path) -> Option<String> {
        if self.kind != ImageKind::Relocatable {
            return None;
        }
        let mut cmd = format!("add-symbol-file {}", recording.join(&self.file).display());
        for (name, addr) in &self.sections {
            cmd.push_str(&format!(" -s {name} {addr:#x}"));
        }
        Some(cmd)
    }
}

/// Trace bytes that were lost before a trace offset (the output region wrapped before rtit
/// copied them out, §2.3): the history has a gap there and resumes at the next IP the trace
/// gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceGap {
    /// Offset in `trace.rtit` of the first byte after the loss (a PSB).
    pub offset: u64,
    /// How many bytes were lost, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_bytes: Option<u64>,
}

/// How the recorded run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum EndState {
    /// It exited with this status.
    Exited {
        /// Exit status.
        code: i32,
    },
    /// A signal killed it.
    Signaled {
        /// Signal number.
        signal: i32,
        /// Signal name (SIGSEGV).
        name: String,
        /// The faulting address, for a fault.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        address: Option<String>,
        /// The instruction that faulted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ip: Option<String>,
    },
    /// `rtit record` was interrupted (SIGINT, SIGTERM, SIGHUP); the recording holds what ran
    /// until then.
    Interrupted {
        /// The signal `rtit record` received (`SIGTERM`); absent in recordings from before
        /// it was kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<String>,
    },
    /// Recording stopped at something not supported (threads, execve); the program was
    /// left to run on, unrecorded (issue 43: a refused program is not harmed).
    Unsupported {
        /// What.
        reason: String,
        /// How the program ended after that, unrecorded, where the recorder saw it
        /// (absent in recordings from before the program was let run on).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        afterwards: Option<Box<EndState>>,
    },
    /// It called `execve`, which replaced it with another program: the recording of that
    /// program goes on in `next` (issue 43: execve is followed). The history ends with the
    /// `syscall` instruction, as at `exit_group`.
    Exec {
        /// The program it ran, as the kernel found it (a script's is the script's path).
        program: String,
        /// The recording of the program it ran, relative to this recording's directory;
        /// absent if that program was not recorded (rtit was stopped first).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next: Option<String>,
    },
}

impl std::fmt::Display for EndState {
    /// One line about how the run ended, for people.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exited { code } => write!(f, "exited with status {code}"),
            Self::Signaled { name, address, ip, .. } => {
                write!(f, "killed by {name}")?;
                if let Some(ip) = ip {
                    write!(f, " at {ip}")?;
                }
                if let Some(a) = address {
                    write!(f, " (address {a})")?;
                }
                Ok(())
            }
            Self::Interrupted { signal } => write!(
                f,
                "interrupted (rtit record received {})",
                signal.as_deref().unwrap_or("a signal to stop")
            ),
            Self::Unsupported { reason, afterwards } => {
                write!(f, "stopped: {reason}")?;
                match afterwards {
                    Some(end) => write!(f, "; the program ran on unrecorded and {}", end.as_afterwards()),
                    None => Ok(()),
                }
            }
            Self::Exec { program, next } => {
                write!(f, "ran execve of {program}")?;
                match next {
                    Some(next) => write!(f, ", recorded in {next}"),
                    None => write!(f, ", which was not recorded"),
                }
            }
        }
    }
}

impl EndState {
    /// How the program ended, to follow "it ran on unrecorded and": `exited with status 0`,
    /// `was killed by SIGTERM`.
    pub fn as_afterwards(&self) -> String {
        match self {
            Self::Signaled { .. } => format!("was {self}"),
            _ => self.to_string(),
        }
    }

    /// The exit status a shell would show for the program (its exit code, or 128 + the
    /// signal that killed it), where known: `rtit record` leaves with it.
    pub fn program_status(&self) -> Option<u8> {
        match self {
            Self::Exited { code } => Some(*code as u8),
            Self::Signaled { signal, .. } => Some(128u8.wrapping_add(*signal as u8)),
            Self::Interrupted { .. } => None,
            Self::Unsupported { afterwards, .. } => afterwards.as_ref().and_then(|a| a.program_status()),
            // The program it ran ends the process: its recording's end says how.
            Self::Exec { .. } => None,
        }
    }
}

/// The manifest of a recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// The command line recorded.
    pub command: Vec<String>,
    /// Its working directory.
    pub cwd: String,
    /// How many environment variables it had.
    pub environment_variables: usize,
    /// The backend that recorded it (step, qemu, msr).
    pub backend: String,
    /// The CPU.
    pub cpu: CpuInfo,
    /// RTIT configuration.
    pub rtit: RtitRegisters,
    /// The CR3 value RTIT_CR3_MATCH filtered on.
    #[serde(with = "hex")]
    pub cr3: u64,
    /// Whether ASLR was left on.
    pub aslr: bool,
    /// Where tracing started.
    #[serde(with = "hex")]
    pub start_ip: u64,
    /// Trace size in bytes.
    pub trace_bytes: u64,
    /// Where trace bytes were lost (a wrap of the output region), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<TraceGap>,
    /// Instructions traced.
    pub instructions: u64,
    /// With kernel tracing: the run-time address of the kernel's `_text` (from kallsyms), the
    /// base its KASLR slide is measured from.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "hex::option")]
    pub kernel_text: Option<u64>,
    /// Image copies.
    pub images: Vec<ImageRecord>,
    /// Registers when tracing started and when it ended (name → value).
    pub registers_start: std::collections::BTreeMap<String, String>,
    /// Registers at the end (before the exit system call, or at the fault).
    pub registers_end: std::collections::BTreeMap<String, String>,
    /// How it ended.
    pub end: EndState,
    /// What the trace's bytes leave unsaid at its end; absent where the recorder could not
    /// know it (the msr backend counts by decoding) and in version 1 recordings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_end: Option<TraceEndRecord>,
    /// Processes the recorded one created (fork, vfork, clone without CLONE_THREAD): they
    /// ran unrecorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildProcess>,
    /// What the recorder warned about (a set-user-ID program run without its privileges...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// What every file held when the recording was finished (absent in recordings made
    /// before rtit sealed them). Always the last field: the manifest's own hash is found at
    /// the end of its text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<super::seal::Seal>,
}

/// The end of the trace as the recorder saw it when tracing stopped: the TNT bits still in
/// RTIT_TNT_BUFF (§4.2.2: "the RTIT analyzer may need to manually read out the contents of
/// RTIT_TNT_BUFF"; clearing TriggerEn need not flush them, §4.2.8). With the manifest's
/// instruction count it lets the decoder reconstruct exactly the instructions that ran after
/// the last packet, and tells a trace that ends early from one that is whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEndRecord {
    /// RTIT_TNT_BUFF as RDMSR returned it (1: empty; otherwise the bits behind a leading 1,
    /// as in a TNT header, §3.3.13).
    #[serde(with = "hex")]
    pub tnt_buff: u64,
}

/// A process the recorded program created, which ran without being recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildProcess {
    /// The position of the system call that created it.
    pub position: u64,
    /// `fork`, `vfork`, `clone` or `clone3`.
    pub syscall: String,
    /// Its process id, where the call returned one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i64>,
}

/// A mapping of the process's address space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    /// First address.
    #[serde(with = "hex")]
    pub start: u64,
    /// One past the last.
    #[serde(with = "hex")]
    pub end: u64,
    /// `r-xp` and so on.
    pub perms: String,
    /// Offset in the file.
    #[serde(with = "hex")]
    pub offset: u64,
    /// The file or pseudo-name (`[stack]`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// A change of the memory map, at a trace position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapChange {
    /// Instructions traced before it took effect.
    pub position: u64,
    /// The system call that made it.
    pub syscall: String,
    /// Mappings that appeared or changed.
    pub added: Vec<Mapping>,
    /// Mappings that went away or changed.
    pub removed: Vec<Mapping>,
    /// For `mmap`: the range the call mapped, [start, end) (the kernel may merge it with a
    /// neighbour, which keeps its bytes, so `added` alone does not tell what is new).
    #[serde(default, with = "crate::hex::option", skip_serializing_if = "Option::is_none")]
    pub mapped_start: Option<u64>,
    /// Its end.
    #[serde(default, with = "crate::hex::option", skip_serializing_if = "Option::is_none")]
    pub mapped_end: Option<u64>,
}

/// `maps.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Maps {
    /// The map when tracing started.
    pub initial: Vec<Mapping>,
    /// Every change, in order.
    pub changes: Vec<MapChange>,
}

/// One region of a memory snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryRegion {
    /// The mapping it comes from (start and end narrowed to what was read).
    pub mapping: Mapping,
    /// Where its bytes are in the snapshot file.
    pub file_offset: u64,
    /// It holds only zeros, and no bytes are stored for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub zero: bool,
}

/// `memory.json`: where the snapshots' bytes come from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryIndex {
    /// The bound on each snapshot, in bytes; 0: none (every writable mapping whole).
    pub bound: u64,
    /// Regions of `memory-start.bin`.
    pub start: Vec<MemoryRegion>,
    /// Whether the start snapshot was cut short by the bound.
    pub start_truncated: bool,
    /// Regions of `memory-end.bin`.
    pub end: Vec<MemoryRegion>,
    /// Whether the end snapshot was cut short.
    pub end_truncated: bool,
}

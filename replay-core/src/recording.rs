//! The recording format, version 1, and its reader.
//!
//! A recording is a directory:
//! ```text
//! manifest.json   what was recorded, how, and how it ended (Manifest)
//! trace.rtit      the raw packet bytes, exactly as the RTIT unit (or its model) wrote them
//! maps.json       the memory map at the start and every change, with its trace position
//! images/         copies of every executed ELF image and the vDSO, named by content
//! memory-start.bin, memory-end.bin + memory.json   bounded stack and writable-data snapshots
//! truth.bin       (with `rtit record --truth`) every retired instruction address, u64 LE
//! truth-regs.jsonl (with --truth) registers at sampled positions
//! syscalls.jsonl  (optional) each system call's result and the memory it wrote
//! ```
//! The writer creates it under a temporary name and renames it when complete, so a directory
//! with a manifest is a finished recording (possibly marked interrupted).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::flow::FlowConfig;
use crate::image::{AddressSpace, Image, ImageError};

/// The `format` field of every manifest.
pub const FORMAT: &str = "rtit-recording";
/// The version this code writes and reads.
pub const VERSION: u32 = 1;
/// File names inside a recording.
pub mod files {
    /// The manifest.
    pub const MANIFEST: &str = "manifest.json";
    /// The packet bytes.
    pub const TRACE: &str = "trace.rtit";
    /// The memory map and its changes.
    pub const MAPS: &str = "maps.json";
    /// Image copies.
    pub const IMAGES: &str = "images";
    /// Retired instruction addresses (optional).
    pub const TRUTH: &str = "truth.bin";
    /// Registers at sampled positions (optional, with the truth).
    pub const TRUTH_REGS: &str = "truth-regs.jsonl";
    /// System calls the recorder logged (optional), one JSON record per line.
    pub const SYSCALLS: &str = "syscalls.jsonl";
    /// Memory snapshot index.
    pub const MEMORY: &str = "memory.json";
    /// Writable memory when tracing started.
    pub const MEMORY_START: &str = "memory-start.bin";
    /// Writable memory at the end.
    pub const MEMORY_END: &str = "memory-end.bin";
}

/// Serde helpers writing `u64` addresses as `"0x…"` strings (JSON numbers lose precision past
/// 2^53).
pub mod hex {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes as a hex string.
    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:#x}"))
    }

    /// Deserializes a hex string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let s = String::deserialize(d)?;
        u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(serde::de::Error::custom)
    }

    /// The same for a map of names to addresses.
    pub mod map {
        use std::collections::BTreeMap;

        use serde::{Deserialize, Deserializer, Serializer};

        /// Serializes the values as hex strings.
        pub fn serialize<S: Serializer>(v: &BTreeMap<String, u64>, s: S) -> Result<S::Ok, S::Error> {
            s.collect_map(v.iter().map(|(k, x)| (k, format!("{x:#x}"))))
        }

        /// Deserializes hex string values.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, u64>, D::Error> {
            BTreeMap::<String, String>::deserialize(d)?
                .into_iter()
                .map(|(k, s)| {
                    u64::from_str_radix(s.trim_start_matches("0x"), 16)
                        .map(|v| (k, v))
                        .map_err(serde::de::Error::custom)
                })
                .collect()
        }
    }

    /// The same for an optional address.
    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};

        /// Serializes as a hex string (`None` is skipped by the field's attributes, or null).
        pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
            match v {
                Some(x) => s.serialize_str(&format!("{x:#x}")),
                None => s.serialize_none(),
            }
        }

        /// Deserializes a hex string or null.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(serde::de::Error::custom))
                .transpose()
        }
    }

    /// The same for a list.
    pub mod vec {
        use serde::{Deserialize, Deserializer, Serializer};

        /// Serializes as hex strings.
        pub fn serialize<S: Serializer>(v: &[u64], s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(v.iter().map(|x| format!("{x:#x}")))
        }

        /// Deserializes hex strings.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
            Vec::<String>::deserialize(d)?
                .iter()
                .map(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(serde::de::Error::custom))
                .collect()
        }
    }
}

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
    /// `rtit record` was interrupted (SIGINT); the recording holds what ran until then.
    Interrupted,
    /// Recording stopped at something not supported (threads, execve).
    Unsupported {
        /// What.
        reason: String,
    },
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
}

/// `memory.json`: where the snapshots' bytes come from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryIndex {
    /// The bound on each snapshot, in bytes.
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

/// A failure to read a recording.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RecordingError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: Arc<std::io::Error>,
    },
    /// Not a recording, or a damaged one.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// An image of the recording failed to load.
    #[error(transparent)]
    Image(#[from] ImageError),
}

fn read(path: &Path) -> Result<Vec<u8>, RecordingError> {
    std::fs::read(path).map_err(|source| RecordingError::Io {
        path: path.display().to_string(),
        source: Arc::new(source),
    })
}

fn json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, RecordingError> {
    serde_json::from_slice(&read(path)?).map_err(|e| RecordingError::Invalid {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

/// Where recordings go unless told otherwise: `$RTIT_DIR`, else `$XDG_DATA_HOME/rtit`, else
/// `~/.local/share/rtit`.
pub fn default_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("RTIT_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(data) = std::env::var_os("XDG_DATA_HOME") {
        return PathBuf::from(data).join("rtit");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".local/share/rtit")
}

/// An opened recording.
#[derive(Debug, Clone)]
pub struct Recording {
    /// Its directory.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
}

impl Recording {
    /// Whether `dir` holds a recording (a manifest).
    pub fn is_recording(dir: &Path) -> bool {
        dir.join(files::MANIFEST).is_file()
    }

    /// Opens the recording in `dir`, checking its format and version.
    pub fn open(dir: &Path) -> Result<Self, RecordingError> {
        let path = dir.join(files::MANIFEST);
        if !path.is_file() {
            return Err(RecordingError::Invalid {
                path: dir.display().to_string(),
                message: "not a recording (no manifest.json)".to_string(),
            });
        }
        let manifest: Manifest = json(&path)?;
        if manifest.format != FORMAT || manifest.version != VERSION {
            return Err(RecordingError::Invalid {
                path: path.display().to_string(),
                message: format!(
                    "format {} version {} (this rtit reads {FORMAT} version {VERSION})",
                    manifest.format, manifest.version
                ),
            });
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            manifest,
        })
    }

    /// The packet bytes.
    pub fn trace(&self) -> Result<Vec<u8>, RecordingError> {
        read(&self.dir.join(files::TRACE))
    }

    /// The memory map and its changes.
    pub fn maps(&self) -> Result<Maps, RecordingError> {
        json(&self.dir.join(files::MAPS))
    }

    /// The gaps of the trace as the flow decoder takes them
    /// ([`crate::flow::FlowDecoder::with_gaps`]).
    pub fn gaps(&self) -> Vec<(usize, Option<u64>)> {
        self.manifest
            .gaps
            .iter()
            .map(|g| (usize::try_from(g.offset).unwrap_or(usize::MAX), g.lost_bytes))
            .collect()
    }

    /// The flow decoder configuration the trace needs.
    pub fn flow_config(&self) -> FlowConfig {
        FlowConfig::from_rtit_ctl(self.manifest.rtit.ctl)
    }

    /// The address space of every image copy at its load address.
    pub fn address_space(&self) -> Result<AddressSpace, RecordingError> {
        let mut space = AddressSpace::new();
        for image in &self.manifest.images {
            let path = self.dir.join(&image.file);
            let bytes = read(&path)?;
            let name = image.path.clone();
            let loaded = match image.kind {
                ImageKind::Elf | ImageKind::Vdso => {
                    let bias = image
                        .load_address
                        .wrapping_sub(crate::image::lowest_vaddr(&name, &bytes)?);
                    Image::from_elf(&name, bytes, bias)?
                }
                ImageKind::Relocatable => {
                    let (sections, externals) = (&image.sections, &image.externals);
                    Image::relocatable_from_bytes(&name, bytes, &|s| sections.get(s).copied(), &|s| {
                        externals.get(s).copied()
                    })?
                }
            };
            space.add(loaded)?;
        }
        Ok(space)
    }

    /// Where the memory snapshots' bytes come from.
    pub fn memory_index(&self) -> Result<MemoryIndex, RecordingError> {
        json(&self.dir.join(files::MEMORY))
    }

    /// The retired instruction addresses `rtit record --truth` wrote, if any.
    pub fn truth(&self) -> Result<Option<Vec<u64>>, RecordingError> {
        let path = self.dir.join(files::TRUTH);
        if !path.exists() {
            return Ok(None);
        }
        let bytes = read(&path)?;
        Ok(Some(
            bytes
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
        ))
    }

    /// The system calls the recorder logged (none if it logged none).
    pub fn syscalls(&self) -> Result<Vec<crate::syscall::SyscallRecord>, RecordingError> {
        let path = self.dir.join(files::SYSCALLS);
        if !path.exists() {
            return Ok(Vec::new());
        }
        json_lines(&path)
    }

    /// The registers `rtit record --truth` sampled: (position, name → value), if any.
    pub fn truth_registers(&self) -> Result<Option<Vec<TruthSample>>, RecordingError> {
        let path = self.dir.join(files::TRUTH_REGS);
        if !path.exists() {
            return Ok(None);
        }
        json_lines(&path).map(Some)
    }
}

/// A file of one JSON value per line (blank lines skipped); an error names the line.
fn json_lines<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, RecordingError> {
    let text = read(path)?;
    String::from_utf8_lossy(&text)
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| RecordingError::Invalid {
                path: path.display().to_string(),
                message: format!("line {}: {e}", i + 1),
            })
        })
        .collect()
}

/// One line of `truth-regs.jsonl`: the registers before the instruction at a position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruthSample {
    /// The position.
    pub position: u64,
    /// Name → value (hex).
    pub registers: std::collections::BTreeMap<String, String>,
}

//! The recording format, version 1, and its reader.
//!
//! A recording is a directory:
//! ```text
//! manifest.json   what was recorded, how, and how it ended (Manifest)
//! trace.rtit      the raw packet bytes, exactly as the RTIT unit (or its model) wrote them
//! maps.json       the memory map at the start and every change, with its trace position
//! images/         copies of every executed ELF image and the vDSO, named by content
//! memory-start.bin, memory-end.bin + memory.json   bounded stack and writable-data snapshots
//! truth.bin       (with `rtit record --truth`) every retired instruction address (see `truth`)
//! truth-regs.jsonl (with --truth) registers at sampled positions
//! syscalls.jsonl  (optional) each system call's result and the memory it wrote
//! results.jsonl   (optional) what cpuid, rdtsc, rdtscp and xgetbv returned, where they ran
//! signals.jsonl   (optional) the registers at each signal handler's entry and the frame
//! ```
//! The writer creates it under a temporary name and renames it when complete, so a directory
//! with a manifest is a finished recording (possibly marked interrupted).

pub mod anchors;
pub mod code_ran;
pub mod cpuid;
mod error;
pub use crate::hex;
mod manifest;
mod read;
pub mod read_at;
pub mod seal;
pub mod sync_points;
pub mod truth;
pub use read::SealChecked;
mod validate;
pub mod xsave_layout;

pub use error::RecordingError;
pub use manifest::*;
pub use xsave_layout::XsaveLayout;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::flow::{FlowConfig, FlowDecoder, TraceEnd};
use crate::image::{AddressSpace, Image};
use crate::packet::Tnt;

/// The `format` field of every manifest.
pub const FORMAT: &str = "rtit-recording";
/// The version this code writes. Version 3 is sealed ([`seal`]): a version 3 manifest without
/// a seal is refused. Version 2 counts only the instructions the trace holds (not those an IP
/// filter left out) and adds the end of the trace; version 1 recordings are read, and their
/// counts are taken as approximate.
pub const VERSION: u32 = 3;
/// The first version every recording of is sealed.
pub const SEALED_SINCE: u32 = 3;
/// The oldest version this code reads.
pub const OLDEST_VERSION: u32 = 1;
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
    /// Results of instructions the trace cannot tell (cpuid, rdtsc …).
    pub const RESULTS: &str = "results.jsonl";
    /// What CPUID returns on the recording's CPU model, leaf by leaf (qemu backend).
    pub const CPUID: &str = "cpuid.json";
    /// Signal deliveries: registers at the handler and the frame the kernel wrote.
    pub const SIGNALS: &str = "signals.jsonl";
    /// Memory snapshot index.
    pub const MEMORY: &str = "memory.json";
    /// Writable memory when tracing started.
    pub const MEMORY_START: &str = "memory-start.bin";
    /// Writable memory at the end.
    pub const MEMORY_END: &str = "memory-end.bin";
    /// Whole states taken while the program ran (optional): registers and pages written.
    pub const ANCHORS: &str = "anchors.jsonl";
    /// The anchors' pages.
    pub const ANCHOR_PAGES: &str = "anchor-pages.bin";
    /// Which code pages each stretch of the history ran (optional, qemu backend).
    pub const CODE_RAN: &str = "code-ran.bin";
    /// Places where a decode can start exactly (optional, qemu backend).
    pub const SYNC_POINTS: &str = "sync-points.bin";
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
    /// Whether its anchors are left unread ([`Self::ignoring_anchors`]).
    anchors_ignored: bool,
}

impl Recording {
    /// Whether `dir` holds a recording (a manifest).
    pub fn is_recording(dir: &Path) -> bool {
        dir.join(files::MANIFEST).is_file()
    }

    /// Opens the recording in `dir`, checking its format and version, its seal (the
    /// manifest as written, every file it lists there) and its fields.
    pub fn open(dir: &Path) -> Result<Self, RecordingError> {
        Self::open_as(dir, true)
    }

    /// Opens a recording being written, before the writer seals it: the writer's own step
    /// that decodes it to complete it (the msr backend counts instructions so).
    pub fn open_unfinished(dir: &Path) -> Result<Self, RecordingError> {
        Self::open_as(dir, false)
    }

    fn open_as(dir: &Path, finished: bool) -> Result<Self, RecordingError> {
        let path = dir.join(files::MANIFEST);
        if !dir.is_dir() {
            return Err(RecordingError::Invalid {
                path: dir.display().to_string(),
                message: "no such directory".to_string(),
            });
        }
        // Anything in the manifest's place (a FIFO, a link) is read, and refused, as itself.
        if path.symlink_metadata().is_err() {
            return Err(RecordingError::Invalid {
                path: dir.display().to_string(),
                message: "not a recording (no manifest.json)".to_string(),
            });
        }
        let text = crate::plain_file::read(&path, Some(dir), read::JSON_LIMIT)?;
        let manifest: Manifest = parse(&path, &text)?;
        if manifest.format != FORMAT || !(OLDEST_VERSION..=VERSION).contains(&manifest.version) {
            return Err(RecordingError::Invalid {
                path: path.display().to_string(),
                message: format!(
                    "format {} version {} (this rtit reads {FORMAT} versions {OLDEST_VERSION} to {VERSION})",
                    manifest.format, manifest.version
                ),
            });
        }
        match &manifest.seal {
            Some(seal) => seal::check_manifest(&path, &text, seal)?,
            None if finished && manifest.version >= SEALED_SINCE => {
                return Err(RecordingError::Invalid {
                    path: path.display().to_string(),
                    message: format!(
                        "no seal, which every version {} recording has: the manifest was changed after recording",
                        manifest.version
                    ),
                })
            }
            None => {}
        }
        validate::manifest(&path, &manifest)?;
        let recording = Self {
            dir: dir.to_path_buf(),
            manifest,
            anchors_ignored: false,
        };
        recording.check_present()?;
        Ok(recording)
    }

    /// Whether the recording carries a seal: recordings made before rtit sealed them cannot
    /// tell a file changed after recording from the one written.
    pub fn sealed(&self) -> bool {
        self.manifest.seal.is_some()
    }

    /// The packet bytes. A trace shorter than the recorder wrote is returned with its whole
    /// pieces checked ([`Self::check_complete`] then says it is incomplete); any other
    /// difference from what was written is an error.
    pub fn trace(&self) -> Result<Vec<u8>, RecordingError> {
        let path = self.dir.join(files::TRACE);
        let (bytes, _) = self
            .read_checked(files::TRACE)?
            .ok_or_else(|| RecordingError::Invalid {
                path: path.display().to_string(),
                message: "missing: every recording has it".to_string(),
            })?;
        validate::trace(&path, &bytes)?;
        Ok(bytes)
    }

    /// The seal's hashes of a trace of `trace_len` bytes, which [`Self::trace`] checked: only
    /// for a sealed recording whose trace is whole (a shorter one's last piece is unchecked).
    pub fn trace_hashes(&self, trace_len: usize) -> Option<&[String]> {
        let sealed = self.manifest.seal.as_ref()?.files.get(files::TRACE)?;
        (sealed.bytes == trace_len as u64).then_some(sealed.blake3.as_slice())
    }

    /// The memory map and its changes.
    pub fn maps(&self) -> Result<Maps, RecordingError> {
        let path = self.dir.join(files::MAPS);
        let maps = parse(&path, &self.read_required(files::MAPS)?)?;
        validate::maps(&path, &maps, self.history_bound())?;
        Ok(maps)
    }

    /// Whether the recording has a memory map (recordings of raw traces have none).
    pub fn has_maps(&self) -> bool {
        self.dir.join(files::MAPS).symlink_metadata().is_ok()
    }

    /// Whether every instruction that ran has a position of its own, so that two logged
    /// system calls or results never share one: no IP filter (RTIT_EVENTS' filter event 111,
    /// always, §3.3.5), nothing lost, and positions counted as the program ran (the msr
    /// backend finds them by decoding, where a loss of trace bytes would merge them).
    fn own_positions(&self) -> bool {
        let m = &self.manifest;
        m.rtit.events & 0b111 == 0b111 && m.gaps.is_empty() && m.backend != "msr"
    }

    /// The most positions a record of the logs may name: the instructions the trace holds
    /// (a map change or handler entry may lie at its very end); `None` for a version 1
    /// recording, whose count is approximate.
    fn history_bound(&self) -> Option<u64> {
        (self.manifest.version >= 2).then_some(self.manifest.instructions)
    }

    /// What the trace's bytes leave unsaid at its end, for the flow decoder: the bits left
    /// in RTIT_TNT_BUFF and the instruction count (absent for a recorder that could not know
    /// them). They describe the end of the whole trace: a trace of `trace_len` bytes that is
    /// not all of it has none, so its decode stops where its bytes do, and the count
    /// reported for it is what they hold.
    pub fn trace_end(&self, trace_len: usize) -> Option<TraceEnd> {
        if trace_len as u64 != self.manifest.trace_bytes {
            return None;
        }
        let end = self.manifest.trace_end?;
        Some(TraceEnd {
            tnt_buff: Tnt::from_header(end.tnt_buff as u8),
            instructions: self.manifest.instructions,
        })
    }

    /// A flow decoder of `trace` (this recording's) set up as the recording needs: packet
    /// format, lost stretches (`gaps`, from [`Self::gaps`]) and the end of the trace.
    pub fn decoder<'a>(
        &self,
        trace: &'a [u8],
        space: &'a AddressSpace,
        gaps: &'a [(usize, Option<u64>)],
    ) -> FlowDecoder<'a> {
        FlowDecoder::new(trace, self.flow_config(), space)
            .with_gaps(gaps)
            .with_end(self.trace_end(trace.len()))
    }

    /// What the timeline is decoded from, on every core ([`crate::timeline::parallel`]):
    /// `trace` (this recording's) with its packet format, lost stretches and end.
    pub fn decode_input<'a>(
        &self,
        trace: &'a [u8],
        space: &'a AddressSpace,
        gaps: &'a [(usize, Option<u64>)],
    ) -> crate::timeline::parallel::Input<'a> {
        crate::timeline::parallel::Input {
            trace,
            config: self.flow_config(),
            space,
            gaps,
            end: self.trace_end(trace.len()),
        }
    }

    /// Whether the trace holds everything the recorder wrote down: all its bytes, and exactly
    /// the instructions the manifest counts (`decoded`: those the history shows and those
    /// it counts without showing). Where the program spun an unknown number of times in a
    /// loop the trace cannot count (`spun`), the history may only hold fewer. A version 1
    /// recording's count may be a few instructions off (its recorder did not keep the end of
    /// the trace), so only its bytes are checked.
    pub fn check_complete(&self, trace_len: usize, decoded: u64, spun: bool) -> Result<(), RecordingError> {
        let m = &self.manifest;
        let counted = m.version < 2 || decoded == m.instructions || (spun && decoded < m.instructions);
        match trace_len as u64 == m.trace_bytes && counted {
            true => Ok(()),
            false => Err(self.incomplete(trace_len, Some(decoded))),
        }
    }

    /// Whether the trace (`trace_len` bytes) is all the recorder wrote, before decoding it:
    /// an error that says where it ends, without a count of what it decodes to.
    pub fn check_length(&self, trace_len: usize) -> Result<(), RecordingError> {
        match trace_len as u64 == self.manifest.trace_bytes {
            true => Ok(()),
            false => Err(self.incomplete(trace_len, None)),
        }
    }

    fn incomplete(&self, trace_len: usize, decoded: Option<u64>) -> RecordingError {
        RecordingError::Incomplete {
            path: self.dir.display().to_string(),
            trace_len: trace_len as u64,
            trace_bytes: self.manifest.trace_bytes,
            expected: self.manifest.instructions,
            decoded,
        }
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
        let rtit = &self.manifest.rtit;
        match <[u64; 4]>::try_from(rtit.lip.as_slice()) {
            Ok(lip) => FlowConfig::from_rtit(rtit.ctl, rtit.events, lip),
            Err(_) => FlowConfig::from_rtit_ctl(rtit.ctl),
        }
    }

    /// Checks every image copy against the hash the recorder wrote, without loading it.
    pub fn verify_images(&self) -> Result<(), RecordingError> {
        for image in &self.manifest.images {
            self.image_bytes(image)?;
        }
        Ok(())
    }

    /// The address space of every image copy at its load address.
    pub fn address_space(&self) -> Result<AddressSpace, RecordingError> {
        let mut space = AddressSpace::new();
        for image in &self.manifest.images {
            let bytes = self.image_bytes(image)?;
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
        // Image pages the program made writable may hold code it rewrote (see
        // `AddressSpace::mark_writable`); a recording without a map has none to tell.
        if self.has_maps() {
            let maps = self.maps()?;
            let added = maps.changes.iter().flat_map(|c| &c.added);
            for m in maps.initial.iter().chain(added).filter(|m| m.perms.contains('w')) {
                space.mark_writable(m.start, m.end);
            }
        }
        Ok(space)
    }

    /// Where the memory snapshots' bytes come from (`None`: the recording has no snapshots).
    pub fn memory_index(&self) -> Result<Option<MemoryIndex>, RecordingError> {
        let path = self.dir.join(files::MEMORY);
        let Some(text) = self.read_optional(files::MEMORY)? else {
            return Ok(None);
        };
        let index = parse(&path, &text)?;
        validate::memory_index(&path, &index)?;
        Ok(Some(index))
    }

    /// A memory snapshot's regions with their bytes: `end` false for the start snapshot,
    /// true for the end one. A recording without snapshots has none.
    pub fn snapshot(&self, end: bool) -> Result<Vec<(u64, Vec<u8>)>, RecordingError> {
        let index_path = self.dir.join(files::MEMORY);
        let Some(index) = self.memory_index()? else {
            return Ok(Vec::new());
        };
        let (which, file, regions) = match end {
            false => ("start", files::MEMORY_START, &index.start),
            true => ("end", files::MEMORY_END, &index.end),
        };
        if regions.is_empty() {
            return Ok(Vec::new());
        }
        let bytes = if regions.iter().all(|r| r.zero) {
            Vec::new()
        } else {
            self.read_required(file)?
        };
        validate::snapshot(&index_path, which, regions, file, bytes.len() as u64)?;
        Ok(regions
            .iter()
            .map(|r| {
                let len = (r.mapping.end - r.mapping.start) as usize;
                if r.zero {
                    return (r.mapping.start, vec![0; len]);
                }
                let from = r.file_offset as usize;
                (r.mapping.start, bytes[from..from + len].to_vec())
            })
            .collect())
    }

    /// The retired instruction addresses `rtit record --truth` wrote, if any.
    pub fn truth(&self) -> Result<Option<Vec<u64>>, RecordingError> {
        let path = self.dir.join(files::TRUTH);
        let Some(bytes) = self.read_optional(files::TRUTH)? else {
            return Ok(None);
        };
        truth::decode(&bytes)
            .map(Some)
            .map_err(|message| RecordingError::Invalid {
                path: path.display().to_string(),
                message,
            })
    }

    /// The system calls the recorder logged (none if it logged none).
    pub fn syscalls(&self) -> Result<Vec<crate::syscall::SyscallRecord>, RecordingError> {
        let records = self.json_lines(files::SYSCALLS)?.unwrap_or_default();
        validate::syscalls(
            &self.dir.join(files::SYSCALLS),
            &records,
            self.history_bound(),
            self.own_positions(),
        )?;
        Ok(records)
    }

    /// The results of instructions the recorder logged (none if it logged none).
    pub fn results(&self) -> Result<Vec<InsnResult>, RecordingError> {
        let records = self.json_lines(files::RESULTS)?.unwrap_or_default();
        validate::results(
            &self.dir.join(files::RESULTS),
            &records,
            self.history_bound(),
            self.own_positions(),
        )?;
        Ok(records)
    }

    /// The CPUID table of the recording's CPU model (empty if it has none).
    pub fn cpuid(&self) -> Result<Vec<cpuid::CpuidLeaf>, RecordingError> {
        let path = self.dir.join(files::CPUID);
        let Some(text) = self.read_optional(files::CPUID)? else {
            return Ok(Vec::new());
        };
        let table: Vec<cpuid::CpuidLeaf> = serde_json::from_slice(&text).map_err(|e| RecordingError::Invalid {
            path: path.display().to_string(),
            message: format!("not a CPUID table: {e}"),
        })?;
        validate::cpuid(&path, &table)?;
        Ok(table)
    }

    /// The signal deliveries the recorder logged (none if it logged none).
    pub fn signals(&self) -> Result<Vec<SignalEntry>, RecordingError> {
        let records = self.json_lines(files::SIGNALS)?.unwrap_or_default();
        validate::signals(&self.dir.join(files::SIGNALS), &records, self.history_bound())?;
        Ok(records)
    }

    /// The registers `rtit record --truth` sampled: (position, name → value), if any.
    pub fn truth_registers(&self) -> Result<Option<Vec<TruthSample>>, RecordingError> {
        let Some(samples) = self.json_lines::<TruthSample>(files::TRUTH_REGS)? else {
            return Ok(None);
        };
        let positions = samples.iter().map(|s| s.position);
        validate::in_order(
            &self.dir.join(files::TRUTH_REGS),
            positions,
            self.history_bound(),
            false,
        )?;
        Ok(Some(samples))
    }

    /// A file of one JSON value per line (blank lines skipped), none if the recording has no
    /// such file; an error names the line.
    pub(super) fn json_lines<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
    ) -> Result<Option<Vec<T>>, RecordingError> {
        let path = self.dir.join(name);
        let Some(text) = self.read_optional(name)? else {
            return Ok(None);
        };
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
            .collect::<Result<_, _>>()
            .map(Some)
    }
}

/// A JSON file's value; an error names the file.
fn parse<T: serde::de::DeserializeOwned>(path: &Path, text: &[u8]) -> Result<T, RecordingError> {
    serde_json::from_slice(text).map_err(|e| RecordingError::Invalid {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

/// One line of `results.jsonl`: the registers an instruction whose result the trace cannot
/// tell (cpuid, rdtsc, rdtscp, xgetbv) wrote, as the recorder saw them after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InsnResult {
    /// The instruction's position.
    pub position: u64,
    /// Its address (a record whose address is not the history's there is ignored).
    #[serde(with = "hex")]
    pub ip: u64,
    /// Name → value (hex) of the registers it wrote.
    pub after: std::collections::BTreeMap<String, String>,
}

/// One line of `signals.jsonl`: a signal handler's entry, where the kernel set every register
/// and wrote a signal frame that the trace cannot show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalEntry {
    /// The position of the handler's first instruction.
    pub position: u64,
    /// Its address (a record whose address is not the history's there is ignored).
    #[serde(with = "hex")]
    pub ip: u64,
    /// Name → value (hex) of every register there.
    pub registers: std::collections::BTreeMap<String, String>,
    /// The stack from the handler's stack pointer up: the frame, and what lies above it.
    pub frame: crate::syscall::MemoryWrite,
    /// Whether only the kernel ran since the last traced instruction (no untraced user code,
    /// as an IP filter leaves): then the kernel wrote nothing else the program can see.
    #[serde(default)]
    pub only_kernel: bool,
    /// Set where the entry is a switch between threads (the step backend runs them one at a
    /// time in one stream): the registers are the incoming thread's, and there is no frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<ThreadSwitch>,
}

/// Which thread stopped running and which runs from a [`SignalEntry`] on (Linux thread ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadSwitch {
    /// The thread that ran until here.
    pub from: i64,
    /// The thread that runs from here.
    pub to: i64,
}

/// The threads that switch entries name, and how many switches between two of them there
/// are (an entry from and to one thread holds its registers where the recording ends, not a
/// switch); `None` for a recording of one thread.
pub fn threads_and_switches(entries: &[SignalEntry]) -> Option<(usize, usize)> {
    let all = entries.iter().filter_map(|e| e.switch);
    let threads: std::collections::BTreeSet<i64> = all.clone().flat_map(|s| [s.from, s.to]).collect();
    let real = all.filter(|s| s.from != s.to).count();
    (!threads.is_empty()).then_some((threads.len(), real))
}

/// One line of `truth-regs.jsonl`: the registers before the instruction at a position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruthSample {
    /// The position.
    pub position: u64,
    /// Name → value (hex).
    pub registers: std::collections::BTreeMap<String, String>,
}

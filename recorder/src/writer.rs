//! Writes a recording directory (format in `rtit_replay_core::recording`). Everything goes
//! into a temporary sibling directory first, renamed into place when complete, so a directory
//! with a manifest is never half-written; on failure the temporary directory is removed. The
//! last step seals it (`rtit_replay_core::recording::seal`): a file changed afterwards is refused.

use std::io::Write;
use std::path::{Path, PathBuf};

use object::Object;
use rtit_replay_core::recording::{
    files, CpuInfo, ImageKind, ImageRecord, Manifest, MemoryIndex, MemoryRegion, RtitRegisters, FORMAT, VERSION,
};
use sha2::{Digest, Sha256};

use crate::outcome::Outcome;
use crate::sideband::Snapshot;

/// A failure to write a recording.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The output directory exists.
    #[error("{0} already exists; choose another --out or remove it")]
    Exists(String),
    /// Decoding the trace to complete the recording failed.
    #[error(transparent)]
    Complete(#[from] crate::complete::CompleteError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WriteError + '_ {
    move |source| WriteError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// What the writer needs besides the outcome.
#[derive(Debug, Clone)]
pub struct Meta {
    /// The command line recorded.
    pub command: Vec<String>,
    /// The backend's name.
    pub backend: String,
    /// Whether ASLR was left on.
    pub aslr: bool,
}

/// A new directory name under `root` for `program`: `NAME-N` with the first free N.
pub fn default_dir(root: &Path, program: &str) -> PathBuf {
    let base = Path::new(program)
        .file_name()
        .map_or_else(|| "rec".into(), |n| n.to_string_lossy().into_owned());
    (0u32..)
        .map(|n| root.join(format!("{base}-{n}")))
        .find(|p| !p.exists())
        .unwrap_or_else(|| root.join(base))
}

/// Points `root/latest` at `dir`, replacing an older link atomically.
pub fn set_latest(root: &Path, dir: &Path) -> Result<(), WriteError> {
    let link = root.join("latest");
    let tmp = root.join(format!(".latest-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let target = dir.file_name().map_or_else(|| dir.to_path_buf(), PathBuf::from);
    std::os::unix::fs::symlink(&target, &tmp).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &link).map_err(io(&link))
}

/// Writes one JSON value per line, if there are any.
fn write_lines<T: serde::Serialize>(path: &Path, records: &[T]) -> Result<(), WriteError> {
    if records.is_empty() {
        return Ok(());
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).map_err(io(path))?);
    for r in records {
        let line = serde_json::to_string(r).map_err(|e| io(path)(e.into()))?;
        writeln!(f, "{line}").map_err(io(path))?;
    }
    f.flush().map_err(io(path))
}

/// The CPU, from `/proc/cpuinfo` (empty fields where it is unreadable).
pub fn cpu_info() -> CpuInfo {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |key: &str| {
        text.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default()
    };
    CpuInfo {
        vendor: field("vendor_id"),
        model_name: field("model name"),
        family: field("cpu family").parse().unwrap_or(0),
        model: field("model\t").parse().unwrap_or(0),
        stepping: field("stepping").parse().unwrap_or(0),
        xcr0: xcr0(&field("flags")),
        syscall_keeps_registers: false,
        xsave_all_in_use: false,
        xsave_layout: Some(crate::xstate::host_layout()),
        lzcnt: flag(&field("flags"), "abm"),
        bmi1: flag(&field("flags"), "bmi1"),
        logic_clears_af: crate::probe::logic_clears_af(),
    }
}

/// Whether `/proc/cpuinfo`'s flags name `f` (unknown if there are no flags).
fn flag(flags: &str, f: &str) -> Option<bool> {
    (!flags.is_empty()).then(|| flags.split_whitespace().any(|x| x == f))
}

/// A bound of XCR0 (the XSAVE components the kernel enabled) from the CPU features
/// `/proc/cpuinfo` lists: a component the CPU lacks cannot be enabled. Without unsafe code
/// XGETBV is out of reach; the flags give a superset, which is what bounding XSAVEC needs.
fn xcr0(flags: &str) -> Option<u64> {
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    if !has("xsave") {
        return None;
    }
    let mut x = 0b11; // x87, SSE
    for (flag, bits) in [
        ("avx", 1 << 2),
        ("mpx", 0b11 << 3),
        ("avx512f", 0b111 << 5),
        ("pku", 1 << 9),
        ("amx_tile", 0b11 << 17),
    ] {
        if has(flag) {
            x |= bits;
        }
    }
    Some(x)
}

/// Bit `bit` of register `reg` (eax, ebx, ecx, edx) of CPUID `leaf` (subleaf 0) in a table.
fn cpuid_bit(table: &[rtit_replay_core::recording::cpuid::CpuidLeaf], leaf: u32, reg: usize, bit: u32) -> Option<bool> {
    rtit_replay_core::recording::cpuid::lookup(table, leaf, 0).map(|r| r[reg] >> bit & 1 == 1)
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Copies an image into `images/`, named by its content.
fn copy_image(
    tmp: &Path,
    path: &str,
    bytes: &[u8],
    load_address: u64,
    kind: ImageKind,
) -> Result<ImageRecord, WriteError> {
    let hash = sha256(bytes);
    let base = Path::new(path)
        .file_name()
        .map_or_else(|| "vdso".into(), |n| n.to_string_lossy().into_owned());
    let file = format!("{}/{base}-{}", files::IMAGES, &hash[..16]);
    let dest = tmp.join(&file);
    std::fs::write(&dest, bytes).map_err(io(&dest))?;
    let build_id = object::File::parse(bytes).ok().and_then(|f| {
        f.build_id()
            .ok()
            .flatten()
            .map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
    });
    Ok(ImageRecord {
        path: path.to_string(),
        file,
        load_address,
        kind,
        build_id,
        sha256: hash,
        sections: Default::default(),
        externals: Default::default(),
    })
}

/// Writes a snapshot's bytes one region after another; returns where each went, and its zero
/// regions (no bytes stored).
pub fn write_snapshot(path: &Path, snap: &Snapshot) -> Result<Vec<MemoryRegion>, WriteError> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).map_err(io(path))?);
    let mut offset = 0u64;
    let mut regions = Vec::new();
    for (mapping, bytes) in &snap.regions {
        f.write_all(bytes).map_err(io(path))?;
        regions.push(MemoryRegion {
            mapping: mapping.clone(),
            file_offset: offset,
            zero: false,
        });
        offset += bytes.len() as u64;
    }
    regions.extend(snap.zero.iter().map(|mapping| MemoryRegion {
        mapping: mapping.clone(),
        file_offset: 0,
        zero: true,
    }));
    f.flush().map_err(io(path))?;
    Ok(regions)
}

/// Writes `outcome` as a recording at `dir`; returns its manifest.
pub fn write(dir: &Path, outcome: &Outcome, meta: &Meta) -> Result<Manifest, WriteError> {
    if dir.exists() {
        return Err(WriteError::Exists(dir.display().to_string()));
    }
    let name = dir
        .file_name()
        .map_or_else(|| "recording".into(), |n| n.to_string_lossy().into_owned());
    // What writers killed while writing left beside it (SIGKILL: no way out of theirs ran).
    if let Some(parent) = dir.parent() {
        crate::leftovers::remove_ended(parent, unfinished_pid);
    }
    let tmp = dir.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let result = write_into(&tmp, outcome, meta).and_then(|m| {
        std::fs::rename(&tmp, dir).map_err(io(dir))?;
        Ok(m)
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result
}

/// The process id in the name of a recording being written (`.NAME.tmp-PID`).
fn unfinished_pid(name: &str) -> Option<nix::unistd::Pid> {
    let (_, pid) = name.strip_prefix('.')?.rsplit_once(".tmp-")?;
    crate::leftovers::pid_after(pid)
}

fn write_into(tmp: &Path, outcome: &Outcome, meta: &Meta) -> Result<Manifest, WriteError> {
    std::fs::create_dir_all(tmp.join(files::IMAGES)).map_err(io(tmp))?;
    let trace = tmp.join(files::TRACE);
    outcome.trace.place(&trace).map_err(io(&trace))?;
    let maps = tmp.join(files::MAPS);
    let text = serde_json::to_vec_pretty(&outcome.maps).map_err(|e| io(&maps)(e.into()))?;
    std::fs::write(&maps, text).map_err(io(&maps))?;

    let mut images = Vec::new();
    for (path, load) in outcome.images.files() {
        let bytes = std::fs::read(path).map_err(io(Path::new(path)))?;
        images.push(copy_image(tmp, path, &bytes, load, ImageKind::Elf)?);
    }
    if let Some((addr, bytes)) = &outcome.images.vdso {
        images.push(copy_image(tmp, "[vdso]", bytes, *addr, ImageKind::Vdso)?);
    }
    for module in &outcome.modules {
        let bytes = std::fs::read(&module.file).map_err(io(&module.file))?;
        let path = module.file.display().to_string();
        let load = module.sections.values().copied().min().unwrap_or(0);
        let mut record = copy_image(tmp, &path, &bytes, load, ImageKind::Relocatable)?;
        record.sections = module.sections.clone();
        record.externals = module.externals.clone();
        images.push(record);
    }

    let mut index = MemoryIndex {
        bound: 0,
        start_truncated: outcome.memory_start.truncated,
        end_truncated: outcome.memory_end.truncated,
        ..MemoryIndex::default()
    };
    index.start = write_snapshot(&tmp.join(files::MEMORY_START), &outcome.memory_start)?;
    index.end = write_snapshot(&tmp.join(files::MEMORY_END), &outcome.memory_end)?;
    let path = tmp.join(files::MEMORY);
    let text = serde_json::to_vec_pretty(&index).map_err(|e| io(&path)(e.into()))?;
    std::fs::write(&path, text).map_err(io(&path))?;

    if let Some(truth) = &outcome.truth {
        let path = tmp.join(files::TRUTH);
        std::fs::write(&path, rtit_replay_core::recording::truth::encode(&truth.ips)).map_err(io(&path))?;
        let path = tmp.join(files::TRUTH_REGS);
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io(&path))?);
        for (position, regs) in &truth.samples {
            let line = serde_json::json!({ "position": position, "registers": regs });
            writeln!(f, "{line}").map_err(io(&path))?;
        }
        f.flush().map_err(io(&path))?;
    }

    match &outcome.syscalls_file {
        // Renamed where the file system allows (the plugin's scratch directory is in /tmp).
        Some(from) => {
            let to = tmp.join(files::SYSCALLS);
            std::fs::rename(from, &to)
                .or_else(|_| std::fs::copy(from, &to).map(|_| ()))
                .map_err(io(from))?;
        }
        None => write_lines(&tmp.join(files::SYSCALLS), &outcome.syscalls)?,
    }
    // The anchors, if any was taken (moved as the system calls are).
    if let Some(paths) = &outcome.anchor_files {
        let taken = std::fs::metadata(&paths[0]).is_ok_and(|m| m.len() > 0);
        for (from, name) in paths
            .iter()
            .zip([files::ANCHORS, files::ANCHOR_PAGES])
            .filter(|_| taken)
        {
            let to = tmp.join(name);
            std::fs::rename(from, &to)
                .or_else(|_| std::fs::copy(from, &to).map(|_| ()))
                .map_err(io(from))?;
        }
    }
    for (from, name) in [
        (&outcome.code_file, files::CODE_RAN),
        (&outcome.sync_file, files::SYNC_POINTS),
    ] {
        if let Some(from) = from {
            let to = tmp.join(name);
            std::fs::rename(from, &to)
                .or_else(|_| std::fs::copy(from, &to).map(|_| ()))
                .map_err(io(from))?;
        }
    }
    write_lines(&tmp.join(files::RESULTS), &outcome.results)?;
    write_lines(&tmp.join(files::SIGNALS), &outcome.signals)?;
    if !outcome.cpuid.is_empty() {
        let path = tmp.join(files::CPUID);
        let text = serde_json::to_vec(&outcome.cpuid).map_err(|e| io(&path)(e.into()))?;
        std::fs::write(&path, text).map_err(io(&path))?;
    }

    let c = &outcome.config;
    let manifest = Manifest {
        format: FORMAT.to_string(),
        version: VERSION,
        command: meta.command.clone(),
        cwd: std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
        environment_variables: std::env::vars_os().count(),
        backend: meta.backend.clone(),
        cpu: CpuInfo {
            // The program ran on QEMU's CPU model, whose XSAVE state is QEMU's.
            // Under QEMU, what its CPU model supports (CPUID leaf 0xd) bounds its XCR0.
            xcr0: match meta.backend.as_str() {
                "qemu" => rtit_replay_core::recording::cpuid::lookup(&outcome.cpuid, 0xd, 0)
                    .map(|r| u64::from(r[0]) | u64::from(r[3]) << 32),
                _ => outcome.xcr0.or(cpu_info().xcr0),
            },
            // QEMU user mode runs a system call without `syscall`'s writes to rcx and r11.
            syscall_keeps_registers: meta.backend == "qemu",
            // QEMU's XSAVE sets XSTATE_BV for every requested component.
            xsave_all_in_use: meta.backend == "qemu",
            // Under QEMU, its CPU model's CPUID: LZCNT is leaf 0x80000001 ECX bit 5, BMI1
            // leaf 7 EBX bit 3.
            lzcnt: match meta.backend.as_str() {
                "qemu" => cpuid_bit(&outcome.cpuid, 0x8000_0001, 2, 5),
                _ => cpu_info().lzcnt,
            },
            bmi1: match meta.backend.as_str() {
                "qemu" => cpuid_bit(&outcome.cpuid, 7, 1, 3),
                _ => cpu_info().bmi1,
            },
            // QEMU computes a logic instruction's flags with AF = 0 (its CC_OP_LOGIC).
            logic_clears_af: match meta.backend.as_str() {
                "qemu" => Some(true),
                _ => crate::probe::logic_clears_af(),
            },
            // Where XSAVE puts each component: QEMU's CPU model's, or this CPU's.
            xsave_layout: match meta.backend.as_str() {
                "qemu" => rtit_replay_core::recording::XsaveLayout::from_table(&outcome.cpuid),
                _ => Some(crate::xstate::host_layout()),
            },
            ..cpu_info()
        },
        rtit: RtitRegisters {
            ctl: c.ctl,
            cr3_match: c.cr3_match,
            events: c.events,
            lip: c.lip.to_vec(),
            pkt_cnt: c.pkt_cnt,
        },
        cr3: outcome.cr3,
        aslr: meta.aslr,
        start_ip: outcome.start_ip,
        trace_bytes: outcome.trace.len(),
        gaps: outcome.gaps.clone(),
        instructions: outcome.instructions,
        kernel_text: outcome.kernel_text,
        images,
        registers_start: outcome.registers_start.clone(),
        registers_end: outcome.registers_end.clone(),
        end: outcome.end.clone(),
        trace_end: outcome.trace_end,
        children: outcome.children.clone(),
        warnings: outcome.warnings.clone(),
        seal: None,
    };
    let path = tmp.join(files::MANIFEST);
    let text = serde_json::to_vec_pretty(&manifest).map_err(|e| io(&path)(e.into()))?;
    std::fs::write(&path, text).map_err(io(&path))?;
    if let Some(from) = &outcome.from_trace {
        crate::complete::from_trace(tmp, from)?;
    }
    // Last: what every file holds now is what a reader will accept.
    let path = tmp.join(files::MANIFEST);
    rtit_replay_core::recording::seal::seal(tmp).map_err(io(&path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unfinished_recordings_of_ended_writers_go_and_others_stay() {
        let root = std::env::temp_dir().join(format!("rtit-writer-leftovers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut child = std::process::Command::new("true").spawn().expect("true");
        child.wait().expect("wait");
        let ended = child.id();
        let names = [
            format!(".sort-0.tmp-{ended}"),
            format!(".sort-1.tmp-{}", std::process::id()),
            format!("sort-2.tmp-{ended}"),
            format!(".sort-3.tmp-0{ended}"),
        ];
        for name in &names {
            std::fs::create_dir_all(root.join(name)).expect("mkdir");
        }
        let removed = crate::leftovers::remove_ended(&root, unfinished_pid);
        assert_eq!(removed, vec![root.join(&names[0])]);
        for name in &names[1..] {
            assert!(root.join(name).is_dir(), "{name} stays");
        }
        std::fs::remove_dir_all(&root).expect("clean up");
    }
}

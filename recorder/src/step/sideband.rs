//! Sideband of a step recording: changes of the memory map, the images to copy, and symbol
//! addresses for `--start`.

use std::collections::{BTreeMap, BTreeSet};

use object::{Object, ObjectKind, ObjectSymbol};
use rtit_replay_core::recording::{MapChange, Mapping};

use super::tracee::Tracee;
use super::{nr, StepError};

/// The images the traced code may run from: every file mapped executable, with the address
/// its offset-0 mapping starts at, and the vDSO's bytes.
#[derive(Debug, Default, Clone)]
pub struct Images {
    /// Load address (start of the offset-0 mapping) by path.
    load: BTreeMap<String, u64>,
    /// Paths mapped executable.
    executable: BTreeSet<String>,
    /// The vDSO: its address and bytes.
    pub vdso: Option<(u64, Vec<u8>)>,
}

impl Images {
    /// The images of the map at the start, with the vDSO read from memory.
    pub fn from_maps(tracee: &Tracee, maps: &[Mapping]) -> Self {
        let mut images = Self::default();
        images.note(maps);
        if let Some(m) = maps.iter().find(|m| m.path.as_deref() == Some("[vdso]")) {
            let mut bytes = vec![0u8; (m.end - m.start) as usize];
            let n = tracee.read(m.start, &mut bytes);
            bytes.truncate(n);
            images.vdso = Some((m.start, bytes));
        }
        images
    }

    /// Takes new mappings into account.
    pub fn note(&mut self, maps: &[Mapping]) {
        for m in maps {
            let Some(path) = m.path.as_deref().filter(|p| p.starts_with('/')) else {
                continue;
            };
            if m.offset == 0 {
                let start = self.load.entry(path.to_string()).or_insert(m.start);
                *start = (*start).min(m.start);
            }
            if m.perms.contains('x') {
                self.executable.insert(path.to_string());
            }
        }
    }

    /// The ELF files to copy, with their load addresses.
    pub fn files(&self) -> impl Iterator<Item = (&str, u64)> {
        self.executable
            .iter()
            .filter_map(|p| self.load.get(p).map(|&a| (p.as_str(), a)))
    }
}

/// At most this many bytes of memory per snapshot: the stack first, then the other writable
/// mappings in address order, each cut short when the bound is reached.
pub const SNAPSHOT_BOUND: usize = 16 << 20;

/// Writable memory at one moment: (mapping, its bytes, possibly cut short).
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// The regions read.
    pub regions: Vec<(Mapping, Vec<u8>)>,
    /// Whether the bound cut something off.
    pub truncated: bool,
}

/// Reads the writable mappings of `maps`, the stack first, up to [`SNAPSHOT_BOUND`] bytes.
pub fn snapshot(tracee: &Tracee, maps: &[Mapping]) -> Snapshot {
    let mut writable: Vec<&Mapping> = maps.iter().filter(|m| m.perms.contains('w')).collect();
    writable.sort_by_key(|m| (m.path.as_deref() != Some("[stack]"), m.start));
    let mut snap = Snapshot::default();
    let mut left = SNAPSHOT_BOUND;
    for m in writable {
        let size = (m.end - m.start) as usize;
        // The stack's live part is at its top: keep the top when cutting it short.
        let take = size.min(left);
        if take < size {
            snap.truncated = true;
        }
        if take == 0 {
            continue;
        }
        let from = if m.path.as_deref() == Some("[stack]") {
            m.end - take as u64
        } else {
            m.start
        };
        let mut bytes = vec![0u8; take];
        let n = tracee.read(from, &mut bytes);
        bytes.truncate(n);
        left -= n;
        let mut region = m.clone();
        region.start = from;
        region.end = from + n as u64;
        snap.regions.push((region, bytes));
    }
    snap
}

/// The system call's name, for the map-change record.
fn syscall_name(syscall: u64) -> &'static str {
    match syscall {
        nr::MMAP => "mmap",
        nr::MPROTECT => "mprotect",
        nr::MUNMAP => "munmap",
        nr::BRK => "brk",
        nr::MREMAP => "mremap",
        _ => "?",
    }
}

/// What changed between two maps, if anything.
pub fn diff(old: &[Mapping], new: &[Mapping], position: u64, syscall: u64) -> Option<MapChange> {
    let added: Vec<Mapping> = new.iter().filter(|m| !old.contains(m)).cloned().collect();
    let removed: Vec<Mapping> = old.iter().filter(|m| !new.contains(m)).cloned().collect();
    (!added.is_empty() || !removed.is_empty()).then(|| MapChange {
        position,
        syscall: syscall_name(syscall).to_string(),
        added,
        removed,
    })
}

/// The run-time address of a symbol of the traced executable.
pub fn symbol_address(tracee: &Tracee, name: &str) -> Result<u64, StepError> {
    let problem = |problem: String| StepError::Start {
        at: name.to_string(),
        problem,
    };
    let exe = std::fs::read_link(format!("/proc/{}/exe", tracee.pid))
        .map_err(|e| problem(format!("cannot find the executable: {e}")))?;
    let bytes = std::fs::read(&exe).map_err(|e| problem(format!("cannot read {}: {e}", exe.display())))?;
    let file = object::File::parse(&*bytes).map_err(|e| problem(format!("{}: {e}", exe.display())))?;
    let symbol = file
        .symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.name() == Ok(name) && s.is_definition())
        .ok_or_else(|| problem(format!("no symbol of that name in {}", exe.display())))?;
    let bias = if file.kind() == ObjectKind::Dynamic {
        let exe_name = exe.display().to_string();
        let load = tracee
            .maps()?
            .iter()
            .filter(|m| m.path.as_deref() == Some(&exe_name) && m.offset == 0)
            .map(|m| m.start)
            .min()
            .ok_or_else(|| problem(format!("{exe_name} is not mapped")))?;
        load - rtit_replay_core::image::lowest_vaddr(&exe_name, &bytes).map_err(|e| problem(e.to_string()))?
    } else {
        0
    };
    Ok(symbol.address() + bias)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: u64, perms: &str, offset: u64, path: &str) -> Mapping {
        Mapping {
            start,
            end: start + 0x1000,
            perms: perms.to_string(),
            offset,
            path: Some(path.to_string()),
        }
    }

    #[test]
    fn images_are_executable_files_at_their_offset_0_mapping() {
        let mut images = Images::default();
        images.note(&[
            m(0x40_0000, "r--p", 0, "/bin/a"),
            m(0x40_1000, "r-xp", 0x1000, "/bin/a"),
            m(0x7000_0000, "r--p", 0, "/lib/data.bin"),
            m(0x7fff_f000, "rw-p", 0, "[stack]"),
        ]);
        assert_eq!(images.files().collect::<Vec<_>>(), [("/bin/a", 0x40_0000)]);
    }

    #[test]
    fn map_changes_list_what_came_and_went() {
        let a = m(0x1000, "r--p", 0, "/x");
        let b = m(0x2000, "rw-p", 0, "/y");
        let b2 = m(0x2000, "r--p", 0, "/y");
        let change = diff(&[a.clone(), b.clone()], &[a.clone(), b2.clone()], 7, nr::MPROTECT).expect("a change");
        assert_eq!((change.position, change.syscall.as_str()), (7, "mprotect"));
        assert_eq!((change.added, change.removed), (vec![b2], vec![b]));
        let same = std::slice::from_ref(&a);
        assert!(diff(same, same, 1, nr::BRK).is_none());
    }
}

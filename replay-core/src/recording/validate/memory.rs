//! The files that describe memory: `maps.json` (the map and its changes), `memory.json` (where
//! the snapshots' bytes are) and `cpuid.json`. What parsing lets through but no recorder
//! writes is refused: a mapping that wraps or straddles the non-canonical hole, permissions
//! that are not `/proc/PID/maps`'s, mappings that overlap, changes out of order.

use std::path::Path;

use super::{in_order, invalid};
use crate::recording::cpuid::CpuidLeaf;
use crate::recording::{Mapping, Maps, MemoryIndex, MemoryRegion, RecordingError};

/// The page size of every x86-64 mapping's bounds.
const PAGE: u64 = 4096;
/// The lowest address of the upper (kernel) half with 5-level paging; the lower half ends
/// where it would begin with 4-level paging's sign extension at bit 56 (LA57).
const UPPER_HALF: u64 = 0xff00_0000_0000_0000;
/// One past the lower half's last address with 5-level paging.
const LOWER_END: u64 = 1 << 56;

/// What is wrong with a mapping's range or permissions, if anything.
fn mapping_problem(m: &Mapping) -> Option<String> {
    let range = format!("{:#x}-{:#x}", m.start, m.end);
    if m.start >= m.end {
        return Some(format!("mapping {range} ends before it starts"));
    }
    if m.start % PAGE != 0 || m.end % PAGE != 0 {
        return Some(format!("mapping {range} does not start and end on a page boundary"));
    }
    if !(m.end <= LOWER_END || m.start >= UPPER_HALF) {
        return Some(format!(
            "mapping {range} is not in one half of the address space (it spans the non-canonical hole)"
        ));
    }
    let p = m.perms.as_bytes();
    let perms = p.len() == 4
        && matches!(p[0], b'r' | b'-')
        && matches!(p[1], b'w' | b'-')
        && matches!(p[2], b'x' | b'-')
        && matches!(p[3], b'p' | b's');
    if !perms {
        return Some(format!(
            "mapping {range}: permissions `{}` are not of the form rwxp (r/-, w/-, x/-, p/s)",
            m.perms
        ));
    }
    None
}

/// A mapping with its index in its file.
type Indexed<'a> = (usize, &'a Mapping);

/// The first two of `ranges` (sorted by start) that overlap, if any.
fn overlap(mut ranges: Vec<Indexed<'_>>) -> Option<(Indexed<'_>, Indexed<'_>)> {
    ranges.sort_by_key(|(_, m)| m.start);
    ranges
        .windows(2)
        .find(|w| w[1].1.start < w[0].1.end)
        .map(|w| (w[0], w[1]))
}

/// Every mapping's range and permissions, the initial map free of overlaps, and the changes in
/// order of position, none past the history's end (`bound`).
pub(in crate::recording) fn maps(path: &Path, maps: &Maps, bound: Option<u64>) -> Result<(), RecordingError> {
    let initial = maps
        .initial
        .iter()
        .enumerate()
        .map(|(i, m)| (format!("initial[{i}]"), m));
    let changes = maps.changes.iter().enumerate().flat_map(|(i, c)| {
        let added = c
            .added
            .iter()
            .enumerate()
            .map(move |(j, m)| (format!("changes[{i}].added[{j}]"), m));
        let removed = c
            .removed
            .iter()
            .enumerate()
            .map(move |(j, m)| (format!("changes[{i}].removed[{j}]"), m));
        added.chain(removed)
    });
    for (at, m) in initial.chain(changes) {
        if let Some(problem) = mapping_problem(m) {
            return Err(invalid(path, format!("{at}: {problem}")));
        }
    }
    if let Some(((i, a), (j, b))) = overlap(maps.initial.iter().enumerate().collect()) {
        let what = format!(
            "initial[{i}] ({:#x}-{:#x}) and initial[{j}] ({:#x}-{:#x}) overlap",
            a.start, a.end, b.start, b.end
        );
        return Err(invalid(path, what));
    }
    for (i, c) in maps.changes.iter().enumerate() {
        if let (Some(s), Some(e)) = (c.mapped_start, c.mapped_end) {
            if s > e {
                let what = format!("changes[{i}]: the mapped range {s:#x}-{e:#x} ends before it starts");
                return Err(invalid(path, what));
            }
        }
    }
    in_order(path, maps.changes.iter().map(|c| c.position), bound, false)
}

/// Each snapshot's regions: ranges that do not wrap, and no two of one snapshot overlapping
/// (which of two overlapping regions' bytes would hold?).
pub(in crate::recording) fn memory_index(path: &Path, index: &MemoryIndex) -> Result<(), RecordingError> {
    for (which, regions) in [("start", &index.start), ("end", &index.end)] {
        for (i, r) in regions.iter().enumerate() {
            if r.mapping.start >= r.mapping.end {
                let (s, e) = (r.mapping.start, r.mapping.end);
                return Err(invalid(
                    path,
                    format!("{which}[{i}]: region {s:#x}-{e:#x} ends before it starts"),
                ));
            }
        }
        if let Some(((i, a), (j, b))) = overlap(regions.iter().map(|r| &r.mapping).enumerate().collect()) {
            let what = format!(
                "{which}[{i}] ({:#x}-{:#x}) and {which}[{j}] ({:#x}-{:#x}) overlap",
                a.start, a.end, b.start, b.end
            );
            return Err(invalid(path, what));
        }
    }
    Ok(())
}

/// A snapshot's regions (`which`: "start" or "end") against the file holding their bytes.
pub(in crate::recording) fn snapshot(
    index: &Path,
    which: &str,
    regions: &[MemoryRegion],
    file: &str,
    file_len: u64,
) -> Result<(), RecordingError> {
    for (i, r) in regions.iter().enumerate() {
        let len = r.mapping.end.checked_sub(r.mapping.start);
        if r.zero && len.is_some() {
            continue;
        }
        let end = len.and_then(|n| r.file_offset.checked_add(n));
        if !end.is_some_and(|e| e <= file_len) {
            let what = format!(
                "{which}[{i}] ({:#x}-{:#x} at byte {}) runs past the {file_len} bytes of {file}",
                r.mapping.start, r.mapping.end, r.file_offset
            );
            return Err(invalid(index, what));
        }
    }
    Ok(())
}

/// The CPUID table: a recorder writes it only with leaves in it, each (leaf, subleaf) once.
pub(in crate::recording) fn cpuid(path: &Path, table: &[CpuidLeaf]) -> Result<(), RecordingError> {
    if table.is_empty() {
        return Err(invalid(
            path,
            "holds no CPUID leaves (a recorder writes it only with some)".to_string(),
        ));
    }
    // An XGETBV entry (`instruction`) is keyed apart from CPUID's leaves.
    let mut keys: Vec<(Option<&str>, u32, Option<u32>, usize)> = table
        .iter()
        .enumerate()
        .map(|(i, l)| (l.instruction.as_deref(), l.leaf, l.subleaf, i))
        .collect();
    keys.sort_unstable();
    if let Some(w) = keys
        .windows(2)
        .find(|w| (w[0].0, w[0].1, w[0].2) == (w[1].0, w[1].1, w[1].2))
    {
        let sub = w[0].2.map_or_else(String::new, |s| format!(" subleaf {s:#x}"));
        let kind = w[0].0.map_or_else(|| "leaf".to_string(), |i| format!("{i} register"));
        let what = format!("entries {} and {} both give {kind} {:#x}{sub}", w[0].3, w[1].3, w[0].1);
        return Err(invalid(path, what));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(start: u64, end: u64, perms: &str) -> Mapping {
        Mapping {
            start,
            end,
            perms: perms.to_string(),
            offset: 0,
            path: None,
        }
    }

    #[test]
    fn mappings_recorders_never_write_are_refused_with_where() {
        let path = Path::new("rec/maps.json");
        let ok = Maps {
            initial: vec![
                mapping(0x400000, 0x401000, "r-xp"),
                mapping(0x7ffffffde000, 0x7ffffffff000, "rw-p"),
                // The vsyscall page lies in the upper half.
                mapping(0xffffffffff600000, 0xffffffffff601000, "--xp"),
            ],
            changes: Vec::new(),
        };
        assert!(maps(path, &ok, Some(10)).is_ok());
        for (bad, expect) in [
            (
                mapping(0, !0xfff, "rw-p"),
                "initial[0]: mapping 0x0-0xfffffffffffff000 is not in one half",
            ),
            (mapping(0x1000, 0x1000, "rw-p"), "ends before it starts"),
            (mapping(0x1000, 0x1800, "rw-p"), "page boundary"),
            (mapping(0x1000, 0x2000, "zzzzzzzz"), "permissions `zzzzzzzz`"),
            (
                mapping(0x400000, 0x402000, "rw-p"),
                "initial[0] (0x400000-0x401000) and initial[1]",
            ),
        ] {
            let mut m = ok.clone();
            m.initial.insert(0, bad);
            if expect.starts_with("initial[0] (") {
                m.initial.swap(0, 1);
            }
            let e = maps(path, &m, Some(10)).expect_err(expect).to_string();
            assert!(e.starts_with("rec/maps.json: ") && e.contains(expect), "{e}");
        }
    }

    #[test]
    fn snapshot_regions_may_not_overlap_nor_a_cpuid_table_repeat_or_be_empty() {
        let region = |start, end| MemoryRegion {
            mapping: mapping(start, end, "rw-p"),
            file_offset: 0,
            zero: true,
        };
        let path = Path::new("rec/memory.json");
        let mut index = MemoryIndex {
            start: vec![region(0x1000, 0x3000), region(0x3000, 0x4000)],
            ..MemoryIndex::default()
        };
        assert!(memory_index(path, &index).is_ok());
        index.start.push(region(0x2000, 0x5000));
        let e = memory_index(path, &index).expect_err("overlap").to_string();
        assert!(
            e.contains("start[0] (0x1000-0x3000) and start[2] (0x2000-0x5000) overlap"),
            "{e}"
        );

        let path = Path::new("rec/cpuid.json");
        assert!(cpuid(path, &[])
            .expect_err("empty")
            .to_string()
            .contains("holds no CPUID leaves"));
        let leaf = |leaf, subleaf| CpuidLeaf {
            leaf,
            subleaf,
            regs: [0; 4],
            instruction: None,
        };
        assert!(cpuid(path, &[leaf(0, None), leaf(7, Some(0)), leaf(7, Some(1))]).is_ok());
        assert!(
            cpuid(path, &[leaf(0, None), CpuidLeaf::xcr(0, 7)]).is_ok(),
            "XCR0 is no CPUID leaf 0"
        );
        let e = cpuid(path, &[CpuidLeaf::xcr(0, 7), leaf(0, None), CpuidLeaf::xcr(0, 3)]).expect_err("two XCR0");
        assert!(
            e.to_string().contains("entries 0 and 2 both give xgetbv register 0x0"),
            "{e}"
        );
        let e = cpuid(path, &[leaf(7, Some(1)), leaf(0, None), leaf(7, Some(1))]).expect_err("repeat");
        assert!(
            e.to_string().contains("entries 0 and 2 both give leaf 0x7 subleaf 0x1"),
            "{e}"
        );
    }
}

//! `cpuid.json`: what CPUID returns on the CPU model the program ran on, leaf by leaf, for
//! recorders that cannot log each execution's result (the qemu backend: QEMU's CPU model is
//! a fixed function of its version and `-cpu`, so `rtit record` asks it once with a probe
//! program). Replay computes a `cpuid` whose eax (and ecx) it knows from this table.

use serde::{Deserialize, Serialize};

/// The subleaves probed for every leaf: a leaf whose results differ among them is looked up
/// only for an ecx below this.
pub const SUBLEAVES: u32 = 64;

/// One leaf's results.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuidLeaf {
    /// eax on input.
    pub leaf: u32,
    /// ecx on input; `None`: the same for every ecx (the leaf has no subleaves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subleaf: Option<u32>,
    /// eax, ebx, ecx, edx on output.
    pub regs: [u32; 4],
    /// `Some("xgetbv")`: not a CPUID leaf but what XGETBV returns for ecx = `leaf` (the
    /// extended control register's number), edx:eax in `regs[3]`:`regs[0]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
}

/// [`CpuidLeaf::instruction`] of an XGETBV entry.
const XGETBV: &str = "xgetbv";

impl CpuidLeaf {
    /// The entry for XGETBV of extended control register `xcr`, which holds `value`.
    pub fn xcr(xcr: u32, value: u64) -> Self {
        Self {
            leaf: xcr,
            subleaf: None,
            regs: [value as u32, 0, 0, (value >> 32) as u32],
            instruction: Some(XGETBV.into()),
        }
    }
}

/// Looks up what `cpuid` returns for `leaf` and `subleaf`.
pub fn lookup(table: &[CpuidLeaf], leaf: u32, subleaf: u32) -> Option<[u32; 4]> {
    table
        .iter()
        .find(|e| e.instruction.is_none() && e.leaf == leaf && e.subleaf.map_or(true, |s| s == subleaf))
        .map(|e| e.regs)
}

/// What XGETBV returns for extended control register `xcr`, if the table says.
pub fn xgetbv(table: &[CpuidLeaf], xcr: u32) -> Option<u64> {
    table
        .iter()
        .find(|e| e.instruction.as_deref() == Some(XGETBV) && e.leaf == xcr)
        .map(|e| u64::from(e.regs[0]) | u64::from(e.regs[3]) << 32)
}

/// Builds the table from the probe's results: `(leaf, subleaf, regs)` for subleaves
/// `0..SUBLEAVES` of each leaf. A leaf whose subleaves all agree becomes one entry.
pub fn from_probe(results: &[(u32, u32, [u32; 4])]) -> Vec<CpuidLeaf> {
    let mut table = Vec::new();
    let mut i = 0;
    while i < results.len() {
        let leaf = results[i].0;
        let n = results[i..].iter().take_while(|r| r.0 == leaf).count();
        let group = &results[i..i + n];
        let complete = n == SUBLEAVES as usize && group.iter().enumerate().all(|(k, r)| r.1 == k as u32);
        if complete && group.iter().all(|r| r.2 == group[0].2) {
            table.push(CpuidLeaf {
                leaf,
                subleaf: None,
                regs: group[0].2,
                instruction: None,
            });
        } else {
            table.extend(group.iter().map(|&(leaf, s, regs)| CpuidLeaf {
                leaf,
                subleaf: Some(s),
                regs,
                instruction: None,
            }));
        }
        i += n;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_without_subleaves_collapse_and_others_keep_each() {
        let mut probe = Vec::new();
        for s in 0..SUBLEAVES {
            probe.push((1, s, [1, 2, 3, 4]));
        }
        for s in 0..SUBLEAVES {
            probe.push((0xd, s, [s, 0, 0, 0]));
        }
        let table = from_probe(&probe);
        assert_eq!(table.len(), 1 + SUBLEAVES as usize);
        assert_eq!(lookup(&table, 1, 0), Some([1, 2, 3, 4]));
        assert_eq!(lookup(&table, 1, 1000), Some([1, 2, 3, 4]));
        assert_eq!(lookup(&table, 0xd, 5), Some([5, 0, 0, 0]));
        assert_eq!(lookup(&table, 0xd, SUBLEAVES), None);
        assert_eq!(lookup(&table, 2, 0), None);
    }

    #[test]
    fn xgetbv_entries_answer_xgetbv_alone() {
        let mut table = from_probe(&[(0, 0, [0xd, 1, 2, 3])]);
        assert_eq!(xgetbv(&table, 0), None);
        table.push(CpuidLeaf::xcr(0, 0x2_0000_00e7));
        assert_eq!(xgetbv(&table, 0), Some(0x2_0000_00e7));
        assert_eq!(xgetbv(&table, 1), None);
        assert_eq!(lookup(&table, 0, 0), Some([0xd, 1, 2, 3]), "CPUID leaf 0 is not XCR0");
    }
}

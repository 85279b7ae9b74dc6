//! The logs beside the trace (`syscalls.jsonl`, `results.jsonl`, `signals.jsonl`,
//! `truth-regs.jsonl`): each record's fields as the replay will use them, and the records in
//! the order of their positions, inside the history. A record out of order, repeated or past
//! the end would be applied where nothing happened; a range that wraps past 2^64 names no
//! memory.

use std::path::Path;

use super::invalid;
use crate::recording::{InsnResult, RecordingError, SignalEntry};
use crate::syscall::SyscallRecord;

/// `positions` (of the records in a file, in file order) never fall (`strict`: never repeat
/// either) and none lies past `bound` (the history's end, where known).
pub(in crate::recording) fn in_order(
    path: &Path,
    positions: impl Iterator<Item = u64>,
    bound: Option<u64>,
    strict: bool,
) -> Result<(), RecordingError> {
    let mut last: Option<u64> = None;
    for (i, p) in positions.enumerate() {
        if let Some(end) = bound.filter(|&end| p > end) {
            let what = format!(
                "record {} (position {p}): past the history, which ends at position {end}",
                i + 1
            );
            return Err(invalid(path, what));
        }
        if let Some(q) = last.filter(|&q| p < q || strict && p == q) {
            let what = match p == q {
                true => format!("record {} (position {p}): a second record at the same position", i + 1),
                false => format!("record {} (position {p}): out of order (after position {q})", i + 1),
            };
            return Err(invalid(path, what));
        }
        last = Some(p);
    }
    Ok(())
}

/// Whether `len` bytes at `address` stay below 2^64.
fn fits(address: u64, len: u64) -> bool {
    len == 0 || address.checked_add(len - 1).is_some()
}

/// Each system call record's memory contents and ranges; one call a position where every
/// instruction has its own (`own_positions`).
pub(in crate::recording) fn syscalls(
    path: &Path,
    records: &[SyscallRecord],
    bound: Option<u64>,
    own_positions: bool,
) -> Result<(), RecordingError> {
    for (i, r) in records.iter().enumerate() {
        let at = |what: String| invalid(path, format!("record {} (position {}): {what}", i + 1, r.position));
        for w in &r.writes {
            let Some(data) = w.data() else {
                return Err(at(format!(
                    "the bytes written at {:#x} are not hexadecimal pairs",
                    w.address
                )));
            };
            if !fits(w.address, data.len() as u64) {
                let what = format!("the {} bytes written at {:#x} run past 2^64", data.len(), w.address);
                return Err(at(what));
            }
        }
        if let Some(u) = r.unlogged.iter().find(|u| !fits(u.address, u.len)) {
            return Err(at(format!(
                "the unlogged range of {} bytes at {:#x} runs past 2^64",
                u.len, u.address
            )));
        }
    }
    // A call's position is its `syscall` instruction's: one a position where every
    // instruction is traced (`own_positions`), the last of N at N - 1. The calls an IP
    // filter leaves out all lie where tracing stopped, at N after the last range.
    let last = bound.map(|n| n.saturating_sub(u64::from(own_positions)));
    in_order(path, records.iter().map(|r| r.position), last, own_positions)
}

/// Each instruction result's registers: known names, hexadecimal values; one a position
/// where every instruction has its own (`own_positions`).
pub(in crate::recording) fn results(
    path: &Path,
    records: &[InsnResult],
    bound: Option<u64>,
    own_positions: bool,
) -> Result<(), RecordingError> {
    for (i, r) in records.iter().enumerate() {
        registers(path, i, r.position, &r.after, false)?;
    }
    let last = bound.map(|n| n.saturating_sub(u64::from(own_positions)));
    in_order(path, records.iter().map(|r| r.position), last, own_positions)
}

/// A record's register map: names of tracked registers, MXCSR and the vector and opmask
/// registers (with `eflags` and `rip` where `whole` is set: a signal entry has every
/// register; else `xstate_bv`, the header an XSAVEC wrote), hexadecimal values.
fn registers(
    path: &Path,
    i: usize,
    position: u64,
    map: &std::collections::BTreeMap<String, String>,
    whole: bool,
) -> Result<(), RecordingError> {
    for (name, value) in map {
        let vector = crate::state::vector::named::Named::parse(name);
        let hex = value.starts_with("0x")
            && match vector {
                Some(n) => n.value(value).is_some(),
                None => u64::from_str_radix(&value[2..], 16).is_ok(),
            };
        let named = crate::state::Reg::from_name(name).is_some()
            || vector.is_some()
            || name == "mxcsr"
            || whole && (name == "eflags" || name == crate::state::flags::KNOWN_NAME || name == "rip")
            || !whole && name == "xstate_bv";
        if !named || !hex {
            let what = format!(
                "record {} (position {position}): `{name}: {value}` is not a register and a 0x value",
                i + 1
            );
            return Err(invalid(path, what));
        }
    }
    Ok(())
}

/// An anchor's registers: every register there, as a signal entry's.
pub(in crate::recording) fn anchor_registers(
    path: &Path,
    i: usize,
    anchor: &crate::recording::anchors::Anchor,
) -> Result<(), RecordingError> {
    registers(path, i, anchor.position, &anchor.registers, true)
}

/// Each signal entry's registers and frame bytes, the entries in order.
pub(in crate::recording) fn signals(
    path: &Path,
    records: &[SignalEntry],
    bound: Option<u64>,
) -> Result<(), RecordingError> {
    for (i, r) in records.iter().enumerate() {
        registers(path, i, r.position, &r.registers, true)?;
        let at = |what: String| invalid(path, format!("record {} (position {}): {what}", i + 1, r.position));
        let Some(frame) = r.frame.data() else {
            return Err(at(format!(
                "the frame bytes at {:#x} are not hexadecimal pairs",
                r.frame.address
            )));
        };
        if !fits(r.frame.address, frame.len() as u64) {
            return Err(at(format!(
                "the {} frame bytes at {:#x} run past 2^64",
                frame.len(),
                r.frame.address
            )));
        }
    }
    in_order(path, records.iter().map(|r| r.position), bound, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_rise_repeat_only_where_allowed_and_stay_inside_the_history() {
        let path = Path::new("rec/syscalls.jsonl");
        let check = |p: &[u64], strict| in_order(path, p.iter().copied(), Some(10), strict).map_err(|e| e.to_string());
        assert!(check(&[0, 3, 10], true).is_ok());
        assert!(check(&[0, 3, 3, 10], false).is_ok());
        let e = check(&[0, 3, 3], true).expect_err("repeat");
        assert!(
            e.ends_with("record 3 (position 3): a second record at the same position"),
            "{e}"
        );
        let e = check(&[4, 2], false).expect_err("order");
        assert!(
            e.ends_with("record 2 (position 2): out of order (after position 4)"),
            "{e}"
        );
        let e = check(&[11], false).expect_err("past");
        assert!(
            e.ends_with("record 1 (position 11): past the history, which ends at position 10"),
            "{e}"
        );
        assert!(
            in_order(path, [99].into_iter(), None, true).is_ok(),
            "no bound for a version 1 count"
        );
        assert!(fits(u64::MAX, 1) && !fits(u64::MAX, 2) && fits(u64::MAX, 0));
    }
}

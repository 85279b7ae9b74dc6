//! Every file of a recording is checked as it is read, so a recording copied from elsewhere,
//! damaged or half-written is refused with what is wrong and where (file, field, byte offset)
//! instead of misleading the decoder or reading outside the recording's directory.

use std::path::{Component, Path};

use sha2::{Digest, Sha256};

use super::{ImageRecord, Manifest, Maps, MemoryRegion, RecordingError};
use crate::packet::PSB_BYTES;
use crate::syscall::SyscallRecord;

fn invalid(path: &Path, message: String) -> RecordingError {
    RecordingError::Invalid {
        path: path.display().to_string(),
        message,
    }
}

/// A register's value: at most 64 bits; a vector register's at most its width.
fn is_hex_value(reg: &str, v: &str) -> bool {
    if let Some(n) = crate::state::vector::named::Named::parse(reg) {
        return n.value(v).is_some();
    }
    let digits = v.strip_prefix("0x").unwrap_or(v);
    !digits.is_empty() && digits.len() <= 16 && digits.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A path inside the recording: relative, and made of plain names only (no `..`, no root).
pub(super) fn inside(file: &str) -> bool {
    let p = Path::new(file);
    !file.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

/// The manifest's fields, beyond what parsing checks.
pub(super) fn manifest(path: &Path, m: &Manifest) -> Result<(), RecordingError> {
    for (i, image) in m.images.iter().enumerate() {
        let at = |what: &str| format!("images[{i}] ({}): {what}", image.path);
        if !inside(&image.file) {
            let what = format!(
                "file `{}` is not a file inside the recording (no absolute paths, no `..`)",
                image.file
            );
            return Err(invalid(path, at(&what)));
        }
        if image.sha256.len() != 64 || !image.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            let what = format!("sha256 `{}` is not 64 hexadecimal digits", image.sha256);
            return Err(invalid(path, at(&what)));
        }
    }
    for (name, regs) in [
        ("registers_start", &m.registers_start),
        ("registers_end", &m.registers_end),
    ] {
        if let Some((reg, value)) = regs.iter().find(|(r, v)| !is_hex_value(r, v)) {
            return Err(invalid(
                path,
                format!("{name}.{reg}: `{value}` is not a hexadecimal value"),
            ));
        }
    }
    if let Some(end) = &m.trace_end {
        if !(1..=0x7f).contains(&end.tnt_buff) {
            let what = format!(
                "trace_end.tnt_buff {:#x} is not an RTIT_TNT_BUFF value (1, or TNT bits behind a leading 1 in bits 6:0, §3.3.13)",
                end.tnt_buff
            );
            return Err(invalid(path, what));
        }
    }
    let mut last = 0;
    for (i, gap) in m.gaps.iter().enumerate() {
        if gap.offset < last || gap.offset > m.trace_bytes {
            let what = format!(
                "gaps[{i}].offset {} is out of order or past the trace's {} bytes",
                gap.offset, m.trace_bytes
            );
            return Err(invalid(path, what));
        }
        last = gap.offset;
    }
    Ok(())
}

/// An image copy's bytes against the hash the recorder wrote.
pub(super) fn image_bytes(path: &Path, image: &ImageRecord, bytes: &[u8]) -> Result<(), RecordingError> {
    let found: String = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
    if !found.eq_ignore_ascii_case(&image.sha256) {
        let what = format!(
            "its contents do not match the manifest (sha256 {found}, expected {}): the copy of {} was changed or damaged",
            image.sha256, image.path
        );
        return Err(invalid(path, what));
    }
    Ok(())
}

/// The trace's own framing: it starts at a PSB (the unit writes one when tracing starts,
/// §4.2.1, and a kept region is cut at one).
pub(super) fn trace(path: &Path, bytes: &[u8]) -> Result<(), RecordingError> {
    if !bytes.is_empty() && !bytes.starts_with(&PSB_BYTES[..PSB_BYTES.len().min(bytes.len())]) {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ");
        let what = format!(
            "byte 0: expected a PSB ({}), found {}: not the start of an RTIT trace",
            hex(&PSB_BYTES),
            hex(&bytes[..bytes.len().min(PSB_BYTES.len())])
        );
        return Err(invalid(path, what));
    }
    Ok(())
}

/// Every mapping's range.
pub(super) fn maps(path: &Path, maps: &Maps) -> Result<(), RecordingError> {
    let initial = maps.initial.iter().map(|m| ("initial".to_string(), m));
    let changes = maps.changes.iter().enumerate().flat_map(|(i, c)| {
        let added = c.added.iter().map(move |m| (format!("changes[{i}].added"), m));
        let removed = c.removed.iter().map(move |m| (format!("changes[{i}].removed"), m));
        added.chain(removed)
    });
    for (at, m) in initial.chain(changes) {
        if m.start > m.end {
            let what = format!("{at}: mapping {:#x}-{:#x} ends before it starts", m.start, m.end);
            return Err(invalid(path, what));
        }
    }
    Ok(())
}

/// A snapshot's regions (`which`: "start" or "end") against the file holding their bytes.
pub(super) fn snapshot(
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

/// Each system call record's memory contents.
pub(super) fn syscalls(path: &Path, records: &[SyscallRecord]) -> Result<(), RecordingError> {
    for (i, r) in records.iter().enumerate() {
        if let Some(w) = r.writes.iter().find(|w| w.data().is_none()) {
            let what = format!(
                "record {} (position {}): the bytes written at {:#x} are not hexadecimal pairs",
                i + 1,
                r.position,
                w.address
            );
            return Err(invalid(path, what));
        }
    }
    Ok(())
}

/// Each instruction result's registers: known names, hexadecimal values.
pub(super) fn results(path: &Path, records: &[super::InsnResult]) -> Result<(), RecordingError> {
    for (i, r) in records.iter().enumerate() {
        registers(path, i, r.position, &r.after, false)?;
    }
    Ok(())
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
            || whole && (name == "eflags" || name == "rip")
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

/// Each signal entry's registers and frame bytes.
pub(super) fn signals(path: &Path, records: &[super::SignalEntry]) -> Result<(), RecordingError> {
    for (i, r) in records.iter().enumerate() {
        registers(path, i, r.position, &r.registers, true)?;
        if r.frame.data().is_none() {
            let what = format!(
                "record {} (position {}): the frame bytes at {:#x} are not hexadecimal pairs",
                i + 1,
                r.position,
                r.frame.address
            );
            return Err(invalid(path, what));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instruction_result_must_name_a_register_and_a_hex_value() {
        let record = |name: &str, value: &str| super::super::InsnResult {
            position: 7,
            ip: 0x1000,
            after: [(name.to_string(), value.to_string())].into_iter().collect(),
        };
        let path = Path::new("rec/results.jsonl");
        assert!(results(path, &[record("rax", "0x1f")]).is_ok());
        assert!(results(path, &[record("zmm3", "0x1f")]).is_ok());
        for (name, value) in [
            ("rax", "1f"),
            ("rax", "0xzz"),
            ("k8", "0x1"),
            ("xmm0", &format!("0x1{:032x}", 0)),
        ] {
            let e = results(path, &[record(name, value)]).expect_err("invalid").to_string();
            assert!(
                e.contains("results.jsonl") && e.contains("record 1 (position 7)") && e.contains(name),
                "{e}"
            );
        }
    }

    #[test]
    fn only_plain_relative_names_are_inside() {
        assert!(inside("images/libc.so.6-0011223344556677"));
        for bad in ["", "/etc/passwd", "../x", "images/../../x", "images/./x/.."] {
            assert!(!inside(bad), "{bad}");
        }
    }
}

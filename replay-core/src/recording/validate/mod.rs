//! Every file of a recording is checked as it is read, so a recording copied from elsewhere,
//! damaged or half-written is refused with what is wrong and where (file, field, byte offset)
//! instead of misleading the decoder or reading outside the recording's directory.

use std::path::{Component, Path};

use sha2::{Digest, Sha256};

use super::{ImageRecord, Manifest, RecordingError};
use crate::packet::PSB_BYTES;

mod logs;
mod memory;

pub(super) use logs::{anchor_registers, in_order, results, signals, syscalls};
pub(super) use memory::{cpuid, maps, memory_index, snapshot};

pub(super) fn invalid(path: &Path, message: String) -> RecordingError {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::InsnResult;

    #[test]
    fn an_instruction_result_must_name_a_register_and_a_hex_value() {
        let record = |name: &str, value: &str| InsnResult {
            position: 7,
            ip: 0x1000,
            after: [(name.to_string(), value.to_string())].into_iter().collect(),
        };
        let path = Path::new("rec/results.jsonl");
        assert!(results(path, &[record("rax", "0x1f")], None, true).is_ok());
        assert!(results(path, &[record("zmm3", "0x1f")], None, true).is_ok());
        for (name, value) in [
            ("rax", "1f"),
            ("rax", "0xzz"),
            ("k8", "0x1"),
            ("xmm0", &format!("0x1{:032x}", 0)),
        ] {
            let e = results(path, &[record(name, value)], None, true)
                .expect_err("invalid")
                .to_string();
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

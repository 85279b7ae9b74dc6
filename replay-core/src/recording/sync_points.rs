//! Sync points: places where a decode can start exactly, written by the recorder (issue 40,
//! "the end at once"). RTIT's PSB carries no IP and flushes no TNT bit (§4.2.1, §4.2.2), and
//! LAST_LIP may be cleared up to four packets after it (§3.3.9), so a decode started cold at
//! a PSB is not sure to be the whole decode's until it meets it: a probe of a python3
//! recording found 3 of 50 cold starts near the end wrong from their first instruction. The
//! qemu recorder's unit model knows its own registers, so now and then, at an instruction
//! boundary where its TNT buffer is empty (RTIT_TNT_BUFF = 1, §3.3.13) and no PSB's clearing
//! is still to come, it notes the trace offset of the next packet, the next instruction and
//! its position, RTIT_LAST_LIP and RTIT_LAST_CALL_NLIP (§3.3.7, §3.3.14): a decoder set to
//! exactly that state there goes on as the whole decode does. LAST_LIP may be invalid there
//! (a PSB cleared it and no IP-carrying packet came since: a loop of conditional branches
//! sends none, and points that required it valid were never found in one).
//!
//! `sync-points.bin`: [`MAGIC`], then one record a point of five little-endian u64: position,
//! next instruction, trace offset, LAST_LIP, LAST_CALL_NLIP (each 0: not valid), in order.

use super::{files, Recording, RecordingError};

/// The file's first bytes.
pub const MAGIC: &[u8; 8] = b"RTITSYN1";

/// Bytes of one record.
const RECORD: usize = 40;

/// One sync point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncPoint {
    /// Instructions the trace holds before it.
    pub position: u64,
    /// The instruction at `position`.
    pub ip: u64,
    /// Trace offset of the first packet after it.
    pub offset: u64,
    /// RTIT_LAST_LIP there.
    pub last_lip: u64,
    /// RTIT_LAST_CALL_NLIP there, if valid.
    pub last_call_nlip: Option<u64>,
}

/// Appends `point`'s record to `out`.
pub fn encode(point: &SyncPoint, out: &mut Vec<u8>) {
    for v in [
        point.position,
        point.ip,
        point.offset,
        point.last_lip,
        point.last_call_nlip.unwrap_or(0),
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// The points of a file's bytes, checked to be in order, inside a history of `instructions`
/// positions and a trace of `trace_len` bytes; an error naming the byte otherwise.
pub fn decode(bytes: &[u8], instructions: u64, trace_len: u64) -> Result<Vec<SyncPoint>, String> {
    let body = bytes
        .strip_prefix(MAGIC.as_slice())
        .ok_or_else(|| "byte 0: not a file of sync points (no RTITSYN1)".to_string())?;
    if body.len() % RECORD != 0 {
        return Err(format!(
            "byte {}: a record cut short ({} bytes of {RECORD})",
            MAGIC.len() + body.len() / RECORD * RECORD,
            body.len() % RECORD
        ));
    }
    let mut points: Vec<SyncPoint> = Vec::with_capacity(body.len() / RECORD);
    for (i, r) in body.chunks_exact(RECORD).enumerate() {
        let at = MAGIC.len() + i * RECORD;
        let word = |k: usize| u64::from_le_bytes(r[k * 8..k * 8 + 8].try_into().expect("8 bytes"));
        let p = SyncPoint {
            position: word(0),
            ip: word(1),
            offset: word(2),
            last_lip: word(3),
            last_call_nlip: Some(word(4)).filter(|&n| n != 0),
        };
        if p.position >= instructions || p.offset > trace_len {
            return Err(format!(
                "byte {at}: position {} or trace offset {} outside the history ({instructions} positions, {trace_len} bytes)",
                p.position, p.offset
            ));
        }
        if let Some(before) = points
            .last()
            .filter(|b| b.position >= p.position || b.offset > p.offset)
        {
            return Err(format!(
                "byte {at}: position {} at offset {} comes after position {} at offset {}",
                p.position, p.offset, before.position, before.offset
            ));
        }
        points.push(p);
    }
    Ok(points)
}

impl Recording {
    /// The recorder's sync points, if it wrote them, or an error naming the file and byte.
    pub fn sync_points(&self) -> Result<Option<Vec<SyncPoint>>, RecordingError> {
        let Some(bytes) = self.read_optional(files::SYNC_POINTS)? else {
            return Ok(None);
        };
        decode(&bytes, self.manifest.instructions, self.manifest.trace_bytes)
            .map(Some)
            .map_err(|message| RecordingError::Invalid {
                path: self.dir.join(files::SYNC_POINTS).display().to_string(),
                message,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(position: u64, offset: u64) -> SyncPoint {
        SyncPoint {
            position,
            ip: 0x40_1000 + position,
            offset,
            last_lip: 0x40_2000,
            last_call_nlip: (position % 2 == 0).then_some(0x40_3005),
        }
    }

    fn file(points: &[SyncPoint]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        points.iter().for_each(|p| encode(p, &mut out));
        out
    }

    #[test]
    fn points_round_trip() {
        let points = [point(10, 100), point(11, 100), point(4000, 9000)];
        assert_eq!(decode(&file(&points), 5000, 9000).expect("decodes"), points);
        assert_eq!(decode(MAGIC, 0, 0).expect("none"), vec![]);
    }

    #[test]
    fn damage_is_named_with_its_byte() {
        let good = file(&[point(10, 100), point(20, 200)]);
        assert!(decode(&good[1..], 100, 1000).unwrap_err().starts_with("byte 0:"));
        let cut = decode(&good[..good.len() - 3], 100, 1000).unwrap_err();
        assert!(cut.starts_with("byte 48: a record cut short"), "{cut}");
        let out_of_order = decode(&file(&[point(20, 200), point(10, 300)]), 100, 1000).unwrap_err();
        assert!(out_of_order.starts_with("byte 48:"), "{out_of_order}");
        let outside = decode(&good, 15, 1000).unwrap_err();
        assert!(
            outside.starts_with("byte 48:") && outside.contains("outside"),
            "{outside}"
        );
        assert!(decode(&good, 100, 150).unwrap_err().starts_with("byte 48:"));
    }
}

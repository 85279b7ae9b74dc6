//! Completing a recording whose backend saw only trace offsets (the msr backend: the
//! hardware counts nothing, and rtit learns where the trace had got to, not how many
//! instructions had run): the written recording is decoded once to count its instructions
//! and to turn the trace offsets of its map changes, system calls and signal deliveries into
//! positions.

use std::path::Path;

use rtit_replay_core::flow::{FlowDecoder, OffsetPositions};
use rtit_replay_core::recording::{files, Manifest, Recording, RecordingError};

use crate::outcome::FromTrace;

/// A failure to complete a recording.
#[derive(Debug, thiserror::Error)]
pub enum CompleteError {
    /// The recording, or an image of it, cannot be read.
    #[error("decoding the recording to count its instructions: {0}")]
    Recording(#[from] RecordingError),
    /// Its offsets do not match its map changes, system calls or signals.
    #[error("{records} {what} but {offsets} trace offsets for them")]
    Offsets {
        /// What the records are.
        what: &'static str,
        /// Records in the recording.
        records: usize,
        /// Offsets given.
        offsets: usize,
    },
    /// A file cannot be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Decodes the recording in `dir`, then rewrites its manifest (instruction count), maps.json
/// (positions of the changes at `from.change_offsets`), syscalls.jsonl and signals.jsonl
/// (positions from their offsets). Returns the new manifest.
pub fn from_trace(dir: &Path, from: &FromTrace) -> Result<Manifest, CompleteError> {
    let rec = Recording::open_unfinished(dir)?;
    let mut maps = rec.maps()?;
    let mut syscalls = rec.syscalls()?;
    let mut signals = rec.signals()?;
    for (what, records, offsets) in [
        ("map changes", maps.changes.len(), &from.change_offsets),
        ("system calls", syscalls.len(), &from.syscall_offsets),
        ("signal deliveries", signals.len(), &from.signal_offsets),
    ] {
        if records != offsets.len() {
            return Err(CompleteError::Offsets {
                what,
                records,
                offsets: offsets.len(),
            });
        }
    }
    // One decode for all three: the offsets in ascending order, each kind's in its order.
    let mut all: Vec<(u64, usize, usize)> = [&from.change_offsets, &from.syscall_offsets, &from.signal_offsets]
        .iter()
        .enumerate()
        .flat_map(|(kind, offsets)| offsets.iter().enumerate().map(move |(i, &o)| (o, kind, i)))
        .collect();
    all.sort_unstable();
    let offsets: Vec<u64> = all.iter().map(|a| a.0).collect();
    let space = rec.address_space()?;
    let trace = rec.trace()?;
    let gaps = rec.gaps();
    let mut sink = OffsetPositions::new(&offsets);
    FlowDecoder::new(&trace, rec.flow_config(), &space)
        .with_gaps(&gaps)
        .decode(&mut sink);
    let (count, positions) = sink.finish();
    for (&(_, kind, i), position) in all.iter().zip(positions) {
        match kind {
            0 => maps.changes[i].position = position,
            // The exit stop is after the call: the call is the instruction before. A record
            // whose address is not the history's there is never applied in replay.
            1 => syscalls[i].position = position.saturating_sub(1),
            _ => signals[i].position = position,
        }
    }
    let mut manifest = rec.manifest;
    manifest.instructions = count;
    rewrite(&dir.join(files::MAPS), &maps)?;
    rewrite_lines(&dir.join(files::SYSCALLS), &syscalls)?;
    rewrite_lines(&dir.join(files::SIGNALS), &signals)?;
    rewrite(&dir.join(files::MANIFEST), &manifest)?;
    Ok(manifest)
}

/// Rewrites a JSON-lines file, if there is anything to write.
fn rewrite_lines<T: serde::Serialize>(path: &Path, records: &[T]) -> Result<(), CompleteError> {
    if records.is_empty() {
        return Ok(());
    }
    let io = |source| CompleteError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut text = Vec::new();
    for r in records {
        serde_json::to_writer(&mut text, r).map_err(|e| io(e.into()))?;
        text.push(b'\n');
    }
    std::fs::write(path, text).map_err(io)
}

fn rewrite<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), CompleteError> {
    let io = |source| CompleteError::Io {
        path: path.display().to_string(),
        source,
    };
    let text = serde_json::to_vec_pretty(value).map_err(|e| io(e.into()))?;
    std::fs::write(path, text).map_err(io)
}

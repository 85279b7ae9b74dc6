//! Completing a recording whose backend saw only trace offsets (the msr backend: the
//! hardware counts nothing, and rtit learns where the trace had got to, not how many
//! instructions had run): the written recording is decoded once to count its instructions
//! and to turn the trace offsets of its map changes into positions.

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
    /// Its offsets do not match its map changes.
    #[error("{changes} map changes but {offsets} trace offsets for them")]
    Offsets {
        /// Map changes in maps.json.
        changes: usize,
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

/// Decodes the recording in `dir`, then rewrites its manifest (instruction count) and
/// maps.json (positions of the changes at `from.change_offsets`). Returns the new manifest.
pub fn from_trace(dir: &Path, from: &FromTrace) -> Result<Manifest, CompleteError> {
    let rec = Recording::open(dir)?;
    let mut maps = rec.maps()?;
    if maps.changes.len() != from.change_offsets.len() {
        return Err(CompleteError::Offsets {
            changes: maps.changes.len(),
            offsets: from.change_offsets.len(),
        });
    }
    let space = rec.address_space()?;
    let trace = rec.trace()?;
    let gaps = rec.gaps();
    let mut sink = OffsetPositions::new(&from.change_offsets);
    FlowDecoder::new(&trace, rec.flow_config(), &space)
        .with_gaps(&gaps)
        .decode(&mut sink);
    let (count, positions) = sink.finish();
    for (change, position) in maps.changes.iter_mut().zip(positions) {
        change.position = position;
    }
    let mut manifest = rec.manifest;
    manifest.instructions = count;
    rewrite(&dir.join(files::MAPS), &maps)?;
    rewrite(&dir.join(files::MANIFEST), &manifest)?;
    Ok(manifest)
}

fn rewrite<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), CompleteError> {
    let io = |source| CompleteError::Io {
        path: path.display().to_string(),
        source,
    };
    let text = serde_json::to_vec_pretty(value).map_err(|e| io(e.into()))?;
    std::fs::write(path, text).map_err(io)
}

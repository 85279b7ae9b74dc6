//! A failure to read a recording, and the two ways every file is read.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use crate::image::ImageError;

/// A failure to read a recording.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RecordingError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: Arc<std::io::Error>,
    },
    /// Not a recording, or a damaged one.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The trace holds less than the recorder wrote down: cut short (a full disk, a killed
    /// copy) or damaged. What is there can still be used, when asked for explicitly.
    #[error("{path}: the recording is incomplete: {}", shortfall(*trace_len, *trace_bytes, *expected, *decoded))]
    Incomplete {
        /// The recording.
        path: String,
        /// Bytes in trace.rtit.
        trace_len: u64,
        /// Bytes the manifest says the trace has.
        trace_bytes: u64,
        /// Instructions the manifest says ran.
        expected: u64,
        /// Instructions decoded from the trace.
        decoded: u64,
    },
    /// An image of the recording failed to load.
    #[error(transparent)]
    Image(#[from] ImageError),
}

pub(super) fn read(path: &Path) -> Result<Vec<u8>, RecordingError> {
    std::fs::read(path).map_err(|source| RecordingError::Io {
        path: path.display().to_string(),
        source: Arc::new(source),
    })
}

pub(super) fn json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, RecordingError> {
    serde_json::from_slice(&read(path)?).map_err(|e| RecordingError::Invalid {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

/// What an incomplete recording lacks, in words: where its trace ends and what it decodes to.
fn shortfall(trace_len: u64, trace_bytes: u64, expected: u64, decoded: u64) -> String {
    let counts = format!("the manifest expects {expected} instructions, decoded {decoded}");
    if trace_len == trace_bytes {
        // All of it is there: what differs is the decode (code no image holds, such as a
        // JIT's, or code that changed while the program ran, decodes as errors).
        format!(
            "the trace's {trace_len} bytes decode to fewer or other instructions than were recorded: {counts} (code the recording's images do not hold, or that changed while it ran, decodes as errors: `rtit info --decode` counts them)"
        )
    } else {
        format!("the trace ends at byte {trace_len} of {trace_bytes}, {counts}")
    }
}

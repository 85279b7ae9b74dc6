//! A failure to read a recording.

use std::sync::Arc;

use crate::image::ImageError;
use crate::plain_file::PlainFileError;

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
        /// Instructions decoded from the trace (`None`: refused before decoding).
        decoded: Option<u64>,
    },
    /// An image of the recording failed to load.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// A file is not a plain file of the recording, or cannot be read.
    #[error(transparent)]
    File(#[from] PlainFileError),
}

/// What an incomplete recording lacks, in words: where its trace ends and what it decodes to.
fn shortfall(trace_len: u64, trace_bytes: u64, expected: u64, decoded: Option<u64>) -> String {
    let counts = match decoded {
        Some(decoded) => format!("the manifest expects {expected} instructions, decoded {decoded}"),
        None => format!("the manifest expects {expected} instructions"),
    };
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

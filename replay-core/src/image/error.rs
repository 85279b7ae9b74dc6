//! Errors of the image layer: which file, which address.

use std::sync::Arc;

/// A failure to load an image or to find code at an address.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ImageError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: Arc<std::io::Error>,
    },
    /// Not an ELF file this project handles, or a malformed one.
    #[error("{name}: {message}")]
    Elf {
        /// The file.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// Two images claim the same addresses.
    #[error("{name} at {start:#x} overlaps {other}")]
    Overlap {
        /// The image being added.
        name: String,
        /// Start of its clashing segment.
        start: u64,
        /// The image already there.
        other: String,
    },
    /// No image holds an address the trace executed.
    #[error("no image holds address {ip:#x}")]
    NoImage {
        /// The address.
        ip: u64,
    },
}

impl ImageError {
    pub(crate) fn elf(name: &str, message: impl std::fmt::Display) -> Self {
        Self::Elf {
            name: name.to_string(),
            message: message.to_string(),
        }
    }
}

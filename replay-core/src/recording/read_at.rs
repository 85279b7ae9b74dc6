//! A file of a recording read a range at a time, never whole: `anchor-pages.bin` holds
//! gigabytes on a long run (every page the program wrote between anchors), and a replay
//! that read it whole held it twice at its peak (the file, then the anchors' states built
//! from it). Each range read is checked against the seal piece by piece
//! ([`super::seal::PIECE`]), every time it is read, so a byte changed after the recording
//! is refused whenever it would be used, as [`Recording::read_checked`] refuses it for a file
//! read whole.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use super::read::missing;
use super::seal;
use super::{Recording, RecordingError};
use crate::plain_file;

/// An open file of a recording, its size and the hashes its pieces must have.
#[derive(Debug)]
pub struct FileAt {
    path: PathBuf,
    file: File,
    len: u64,
    /// The piece size and each piece's BLAKE3 (none in a recording without a seal).
    seal: Option<(u64, Vec<String>)>,
}

impl FileAt {
    /// Where it is.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The file at `path` with no seal (tests build recordings' files by hand).
    #[cfg(test)]
    pub(crate) fn unsealed(path: &std::path::Path) -> Result<FileAt, RecordingError> {
        let file = File::open(path).map_err(|e| RecordingError::Io {
            path: path.display().to_string(),
            source: Arc::new(e),
        })?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(FileAt {
            path: path.to_path_buf(),
            file,
            len,
            seal: None,
        })
    }

    /// Its size.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes a read checks at least: its seal's piece (reading less costs as much), or
    /// 64 KiB for a file without a seal.
    pub fn grain(&self) -> u64 {
        self.seal.as_ref().map_or(64 << 10, |(piece, _)| *piece)
    }

    /// Bytes `from..to` (within the file), checked against the seal (the pieces on every
    /// core).
    pub fn read(&self, from: u64, to: u64) -> Result<Vec<u8>, RecordingError> {
        let invalid = |message: String| RecordingError::Invalid {
            path: self.path.display().to_string(),
            message,
        };
        if from > to || to > self.len {
            return Err(invalid(format!(
                "bytes {from} to {to} lie outside its {} bytes",
                self.len
            )));
        }
        let (first, last) = match &self.seal {
            Some((piece, _)) => (
                from / piece * piece,
                to.div_ceil(*piece).saturating_mul(*piece).min(self.len),
            ),
            None => (from, to),
        };
        let mut bytes = vec![0u8; (last - first) as usize];
        self.file
            .read_exact_at(&mut bytes, first)
            .map_err(|e| RecordingError::Io {
                path: self.path.display().to_string(),
                source: Arc::new(e),
            })?;
        if let Some((piece, hashes)) = &self.seal {
            let index = (first / piece) as usize;
            let pieces: Vec<&[u8]> = bytes.chunks(*piece as usize).collect();
            if let Some(bad) = seal::first_mismatch(&pieces, &hashes[index..]) {
                return Err(invalid(seal::damaged_piece(index + bad, *piece, self.len)));
            }
        }
        bytes.drain(..(from - first) as usize);
        bytes.truncate((to - from) as usize);
        Ok(bytes)
    }
}

impl Recording {
    /// The file `name`, opened to be read a range at a time ([`FileAt`]), or `None` if the
    /// recording has none. Its size is checked here, its bytes as they are read.
    pub(super) fn open_at(&self, name: &str) -> Result<Option<FileAt>, RecordingError> {
        let path = self.dir.join(name);
        let invalid = |message: String| RecordingError::Invalid {
            path: path.display().to_string(),
            message,
        };
        let sealed = match &self.manifest.seal {
            None => None,
            Some(seal) => match self.seal_of(name)? {
                Some(f) => Some((seal.piece, f)),
                None => return Ok(None),
            },
        };
        let (file, len) = match plain_file::open(&path, Some(&self.dir)) {
            Ok(f) => f,
            Err(e) if e.is_missing() && sealed.is_none() => return Ok(None),
            Err(e) if e.is_missing() => {
                let bytes = sealed.map_or(0, |(_, f)| f.bytes);
                let what = format!("the recording was written with it ({bytes} bytes)");
                return Err(missing(&path, &what));
            }
            Err(e) => return Err(e.into()),
        };
        let seal = match sealed {
            None if len > self.limit(name) => {
                return Err(invalid(format!("{len} bytes: more than {}", self.limit(name))))
            }
            None => None,
            Some((piece, f)) => {
                if len > f.bytes {
                    return Err(invalid(format!(
                        "{len} bytes where the recording wrote {}: it was changed after recording",
                        f.bytes
                    )));
                }
                if len < f.bytes {
                    return Err(invalid(format!(
                        "{len} bytes where the recording wrote {}: it was cut short",
                        f.bytes
                    )));
                }
                if piece == 0 || f.blake3.len() as u64 != len.div_ceil(piece) {
                    return Err(invalid(format!(
                        "the seal lists {} hashes for {len} bytes in pieces of {piece}",
                        f.blake3.len()
                    )));
                }
                Some((piece, f.blake3.clone()))
            }
        };
        Ok(Some(FileAt { path, file, len, seal }))
    }
}

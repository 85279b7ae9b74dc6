//! A recording's packet bytes as a backend hands them over: in memory (the step and msr
//! backends build them there), or a file a backend's helper wrote (QEMU's plugin), which the
//! writer moves into the recording instead of reading it: a trace of several gigabytes would
//! otherwise be read whole into memory and written again after the program has ended.

use std::path::{Path, PathBuf};

/// The packet bytes.
#[derive(Debug)]
pub enum TraceBytes {
    /// Held in memory.
    Memory(Vec<u8>),
    /// A file in a scratch directory, which goes away with this value.
    File {
        /// The file.
        path: PathBuf,
        /// Its length when the backend finished.
        len: u64,
        /// The directory holding it.
        scratch: ScratchDir,
    },
}

impl TraceBytes {
    /// The number of bytes.
    pub fn len(&self) -> u64 {
        match self {
            Self::Memory(bytes) => bytes.len() as u64,
            Self::File { len, .. } => *len,
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Puts the bytes at `to`: writes them, or renames the file there (copying it where the
    /// rename cannot, across file systems).
    pub fn place(&self, to: &Path) -> std::io::Result<()> {
        match self {
            Self::Memory(bytes) => std::fs::write(to, bytes),
            Self::File { path, .. } => std::fs::rename(path, to).or_else(|_| std::fs::copy(path, to).map(|_| ())),
        }
    }
}

impl From<Vec<u8>> for TraceBytes {
    fn from(bytes: Vec<u8>) -> Self {
        Self::Memory(bytes)
    }
}

/// A directory removed, with what it holds, when this value is dropped.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// Creates `dir` afresh (removing what a previous run with the same name left).
    pub fn create(dir: PathBuf) -> std::io::Result<Self> {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }

    /// `dir` as it is (made by someone else, such as a directory inside another scratch
    /// directory), removed when dropped.
    pub fn adopt(dir: PathBuf) -> Self {
        Self(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

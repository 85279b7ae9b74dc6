//! A capture of what the plugin hands the engine (issue 20): every translated block's
//! instructions and the executed entries, as the feeder takes them, so that the engine's cost
//! a block can be measured on one core, alone, and the same stream fed again after a change
//! (`cargo bench --bench qemu_engine`). The plugin writes one when `RTIT_QEMU_CAPTURE` names a
//! directory; nothing is captured otherwise.
//!
//! Two files: `blocks.bin`, per translation the id the engine gave it, its instruction count,
//! and per instruction its address, length and bytes (little-endian u32, u32, then u64, u8,
//! bytes); `entries.bin`, the ring's words in order (see [`Started::word`]), each
//! [`SYSCALL_MARK`] followed by the system call's number.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::engine::{Started, SYSCALL_MARK};

/// The files of a capture.
pub const BLOCKS: &str = "blocks.bin";
/// See [`BLOCKS`].
pub const ENTRIES: &str = "entries.bin";

/// The environment variable naming the directory the plugin captures into.
pub const ENV: &str = "RTIT_QEMU_CAPTURE";
/// Entries captured at most (400 MB).
pub const MAX_ENTRIES: u64 = 50_000_000;

/// What can go wrong reading or writing a capture.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file ends inside a record.
    #[error("{path}: truncated at byte {offset}")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Where the record that does not fit starts.
        offset: usize,
    },
}

/// A capture being written.
pub struct Capture {
    dir: PathBuf,
    blocks: std::io::BufWriter<std::fs::File>,
    entries: std::io::BufWriter<std::fs::File>,
    count: u64,
}

fn create(path: PathBuf) -> Result<std::fs::File, CaptureError> {
    std::fs::File::create(&path).map_err(|source| CaptureError::Io { path, source })
}

impl Capture {
    /// Starts a capture in `dir` (which must exist).
    pub fn create(dir: &Path) -> Result<Self, CaptureError> {
        Ok(Self::with_files(
            dir,
            create(dir.join(BLOCKS))?,
            create(dir.join(ENTRIES))?,
        ))
    }

    /// A capture into `blocks` and `entries`, files the caller created in `dir` (the plugin
    /// moves them out of the program's descriptor numbers first).
    pub fn with_files(dir: &Path, blocks: std::fs::File, entries: std::fs::File) -> Self {
        Self {
            dir: dir.to_path_buf(),
            blocks: std::io::BufWriter::new(blocks),
            entries: std::io::BufWriter::new(entries),
            count: 0,
        }
    }

    fn io(&self, name: &str) -> impl FnOnce(std::io::Error) -> CaptureError {
        let path = self.dir.join(name);
        move |source| CaptureError::Io { path, source }
    }

    /// Block `id` was translated from `insns` (address, bytes).
    pub fn translation(&mut self, id: u32, insns: &[(u64, &[u8])]) -> Result<(), CaptureError> {
        let mut rec = Vec::with_capacity(8 + insns.len() * 16);
        rec.extend_from_slice(&id.to_le_bytes());
        rec.extend_from_slice(&(insns.len() as u32).to_le_bytes());
        for (ip, bytes) in insns {
            rec.extend_from_slice(&ip.to_le_bytes());
            rec.push(bytes.len() as u8);
            rec.extend_from_slice(bytes);
        }
        self.blocks.write_all(&rec).map_err(self.io(BLOCKS))
    }

    /// Entries the engine takes next; `numbers` gives the system call of each mark among
    /// them, in order. Nothing beyond [`MAX_ENTRIES`].
    pub fn entries(&mut self, batch: &[Started], mut numbers: impl Iterator<Item = u64>) -> Result<(), CaptureError> {
        if self.count >= MAX_ENTRIES {
            return Ok(());
        }
        self.count += batch.len() as u64;
        let mut words = Vec::with_capacity(batch.len() * 8 + 8);
        for s in batch {
            words.extend_from_slice(&s.word().to_le_bytes());
            if s.id == SYSCALL_MARK {
                words.extend_from_slice(&numbers.next().unwrap_or(u64::MAX).to_le_bytes());
            }
        }
        self.entries.write_all(&words).map_err(self.io(ENTRIES))
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) -> Result<(), CaptureError> {
        self.blocks.flush().map_err(self.io(BLOCKS))?;
        self.entries.flush().map_err(self.io(ENTRIES))
    }
}

/// A translation as captured: the engine's id, and each instruction's address and bytes.
pub type Translation = (u32, Vec<(u64, Vec<u8>)>);

/// An executed entry as captured: a block that started, or a system call (its number, and
/// the counts of the block that made it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// A block started.
    Block(Started),
    /// A system call.
    Syscall(u64, super::engine::Counts),
}

/// Reads the capture in `dir`.
pub fn load(dir: &Path) -> Result<(Vec<Translation>, Vec<Entry>), CaptureError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|source| CaptureError::Io { path, source })
    };
    let truncated = |name: &str, offset: usize| CaptureError::Truncated {
        path: dir.join(name),
        offset,
    };
    let b = read(BLOCKS)?;
    let mut translations = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let start = at;
        let word = |at: usize, n: usize| b.get(at..at + n).ok_or_else(|| truncated(BLOCKS, start));
        let id = u32::from_le_bytes(word(at, 4)?.try_into().expect("4 bytes"));
        let n = u32::from_le_bytes(word(at + 4, 4)?.try_into().expect("4 bytes"));
        at += 8;
        let mut insns = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let ip = u64::from_le_bytes(word(at, 8)?.try_into().expect("8 bytes"));
            let len = usize::from(word(at + 8, 1)?[0]);
            insns.push((ip, word(at + 9, len)?.to_vec()));
            at += 9 + len;
        }
        translations.push((id, insns));
    }
    let e = read(ENTRIES)?;
    if e.len() % 8 != 0 {
        return Err(truncated(ENTRIES, e.len() / 8 * 8));
    }
    let mut words = e
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")));
    let mut entries = Vec::with_capacity(e.len() / 8);
    while let Some(w) = words.next() {
        let s = Started::from_word(w);
        entries.push(match s.id {
            SYSCALL_MARK => Entry::Syscall(words.next().unwrap_or(u64::MAX), s.before),
            _ => Entry::Block(s),
        });
    }
    Ok((translations, entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qemu::engine::Counts;

    #[test]
    fn a_capture_reads_back_as_written_and_a_cut_one_says_where() {
        let dir = std::env::temp_dir().join(format!("rtit-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let mut c = Capture::create(&dir).expect("create");
        c.translation(0, &[(0x1000, &[0x90][..]), (0x1001, &[0x0f, 0x05][..])])
            .expect("translation");
        let block = Started {
            id: 0,
            before: Counts { started: 2 },
        };
        let mark = Started {
            id: SYSCALL_MARK,
            before: Counts { started: 2 },
        };
        c.entries(&[block, mark, block], [39].into_iter()).expect("entries");
        c.flush().expect("flush");
        drop(c);
        let (t, e) = load(&dir).expect("load");
        assert_eq!(t, vec![(0, vec![(0x1000, vec![0x90]), (0x1001, vec![0x0f, 0x05])])]);
        assert_eq!(
            e,
            vec![
                Entry::Block(block),
                Entry::Syscall(39, mark.before),
                Entry::Block(block)
            ]
        );
        let blocks = dir.join(BLOCKS);
        let bytes = std::fs::read(&blocks).expect("read");
        std::fs::write(&blocks, &bytes[..bytes.len() - 1]).expect("cut");
        let err = load(&dir).expect_err("cut");
        assert!(err.to_string().contains("truncated at byte 0"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

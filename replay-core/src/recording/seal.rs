//! The seal of a recording: what every file held when the recorder finished, so that a file
//! changed afterwards is refused instead of served as another history. RTIT packets carry no
//! checksum (chapter 4): one flipped bit of a TIP's address decodes, without a single error,
//! to a history that never ran (an instruction decoded from the middle of another), and a
//! system call's result edited in its log shows other values. Only the recording can tell.
//!
//! The manifest's `seal` holds, for every file but the manifest and the images (which carry
//! their SHA-256 already), its size and the BLAKE3 of each piece of [`PIECE`] bytes; pieces
//! let a multi-gigabyte trace be checked on every core and say where damage lies, and let the
//! whole pieces of a trace cut short be checked. The manifest seals itself: `seal.manifest`
//! is the BLAKE3 of `manifest.json` as written with that value's 64 digits all `0`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{files, RecordingError};

/// Bytes a hash of a file covers (the last piece of a file may be shorter).
pub const PIECE: u64 = 4 << 20;

/// What stands in for `seal.manifest` while the manifest is hashed.
const PLACEHOLDER: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// `manifest.json`'s `seal`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seal {
    /// The BLAKE3 of `manifest.json` with this value written as 64 `0` digits.
    pub manifest: String,
    /// The bytes each hash covers.
    pub piece: u64,
    /// Every file but the manifest and the images, by its name in the recording.
    pub files: BTreeMap<String, FileSeal>,
}

/// A file's size and contents as the recorder wrote them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSeal {
    /// Its size.
    pub bytes: u64,
    /// The BLAKE3 of each piece, in order (none for an empty file).
    pub blake3: Vec<String>,
}

fn hex(hash: &blake3::Hash) -> String {
    hash.to_hex().to_string()
}

/// Hashes what `from` holds piece by piece, reading it as a stream (a trace of gigabytes is
/// never held in memory for this).
fn hash_stream(mut from: impl Read, piece: u64) -> std::io::Result<FileSeal> {
    let mut buf = vec![0u8; piece as usize];
    let (mut bytes, mut hashes) = (0u64, Vec::new());
    loop {
        let mut filled = 0;
        while filled < buf.len() {
            match from.read(&mut buf[filled..])? {
                0 => break,
                n => filled += n,
            }
        }
        if filled == 0 {
            break;
        }
        bytes += filled as u64;
        hashes.push(hex(&blake3::hash(&buf[..filled])));
        if filled < buf.len() {
            break;
        }
    }
    Ok(FileSeal { bytes, blake3: hashes })
}

/// Checks the file at `path`, a plain file inside `dir`, against `sealed` as a stream: the
/// whole of it, wherever it differs (`rtit info`: no reader of the file is at hand).
pub(super) fn check_file(path: &Path, dir: &Path, sealed: &FileSeal, piece: u64) -> Result<(), RecordingError> {
    let (file, _) = crate::plain_file::open(path, Some(dir))?;
    let io = |source| RecordingError::Io {
        path: path.display().to_string(),
        source: std::sync::Arc::new(source),
    };
    let found = hash_stream(file.take(sealed.bytes.saturating_add(1)), piece).map_err(io)?;
    let invalid = |message: String| RecordingError::Invalid {
        path: path.display().to_string(),
        message,
    };
    if found.bytes > sealed.bytes {
        return Err(invalid(format!(
            "more than the {} bytes the recording wrote: it was changed after recording",
            sealed.bytes
        )));
    }
    let whole = (found.bytes / piece) as usize;
    if let Some(bad) = (0..whole.min(sealed.blake3.len())).find(|&i| found.blake3[i] != sealed.blake3[i]) {
        return Err(invalid(damaged_piece(bad, piece, found.bytes)));
    }
    if found.bytes < sealed.bytes {
        let what = format!(
            "{} bytes where the recording wrote {}: it was cut short",
            found.bytes, sealed.bytes
        );
        return Err(invalid(what));
    }
    if found.blake3 != sealed.blake3 {
        return Err(invalid(damaged_piece(
            found.blake3.len().saturating_sub(1),
            piece,
            found.bytes,
        )));
    }
    Ok(())
}

/// Where a piece lies that is not as written, in words.
pub(super) fn damaged_piece(index: usize, piece: u64, len: u64) -> String {
    let from = index as u64 * piece;
    let to = (from + piece).min(len);
    format!(
        "bytes {from} to {to} are not what the recording wrote (their BLAKE3 differs from the seal's): the file was changed or damaged after recording"
    )
}

/// The files of the recording in `dir` that the seal covers: every plain file at its top
/// level but the manifest (the images, under `images/`, carry their own hashes, and a stored
/// timeline is not part of the recording).
fn sealed_names(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_file() && name != files::MANIFEST && !name.starts_with(crate::timeline::cache::FILE) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Seals the finished recording in `dir`: hashes every file, and rewrites the manifest with
/// the seal and its own hash. The last step of writing a recording: nothing may change a file
/// after it.
pub fn seal(dir: &Path) -> Result<super::Manifest, std::io::Error> {
    let path = dir.join(files::MANIFEST);
    let mut manifest: super::Manifest = serde_json::from_slice(&std::fs::read(&path)?)?;
    let mut sealed = BTreeMap::new();
    for name in sealed_names(dir)? {
        let file = hash_stream(std::fs::File::open(dir.join(&name))?, PIECE)?;
        sealed.insert(name, file);
    }
    manifest.seal = Some(Seal {
        manifest: PLACEHOLDER.to_string(),
        piece: PIECE,
        files: sealed,
    });
    let mut text = serde_json::to_vec_pretty(&manifest)?;
    let slot = placeholder_at(&text, PLACEHOLDER).ok_or_else(|| std::io::Error::other("no seal in the manifest"))?;
    let hash = hex(&blake3::hash(&text));
    text[slot..slot + PLACEHOLDER.len()].copy_from_slice(hash.as_bytes());
    if let Some(seal) = &mut manifest.seal {
        seal.manifest = hash;
    }
    let tmp = dir.join(format!(".{}.tmp", files::MANIFEST));
    std::fs::write(&tmp, &text)?;
    std::fs::rename(&tmp, &path)?;
    Ok(manifest)
}

/// Where the seal's own hash (`value`) starts in the manifest's bytes: its last occurrence as
/// a JSON string (the seal is the manifest's last field).
fn placeholder_at(text: &[u8], value: &str) -> Option<usize> {
    let quoted = format!("\"{value}\"");
    let at = memchr::memmem::rfind(text, quoted.as_bytes())?;
    Some(at + 1)
}

/// Checks the manifest's bytes (`text`, as read) against the hash its seal holds.
pub(super) fn check_manifest(path: &Path, text: &[u8], seal: &Seal) -> Result<(), RecordingError> {
    let invalid = |message: String| RecordingError::Invalid {
        path: path.display().to_string(),
        message,
    };
    // As written: lower-case digits (a bit flipped from `a` to `A` is a change too).
    let well_formed = seal.manifest.len() == PLACEHOLDER.len()
        && seal
            .manifest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let slot = placeholder_at(text, &seal.manifest).filter(|_| well_formed);
    let Some(slot) = slot else {
        return Err(invalid(format!(
            "seal.manifest `{}` is not the manifest's BLAKE3 (64 hexadecimal digits)",
            seal.manifest
        )));
    };
    let mut blank = text.to_vec();
    blank[slot..slot + PLACEHOLDER.len()].copy_from_slice(PLACEHOLDER.as_bytes());
    let found = hex(&blake3::hash(&blank));
    if found != seal.manifest {
        return Err(invalid(format!(
            "its contents do not match its seal (BLAKE3 {found}, sealed {}): the manifest was changed or damaged after recording",
            seal.manifest
        )));
    }
    if seal.piece == 0 {
        return Err(invalid("seal.piece is 0".to_string()));
    }
    Ok(())
}

/// How a file's bytes compare with its seal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// Every byte is as the recorder wrote it.
    Whole,
    /// Shorter than written (cut short); every whole piece there is as written, and the last
    /// `unchecked` bytes (a piece cut in two) could not be checked.
    Short {
        /// Bytes at the end that no hash covers any more.
        unchecked: u64,
    },
}

/// Checks `bytes`, read from `path`, against `sealed`, on every core for a large file.
pub(super) fn check(path: &Path, bytes: &[u8], sealed: &FileSeal, piece: u64) -> Result<Checked, RecordingError> {
    let invalid = |message: String| RecordingError::Invalid {
        path: path.display().to_string(),
        message,
    };
    let len = bytes.len() as u64;
    if len > sealed.bytes {
        return Err(invalid(format!(
            "{len} bytes where the recording wrote {}: it was changed after recording",
            sealed.bytes
        )));
    }
    let expected_pieces = sealed.bytes.div_ceil(piece);
    if sealed.blake3.len() as u64 != expected_pieces {
        return Err(invalid(format!(
            "the seal lists {} hashes for {} bytes in pieces of {piece}",
            sealed.blake3.len(),
            sealed.bytes
        )));
    }
    let pieces: Vec<&[u8]> = bytes.chunks(piece as usize).collect();
    // A piece cut short has no hash to compare with.
    let whole = if len == sealed.bytes || len % piece == 0 {
        pieces.len()
    } else {
        pieces.len() - 1
    };
    if let Some(bad) = first_mismatch(&pieces[..whole], &sealed.blake3) {
        return Err(invalid(damaged_piece(bad, piece, len)));
    }
    Ok(match len == sealed.bytes {
        true => Checked::Whole,
        false => Checked::Short {
            unchecked: len - whole as u64 * piece,
        },
    })
}

/// The first piece whose hash is not `hashes`' (same index), hashing on every core.
pub(super) fn first_mismatch(pieces: &[&[u8]], hashes: &[String]) -> Option<usize> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(pieces.len())
        .max(1);
    let matches = |i: usize| hex(&blake3::hash(pieces[i])) == hashes[i];
    if threads == 1 {
        return (0..pieces.len()).find(|&i| !matches(i));
    }
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let matches = &matches;
                s.spawn(move || (t..pieces.len()).step_by(threads).find(|&i| !matches(i)))
            })
            .collect();
        // A worker that panicked checked nothing: its pieces count as not matching.
        workers.into_iter().filter_map(|w| w.join().unwrap_or(Some(0))).min()
    })
}

#[cfg(test)]
mod tests;

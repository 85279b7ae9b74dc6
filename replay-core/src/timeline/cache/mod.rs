//! The timeline kept next to its recording (issue 19, "ready at once"): decoding a history of
//! a billion instructions takes seconds even on every core, so the first open that took over
//! a second stores what it built in `timeline.cache`, and later opens read it back instead.
//!
//! The file is only ever used for the very recording and the very decoder that wrote it: its
//! key covers the trace's bytes, every other file of the recording (name, size, modification
//! time) and a digest of this crate's sources made when it was built (`build.rs`), so an rtit
//! built from other sources, whose decoder may differ, decodes again. A file that is damaged, cut short or of another key is
//! set aside and the timeline decoded as if it were not there. It is written to a temporary
//! name and renamed, so a replay that ends while writing leaves nothing half-written behind,
//! and removed by [`abandon_stores`] when the process ends first, so it leaves no temporary
//! either. Deleting it is always safe.
//!
//! Files: `format` (the bytes of a stored timeline), `packed` (those bytes packed with LZ4 in
//! the file), `temporary` (the files being written).

mod format;
mod packed;
mod temporary;

use std::fs;
use std::hash::Hasher;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustc_hash::FxHasher;
use sha2::{Digest, Sha256};

use super::Timeline;
use temporary::Temporary;
pub use temporary::{abandon_stores, pace_stores};

/// The stored timeline's name in the recording's directory.
pub const FILE: &str = "timeline.cache";

/// Why a stored timeline was not read or not written.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Reading or writing the file failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It is not a plain file of the recording.
    #[error("{0}")]
    File(crate::plain_file::PlainFileError),
    /// The file is not a stored timeline (or of a format this rtit does not read).
    #[error("not a stored timeline of this format")]
    NotACache,
    /// The file is a stored timeline as an older rtit wrote it, not packed.
    #[error("stored unpacked, by an older rtit")]
    Unpacked,
    /// It was stored for another recording, or by another rtit.
    #[error("stored for another recording or by another rtit")]
    OtherKey,
    /// It is damaged.
    #[error("damaged at byte {offset}: {what}")]
    Corrupt {
        /// Where reading found it.
        offset: u64,
        /// What is wrong.
        what: &'static str,
    },
    /// The process was ending ([`abandon_stores`]) before it was written whole; the
    /// temporary is removed.
    #[error("abandoned before it was written whole: rtit was ending")]
    Abandoned,
}

/// What a stored timeline belongs to: a digest of the recording and the running rtit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key([u8; 32]);

impl Key {
    /// The key of the recording in `dir` whose trace is `trace`, decoded by this build;
    /// `None` when the directory cannot be looked at (then nothing is stored or read).
    /// `sealed`: hashes of the trace's bytes already checked against them (the recording's
    /// seal), which stand for the bytes so that they are not hashed a second time.
    pub fn of(dir: &Path, trace: &[u8], sealed: Option<&[String]>) -> Option<Key> {
        let mut digest = Sha256::new();
        digest.update(b"rtit timeline key 1\0");
        digest.update(env!("RTIT_DECODER_DIGEST"));
        let mut files = Vec::new();
        list(dir, &mut files).ok()?;
        files.sort();
        for file in &files {
            let relative = file.strip_prefix(dir).ok()?;
            file_identity(&mut digest, relative, file)?;
        }
        digest.update((trace.len() as u64).to_le_bytes());
        match sealed {
            Some(hashes) => hashes.iter().for_each(|h| digest.update(h)),
            None => {
                let mut sum = FxHasher::default();
                sum.write(trace);
                digest.update(sum.finish().to_le_bytes());
            }
        }
        Some(Key(digest.finalize().into()))
    }
}

/// Adds a file's name, size and modification time to `digest`.
fn file_identity(digest: &mut Sha256, name: &Path, path: &Path) -> Option<()> {
    let meta = fs::metadata(path).ok()?;
    let modified = meta.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
    digest.update(name.as_os_str().as_encoded_bytes());
    digest.update([0]);
    digest.update(meta.len().to_le_bytes());
    digest.update(modified.as_nanos().to_le_bytes());
    Some(())
}

/// Every file under `dir` but the stored timeline and its temporary copies.
fn list(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with(FILE) {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_dir() {
            list(&entry.path(), out)?;
        } else {
            out.push(entry.path());
        }
    }
    Ok(())
}

/// How much of a timeline to store: everything up to a point, so that what is appended
/// after decoding (the faulting instruction, which depends on how the recording was opened)
/// stays out while the timeline is written in the background.
#[derive(Debug, Clone, Copy)]
pub struct Prefix {
    len: u64,
    ips: usize,
    blocks: usize,
    runs: usize,
    nibbles: u64,
    events: usize,
}

impl Prefix {
    /// All of `timeline` as it is now.
    pub fn of(timeline: &Timeline) -> Self {
        Self {
            len: timeline.len,
            ips: timeline.blocks.ips.len(),
            blocks: timeline.blocks.count(),
            runs: timeline.runs.count,
            nibbles: timeline.runs.nibbles,
            events: timeline.events.len(),
        }
    }
}

/// When to read and store timelines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Read a stored timeline; store one when decoding took over [`STORE_ABOVE`].
    Auto,
    /// Read a stored timeline; store one whatever decoding took (tests, benchmarks).
    Always,
    /// Neither: decode (measuring the decoder, or a read-only recording).
    Off,
}

/// Decoding that takes longer than this is worth storing: reading back is ~10× faster.
pub const STORE_ABOVE: Duration = Duration::from_secs(1);

/// Where a timeline came from.
#[derive(Debug)]
pub enum Origin {
    /// Read back from the stored timeline at this path.
    Read(PathBuf),
    /// Decoded from the trace; `set_aside` says why a stored timeline there was not used.
    Decoded {
        /// How long decoding took.
        took: Duration,
        /// Why the file there was not read (stale, damaged), if there was one.
        set_aside: Option<CacheError>,
    },
}

/// What [`obtain`] leaves for [`Pending::store`]: whether and what to store.
#[derive(Debug)]
pub struct Pending {
    key: Option<Key>,
    prefix: Prefix,
    worth: bool,
    dir: PathBuf,
}

impl Pending {
    /// Stores `timeline` (as it was when obtained: what was appended since stays out) in the
    /// background if it was decoded and worth it.
    pub fn store(self, timeline: Arc<Timeline>) -> Option<JoinHandle<Result<PathBuf, CacheError>>> {
        let key = self.key.filter(|_| self.worth)?;
        store(&self.dir, key, timeline, self.prefix)
    }
}

/// The timeline of the recording in `dir` whose trace is `trace` (`sealed`: as [`Key::of`]
/// takes it): read back when a stored one of the same key is there, else made by `decode`.
pub fn obtain(
    dir: &Path,
    trace: &[u8],
    sealed: Option<&[String]>,
    policy: Policy,
    decode: impl FnOnce() -> Timeline,
) -> (Timeline, Origin, Pending) {
    let key = match policy {
        Policy::Off => None,
        Policy::Auto | Policy::Always => Key::of(dir, trace, sealed),
    };
    let set_aside = match key.as_ref().map(|k| load(dir, k)) {
        Some(Ok(Some(timeline))) => {
            let prefix = Prefix::of(&timeline);
            let pending = Pending {
                key: None,
                prefix,
                worth: false,
                dir: dir.to_path_buf(),
            };
            return (timeline, Origin::Read(dir.join(FILE)), pending);
        }
        Some(Err(e)) => Some(e),
        Some(Ok(None)) | None => None,
    };
    let started = Instant::now();
    let timeline = decode();
    let took = started.elapsed();
    let pending = Pending {
        key,
        prefix: Prefix::of(&timeline),
        worth: policy == Policy::Always || took > STORE_ABOVE,
        dir: dir.to_path_buf(),
    };
    (timeline, Origin::Decoded { took, set_aside }, pending)
}

/// The timeline stored in `dir` under `key`, if there is one (`Ok(None)`: no file).
pub fn load(dir: &Path, key: &Key) -> Result<Option<Timeline>, CacheError> {
    let path = dir.join(FILE);
    // A plain file in the recording only: a FIFO there would block, a device never end.
    let (file, _) = match crate::plain_file::open(&path, Some(dir)) {
        Ok(opened) => opened,
        Err(e) if e.is_missing() => return Ok(None),
        Err(e) => return Err(CacheError::File(e)),
    };
    // An older rtit's file, not packed: decoded again, and stored packed.
    let Some((unpacked, size)) = packed::Unpacker::open(BufReader::with_capacity(1 << 20, file))? else {
        return Err(match format::is_unpacked(&path) {
            true => CacheError::Unpacked,
            false => CacheError::NotACache,
        });
    };
    format::read(unpacked, key, size).map(Some)
}

/// Stores the first `prefix` of `timeline` in `dir` under `key`, on a thread of its own;
/// the path written, once it is there. `None` when the directory cannot be written to (a
/// recording rtit may only read) or the process is ending ([`abandon_stores`]): nothing is
/// stored then.
pub fn store(
    dir: &Path,
    key: Key,
    timeline: Arc<Timeline>,
    prefix: Prefix,
) -> Option<JoinHandle<Result<PathBuf, CacheError>>> {
    write_in_background(dir, move |out| format::write(&timeline, prefix, &key, out))
}

/// Runs `write` on a thread of its own into a temporary file in `dir`, renamed to [`FILE`]
/// once written whole; `None` when no temporary can be made there (see [`store`]).
fn write_in_background(
    dir: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()> + Send + 'static,
) -> Option<JoinHandle<Result<PathBuf, CacheError>>> {
    remove_stale(dir);
    let path = dir.join(FILE);
    // The process and a number of its own: two sessions of one process may store at once.
    static STORES: AtomicU64 = AtomicU64::new(0);
    let names = std::iter::repeat_with(|| STORES.fetch_add(1, Ordering::Relaxed))
        .take(16)
        .map(|n| dir.join(format!("{FILE}.{}.{n}.tmp", std::process::id())));
    let (temporary, file) = Temporary::create(names)?;
    Some(std::thread::spawn(move || {
        let written = packed::Packer::new(BufWriter::with_capacity(1 << 20, file)).and_then(|mut out| {
            write(&mut out)?;
            out.finish()
        });
        match written {
            // The write failed because the temporary was abandoned: that is the news.
            Err(_) if temporary.abandoned() => Err(CacheError::Abandoned),
            Err(e) => Err(e.into()),
            Ok(()) => temporary.keep(&path).map(|()| path),
        }
    }))
}

/// Removes the temporary copies that replays which ended while writing left behind: those
/// of processes no longer running (`timeline.cache.PID.N.tmp`).
fn remove_stale(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name.to_str().and_then(|n| {
            let rest = n.strip_prefix(FILE)?.strip_prefix('.')?.strip_suffix(".tmp")?;
            let pid = rest.split('.').next()?;
            pid.bytes().all(|b| b.is_ascii_digit()).then_some(pid)
        });
        if pid.is_some_and(|p| !Path::new("/proc").join(p).exists()) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests;

//! The temporary files this process is writing stored timelines into. A first replay of a
//! long recording writes gigabytes in the background; a replay that ends meanwhile (gdb's
//! `quit`, Ctrl-C, SIGTERM) must not leave them beside the recording until some later replay
//! clears stale ones, so whoever ends the process calls [`abandon_stores`], which removes
//! every temporary still being written.
//!
//! Every temporary is registered from the moment it is created until it is renamed into
//! place or removed. Creating, renaming and abandoning all take one lock, so a temporary is
//! either renamed whole or removed, never both and never neither, and once the process has
//! abandoned its stores no new one starts. An abandoned writer fails at its next buffer and
//! stops writing into the file, which is already gone from the directory.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::CacheError;

/// The temporaries being written, and whether the process is ending (no new ones then).
static WRITING: Mutex<Registry> = Mutex::new(Registry {
    entries: Vec::new(),
    ending: false,
});

struct Registry {
    entries: Vec<Entry>,
    ending: bool,
}

struct Entry {
    path: PathBuf,
    abandoned: Arc<AtomicBool>,
}

/// A poisoned lock only means a writer panicked; the list itself is always whole.
fn registry() -> MutexGuard<'static, Registry> {
    WRITING.lock().unwrap_or_else(|e| e.into_inner())
}

/// For a process about to end: removes every temporary a store of it is writing, and starts
/// no store after. Returns how many were being written (so the caller can say the history
/// was not kept).
pub fn abandon_stores() -> usize {
    let mut registry = registry();
    registry.ending = true;
    abandon(&mut registry, |_| true)
}

/// Removes the temporaries being written for which `which` holds (the tests abandon their
/// own, not those of other tests running in the same process).
#[cfg(test)]
pub(super) fn abandon_where(which: impl Fn(&Path) -> bool) -> usize {
    abandon(&mut registry(), which)
}

fn abandon(registry: &mut Registry, which: impl Fn(&Path) -> bool) -> usize {
    let before = registry.entries.len();
    registry.entries.retain(|entry| {
        if !which(&entry.path) {
            return true;
        }
        entry.abandoned.store(true, Ordering::SeqCst);
        let _ = fs::remove_file(&entry.path);
        false
    });
    before - registry.entries.len()
}

/// A temporary being written: removed when dropped unless renamed into place.
pub(super) struct Temporary {
    path: PathBuf,
    abandoned: Arc<AtomicBool>,
}

impl Temporary {
    /// Creates and registers the first of `candidates` that does not exist yet (never an
    /// existing file, nor a link someone put there); `None` when the process is ending or
    /// none can be created (a directory rtit may only read).
    pub(super) fn create(candidates: impl IntoIterator<Item = PathBuf>) -> Option<(Self, Abandonable<File>)> {
        let mut registry = registry();
        if registry.ending {
            return None;
        }
        for path in candidates {
            match File::options().write(true).create_new(true).open(&path) {
                Ok(file) => {
                    let abandoned = Arc::new(AtomicBool::new(false));
                    registry.entries.push(Entry {
                        path: path.clone(),
                        abandoned: abandoned.clone(),
                    });
                    let writer = Abandonable {
                        inner: file,
                        abandoned: abandoned.clone(),
                    };
                    return Some((Self { path, abandoned }, writer));
                }
                // A leftover of a killed process that had this one's pid: try the next name.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(_) => return None,
            }
        }
        None
    }

    /// Renames the finished temporary to `to`, unless it was abandoned meanwhile.
    pub(super) fn keep(self, to: &Path) -> Result<(), CacheError> {
        let mut registry = registry();
        if self.abandoned.load(Ordering::SeqCst) {
            return Err(CacheError::Abandoned);
        }
        fs::rename(&self.path, to)?;
        registry.entries.retain(|e| !Arc::ptr_eq(&e.abandoned, &self.abandoned));
        Ok(())
    }

    /// Whether [`abandon_stores`] removed it (a write error then is only its consequence).
    pub(super) fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::SeqCst)
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        let mut registry = registry();
        let before = registry.entries.len();
        registry.entries.retain(|e| !Arc::ptr_eq(&e.abandoned, &self.abandoned));
        // Still registered: neither renamed nor abandoned, so it is this writer's to remove.
        if registry.entries.len() < before {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// A writer that fails once its temporary is abandoned, so that a store cut short stops
/// writing at its next buffer instead of filling a file nobody can see any more.
pub(super) struct Abandonable<W> {
    inner: W,
    abandoned: Arc<AtomicBool>,
}

impl<W: Write> Abandonable<W> {
    fn check(&self) -> io::Result<()> {
        if self.abandoned.load(Ordering::Relaxed) {
            return Err(io::Error::other("the store was abandoned"));
        }
        Ok(())
    }
}

/// Milliseconds a store pauses after each buffer it writes (0: none).
static PACE_MS: AtomicU64 = AtomicU64::new(0);

/// Makes every store of this process pause `pace` after each buffer (about 1 MiB) it writes:
/// for tests, whose replays must end while a store is still going on however fast the
/// machine writes (`rtit replay --store-pace-ms`).
pub fn pace_stores(pace: std::time::Duration) {
    PACE_MS.store(pace.as_millis() as u64, Ordering::Relaxed);
}

impl<W: Write> Write for Abandonable<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.check()?;
        let written = self.inner.write(buf)?;
        match PACE_MS.load(Ordering::Relaxed) {
            0 => {}
            ms => std::thread::sleep(std::time::Duration::from_millis(ms)),
        }
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.check()?;
        self.inner.flush()
    }
}

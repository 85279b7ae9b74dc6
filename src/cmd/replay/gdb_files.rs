//! The files the gdb that `rtit replay` starts reads, in a directory of their own under
//! `$TMPDIR` that goes when rtit ends (a drop, or [`remove`] on the way out after a signal):
//! its first commands (`init.gdb`), and a sysroot laid out from the recording's images.
//!
//! With a sysroot, gdb reads each library locally instead of over the remote protocol: no
//! "File transfers from remote targets can be slow" warning, no "Reading … from remote
//! target" line per library, and no transfer. Where every image is on this machine as it
//! was recorded, the sysroot is `/` and gdb names the libraries as natively; otherwise it is
//! laid out from the recording's copies under the paths the program loaded them from, with
//! the dynamic linker under the name the executable gives it too (PT_INTERP), where gdb
//! looks for its debug interface. A plain gdb that connects by itself still gets every file
//! over host I/O.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use rtit_replay_core::recording::{ImageKind, Recording};
use sha2::Digest;

/// The directory of the files of the gdb started now, for [`remove`].
static DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The launched gdb's files; removed when dropped.
pub struct GdbFiles {
    dir: PathBuf,
    /// Every image is on this machine as it was recorded, under its own path: gdb reads
    /// them where they are, and names them as natively (no sysroot of rtit's in the names).
    native: bool,
}

impl GdbFiles {
    /// Writes the files for a gdb debugging `rec`.
    pub fn write(rec: &Recording) -> Result<Self> {
        let tmp = std::env::temp_dir();
        let dir = (0..100)
            .map(|n| tmp.join(format!("rtit-gdb-{}-{n}", std::process::id())))
            // create_dir fails on an existing name: never reuse what someone else made.
            .find(|d| std::fs::create_dir(d).is_ok())
            .with_context(|| format!("cannot create a directory for gdb's files in {}", tmp.display()))?;
        *DIR.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir.clone());
        let files = Self {
            dir,
            native: native(rec),
        };
        let init = files.init();
        let mut file = std::fs::File::create(&init).with_context(|| format!("cannot create {}", init.display()))?;
        file.write_all(rtit_stub::monitor::GDB_INIT.as_bytes())
            .with_context(|| format!("cannot write {}", init.display()))?;
        if !files.native {
            lay_out(rec, &files.sysroot())?;
        }
        Ok(files)
    }

    /// The commands gdb runs first (`-ix`): the hook that refreshes its caches after
    /// `monitor goto`.
    pub fn init(&self) -> PathBuf {
        self.dir.join("init.gdb")
    }

    /// The executable for gdb to read: where it is on this machine if every image is there
    /// as recorded (gdb then names it as natively), else the recording's copy.
    pub fn executable(&self, rec: &Recording) -> Option<PathBuf> {
        let image = rtit_stub::files::executable(rec)?;
        Some(match self.native {
            true => PathBuf::from(&image.path),
            false => rec.dir.join(&image.file),
        })
    }

    /// The sysroot (`set sysroot`): `/` where every image is on this machine as recorded,
    /// else one laid out from the recording's copies.
    pub fn sysroot(&self) -> PathBuf {
        match self.native {
            true => PathBuf::from("/"),
            false => self.dir.join("sysroot"),
        }
    }
}

impl Drop for GdbFiles {
    fn drop(&mut self) {
        remove();
    }
}

/// Removes the launched gdb's files, if there are any: rtit is ending.
pub fn remove() {
    if let Some(dir) = DIR.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Whether every ELF image of `rec` is on this machine under the path the program loaded it
/// from, with the same bytes (its SHA-256; sizes first), and so is the dynamic linker under
/// the executable's name for it: then gdb reads them there (as rr's gdb does), and a
/// recording from another machine, or a library updated since, gets a sysroot of copies.
fn native(rec: &Recording) -> bool {
    let same = |path: &str, image: &rtit_replay_core::recording::ImageRecord| {
        let size = std::fs::metadata(rec.dir.join(&image.file)).map(|m| m.len());
        if std::fs::metadata(path).map(|m| m.len()).ok() != size.ok() {
            return false;
        }
        let Ok(bytes) = std::fs::read(path) else { return false };
        let found: String = sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        found.eq_ignore_ascii_case(&image.sha256)
    };
    let mut images = rec.manifest.images.iter().filter(|i| i.kind == ImageKind::Elf);
    let interp = rtit_stub::files::interpreter(rec);
    images.all(|i| same(&i.path, i)) && interp.map_or(true, |(name, image)| same(&name, image))
}

/// Links every ELF image of `rec` under `sysroot` at the path the program loaded it from,
/// and the dynamic linker under the executable's name for it too.
fn lay_out(rec: &Recording, sysroot: &Path) -> Result<()> {
    let recording = rec
        .dir
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", rec.dir.display()))?;
    let interp = rtit_stub::files::interpreter(rec).map(|(name, image)| (name, image.file.clone()));
    let images = rec
        .manifest
        .images
        .iter()
        .filter(|i| i.kind == ImageKind::Elf)
        .map(|i| (i.path.clone(), i.file.clone()));
    for (path, copy) in images.chain(interp) {
        // Only absolute paths made of plain names: a path is placed under the sysroot.
        let relative = Path::new(&path).strip_prefix("/").ok();
        let relative = relative.filter(|r| r.components().all(|c| matches!(c, std::path::Component::Normal(_))));
        let Some(relative) = relative else { continue };
        let link = sysroot.join(relative);
        if let Some(parent) = link.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        // Two names of one image (the executable's interpreter path may be its own path).
        if link.symlink_metadata().is_ok() {
            continue;
        }
        std::os::unix::fs::symlink(recording.join(&copy), &link)
            .with_context(|| format!("cannot link {}", link.display()))?;
    }
    Ok(())
}

//! How every file of a recording is read: a plain file inside the recording, of bounded size
//! ([`crate::plain_file`]), and, in a sealed recording, exactly as the recorder wrote it
//! ([`super::seal`]): a file the seal lists must be there, one it does not list must not.

use std::path::{Path, PathBuf};

use super::seal::{self, Checked};
use super::{files, ImageRecord, Recording, RecordingError};
use crate::plain_file::{self, PlainFileError};

/// The most a JSON file of a recording without a seal may hold (the manifest, the map, the
/// snapshot index, the CPUID table).
pub(super) const JSON_LIMIT: u64 = 256 << 20;
/// The most a log or snapshot of a recording without a seal may hold.
const LOG_LIMIT: u64 = 16 << 30;
/// The most an image copy may hold.
const IMAGE_LIMIT: u64 = 4 << 30;

/// What [`Recording::check_seal`] found: every file as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SealChecked {
    /// Files checked (the sealed ones and the images).
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Names (relative to the recording) of what lies there that the recording was not
    /// written with, and nothing reads.
    pub foreign: Vec<String>,
}

/// A file that is not there, as an error naming it.
pub(super) fn missing(path: &Path, what: &str) -> RecordingError {
    RecordingError::Invalid {
        path: path.display().to_string(),
        message: format!("missing: {what}"),
    }
}

impl Recording {
    fn path_of(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The bound on `name`'s size in a recording without a seal.
    pub(super) fn limit(&self, name: &str) -> u64 {
        match name {
            files::TRACE => self.manifest.trace_bytes,
            files::MANIFEST | files::MAPS | files::MEMORY | files::CPUID => JSON_LIMIT,
            _ => LOG_LIMIT,
        }
    }

    /// What the seal says of `name`, in a sealed recording: `None` if it lists no such file
    /// (an error if one lies there all the same: it was added after recording).
    pub(super) fn seal_of(&self, name: &str) -> Result<Option<&seal::FileSeal>, RecordingError> {
        let found = self.manifest.seal.as_ref().and_then(|s| s.files.get(name));
        let path = self.path_of(name);
        if found.is_none() && path.symlink_metadata().is_ok() {
            return Err(RecordingError::Invalid {
                path: path.display().to_string(),
                message: "not one of the files the recording was written with: it was added after recording"
                    .to_string(),
            });
        }
        Ok(found)
    }

    /// The file `name` as the recorder wrote it and how it compares with the seal (always
    /// whole without one), or `None` if the recording has no such file.
    pub(super) fn read_checked(&self, name: &str) -> Result<Option<(Vec<u8>, Checked)>, RecordingError> {
        let path = self.path_of(name);
        let Some(seal) = &self.manifest.seal else {
            return match plain_file::read(&path, Some(&self.dir), self.limit(name)) {
                Ok(bytes) => Ok(Some((bytes, Checked::Whole))),
                Err(e) if e.is_missing() => Ok(None),
                Err(e) => Err(e.into()),
            };
        };
        let Some(sealed) = self.seal_of(name)? else {
            return Ok(None);
        };
        let bytes = match plain_file::read(&path, Some(&self.dir), sealed.bytes) {
            Ok(bytes) => bytes,
            Err(e) if e.is_missing() => {
                let what = format!("the recording was written with it ({} bytes)", sealed.bytes);
                return Err(missing(&path, &what));
            }
            Err(PlainFileError::TooLarge { size, .. }) => {
                return Err(RecordingError::Invalid {
                    path: path.display().to_string(),
                    message: format!(
                        "{size} bytes where the recording wrote {}: it was changed after recording",
                        sealed.bytes
                    ),
                })
            }
            Err(e) => return Err(e.into()),
        };
        let checked = seal::check(&path, &bytes, sealed, seal.piece)?;
        Ok(Some((bytes, checked)))
    }

    /// The file `name`, whole and as written, or `None` if the recording has none.
    pub(super) fn read_optional(&self, name: &str) -> Result<Option<Vec<u8>>, RecordingError> {
        match self.read_checked(name)? {
            None => Ok(None),
            Some((bytes, Checked::Whole)) => Ok(Some(bytes)),
            Some((bytes, Checked::Short { .. })) => Err(RecordingError::Invalid {
                path: self.path_of(name).display().to_string(),
                message: format!(
                    "{} bytes where the recording wrote {}: it was cut short",
                    bytes.len(),
                    self.manifest
                        .seal
                        .as_ref()
                        .and_then(|s| s.files.get(name))
                        .map_or(0, |f| f.bytes)
                ),
            }),
        }
    }

    /// The file `name`, which every recording has.
    pub(super) fn read_required(&self, name: &str) -> Result<Vec<u8>, RecordingError> {
        self.read_optional(name)?
            .ok_or_else(|| missing(&self.path_of(name), "every recording has it"))
    }

    /// An image copy's bytes, checked against its SHA-256.
    pub fn image_bytes(&self, image: &ImageRecord) -> Result<Vec<u8>, RecordingError> {
        let path = self.path_of(&image.file);
        let bytes = match plain_file::read(&path, Some(&self.dir), IMAGE_LIMIT) {
            Ok(bytes) => bytes,
            Err(e) if e.is_missing() => {
                let what = format!("the copy of {}, which the manifest lists", image.path);
                return Err(missing(&path, &what));
            }
            Err(e) => return Err(e.into()),
        };
        super::validate::image_bytes(&path, image, &bytes)?;
        Ok(bytes)
    }

    /// Checks every file against the seal (and every image against its SHA-256), each read
    /// as a stream, whoever reads it later: `rtit info`'s word on a whole recording. `None`
    /// for a recording without a seal.
    pub fn check_seal(&self) -> Result<Option<SealChecked>, RecordingError> {
        let Some(seal) = &self.manifest.seal else {
            return Ok(None);
        };
        let mut checked = SealChecked::default();
        for (name, sealed) in &seal.files {
            seal::check_file(&self.path_of(name), &self.dir, sealed, seal.piece)?;
            checked.files += 1;
            checked.bytes += sealed.bytes;
        }
        for image in &self.manifest.images {
            checked.bytes += self.image_bytes(image)?.len() as u64;
            checked.files += 1;
        }
        checked.foreign = self.foreign(seal);
        Ok(Some(checked))
    }

    /// What lies in the recording's directory that it was not written with (notes a user
    /// put there, a file copied into `images/`): nothing reads it, so it cannot change the
    /// history, but a word on the whole recording says it is there.
    fn foreign(&self, seal: &seal::Seal) -> Vec<String> {
        let listed = |dir: &Path| -> Vec<String> {
            let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
            let mut names: Vec<String> = entries.map(|e| e.file_name().to_string_lossy().into_owned()).collect();
            names.sort();
            names
        };
        let images: Vec<&str> = self.manifest.images.iter().map(|i| i.file.as_str()).collect();
        let mut foreign = Vec::new();
        for name in listed(&self.dir) {
            // The recordings of the programs an execve ran (`exec-1`, `exec-2`, …: the first
            // program's directory holds them all).
            let later_program = matches!(self.manifest.end, super::EndState::Exec { next: Some(_), .. })
                && name.strip_prefix("exec-").is_some_and(|n| n.parse::<u32>().is_ok());
            let ours = later_program
                || name == files::MANIFEST
                || name == files::IMAGES
                || seal.files.contains_key(&name)
                || name.starts_with(crate::timeline::cache::FILE);
            if !ours {
                foreign.push(name);
            }
        }
        for name in listed(&self.dir.join(files::IMAGES)) {
            let file = format!("{}/{name}", files::IMAGES);
            if !images.contains(&file.as_str()) {
                foreign.push(file);
            }
        }
        foreign
    }

    /// Every file the seal lists is there (what each holds is checked when it is read), so a
    /// recording that lost one is refused when opened, whatever is asked of it.
    pub(super) fn check_present(&self) -> Result<(), RecordingError> {
        let Some(seal) = &self.manifest.seal else {
            return Ok(());
        };
        for (name, sealed) in &seal.files {
            let path = self.path_of(name);
            if path.symlink_metadata().is_err() {
                let what = format!("the recording was written with it ({} bytes)", sealed.bytes);
                return Err(missing(&path, &what));
            }
        }
        Ok(())
    }
}

//! Reading a file that must be a plain file of bounded size: every file of a recording and
//! the timeline stored beside it. A FIFO put in a file's place would block a reader forever,
//! `/dev/zero` would be read until memory runs out, and a symbolic link could lead out of the
//! recording to any file of the machine; each is refused at once, with what was found.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a file was not read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PlainFileError {
    /// Opening or reading it failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why (the operating system's words).
        source: Arc<std::io::Error>,
    },
    /// It is there, but not a plain file.
    #[error("{path}: {kind}, not a plain file")]
    NotPlain {
        /// The file.
        path: String,
        /// What it is instead ("a named pipe (FIFO)", "a directory" ...).
        kind: &'static str,
    },
    /// A symbolic link that leads out of the directory it belongs to.
    #[error("{path}: a symbolic link to {target}, outside {within}")]
    Outside {
        /// The link.
        path: String,
        /// Where it leads.
        target: String,
        /// The directory it must stay in.
        within: String,
    },
    /// Larger than it can be.
    #[error("{path}: {size} bytes, more than the {limit} it can hold")]
    TooLarge {
        /// The file.
        path: String,
        /// Its size.
        size: u64,
        /// The most it may have.
        limit: u64,
    },
}

impl PlainFileError {
    /// Whether the file does not exist (as opposed to being unreadable or not plain).
    pub fn is_missing(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PlainFileError + '_ {
    move |source| PlainFileError::Io {
        path: path.display().to_string(),
        source: Arc::new(source),
    }
}

/// What a file that is not plain is, in words.
fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a named pipe (FIFO)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Opens `path`, which must be a plain file and, if `within` is given, lie inside that
/// directory once symbolic links are followed; returns it with its size. The file is opened
/// without blocking (`O_NONBLOCK`: a FIFO swapped in after a check still cannot block) and
/// checked on the open descriptor, so what is read is what was checked.
pub fn open(path: &Path, within: Option<&Path>) -> Result<(File, u64), PlainFileError> {
    let real = match within {
        Some(dir) => {
            let real = path.canonicalize().map_err(io(path))?;
            let dir = dir.canonicalize().map_err(io(dir))?;
            if !real.starts_with(&dir) {
                return Err(PlainFileError::Outside {
                    path: path.display().to_string(),
                    target: real.display().to_string(),
                    within: dir.display().to_string(),
                });
            }
            real
        }
        None => PathBuf::from(path),
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&real)
        .map_err(io(path))?;
    let meta = file.metadata().map_err(io(path))?;
    if !meta.file_type().is_file() {
        return Err(PlainFileError::NotPlain {
            path: path.display().to_string(),
            kind: kind(meta.file_type()),
        });
    }
    Ok((file, meta.len()))
}

/// Reads the whole of `path` (checked as [`open`] does), which may hold at most `limit`
/// bytes: a larger file is refused before anything is read, and a file that grows while it
/// is read is read only up to the limit and refused.
pub fn read(path: &Path, within: Option<&Path>, limit: u64) -> Result<Vec<u8>, PlainFileError> {
    let (file, size) = open(path, within)?;
    let too_large = |size| PlainFileError::TooLarge {
        path: path.display().to_string(),
        size,
        limit,
    };
    if size > limit {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io(path))?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rtit-plain-file-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    #[test]
    fn a_plain_file_inside_is_read_and_everything_else_refused_at_once() {
        let dir = scratch("kinds");
        std::fs::write(dir.join("trace"), b"abc").expect("write");
        assert_eq!(read(&dir.join("trace"), Some(&dir), 3).expect("plain"), b"abc");
        let e = read(&dir.join("trace"), Some(&dir), 2).expect_err("too large");
        assert!(matches!(e, PlainFileError::TooLarge { size: 3, limit: 2, .. }), "{e}");

        // A link inside the directory is followed; one out of it is refused.
        std::os::unix::fs::symlink("trace", dir.join("inside")).expect("symlink");
        assert_eq!(read(&dir.join("inside"), Some(&dir), 3).expect("inside"), b"abc");
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero")).expect("symlink");
        let e = read(&dir.join("zero"), Some(&dir), 1 << 20).expect_err("outside");
        assert!(e.to_string().contains("a symbolic link to /dev/zero, outside"), "{e}");
        // Without a directory to stay in, /dev/zero is refused for what it is.
        let e = read(Path::new("/dev/zero"), None, 1 << 20).expect_err("device");
        assert!(e.to_string().ends_with("a character device, not a plain file"), "{e}");

        std::fs::create_dir(dir.join("sub")).expect("mkdir");
        let e = read(&dir.join("sub"), Some(&dir), 10).expect_err("directory");
        assert!(e.to_string().ends_with("a directory, not a plain file"), "{e}");

        // A FIFO with no writer: opening it for reading would block without O_NONBLOCK.
        let fifo = dir.join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(status.success());
        let e = read(&fifo, Some(&dir), 10).expect_err("fifo");
        assert!(e.to_string().ends_with("a named pipe (FIFO), not a plain file"), "{e}");

        let e = read(&dir.join("absent"), Some(&dir), 10).expect_err("absent");
        assert!(e.is_missing(), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

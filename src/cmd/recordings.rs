//! Finding recordings: a directory given on the command line, or the latest one.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use rtit_replay_core::recording::RecordingError;
use rtit_replay_core::recording::{default_root, Recording};

/// The recording at `arg` (a directory, or the name of one under the default root as `rtit
/// ls` lists them), or the latest under the default root; a warning on stderr if it
/// carries no seal (made by an older rtit).
pub fn open(arg: Option<&Path>) -> Result<Recording> {
    let dir: PathBuf = match arg {
        // A name `rtit ls` lists, as rr takes one: a recording under the default root.
        Some(name) if !name.exists() && name.components().count() == 1 && default_root().join(name).is_dir() => {
            default_root().join(name)
        }
        Some(dir) => dir.to_path_buf(),
        None => {
            let latest = default_root().join("latest");
            if !latest.exists() {
                bail!(
                    "no recording given, and {} does not exist: record one with `rtit record -- PROGRAM`",
                    latest.display()
                );
            }
            latest
        }
    };
    // Its errors name the directory or the file, and what is wrong.
    let rec = Recording::open(&dir)?;
    if !rec.sealed() {
        eprintln!(
            "rtit: warning: {} was made by an rtit that did not seal its files: damage to them since cannot be told",
            dir.display()
        );
    }
    Ok(rec)
}

/// Whether `rec`'s trace (`trace_len` bytes, `decoded` instructions) holds everything the
/// recorder wrote down. If not: an error, or with `partial` a warning on stderr, so what is
/// there can be used knowingly.
pub fn complete_or_partial(rec: &Recording, trace_len: usize, decoded: u64, spun: bool, partial: bool) -> Result<()> {
    match rec.check_complete(trace_len, decoded, spun) {
        Ok(()) => Ok(()),
        Err(e @ RecordingError::Incomplete { .. }) if partial => {
            eprintln!("rtit: warning: {e}");
            Ok(())
        }
        Err(e) => Err(refusal(e)),
    }
}

/// An error reading a recording, for the user: an incomplete one says how to use it anyway.
pub fn refusal(e: RecordingError) -> anyhow::Error {
    match e {
        RecordingError::Incomplete { .. } => anyhow::anyhow!("{e} (use --partial to use what is there)"),
        e => e.into(),
    }
}

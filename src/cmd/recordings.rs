//! Finding recordings: a directory given on the command line, or the latest one.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rtit_replay_core::recording::RecordingError;
use rtit_replay_core::recording::{default_root, EndState, Recording};

/// The recording at `arg` (a directory, or the name of one under the default root as `rtit
/// ls` lists them), or the latest under the default root; a warning on stderr if it
/// carries no seal (made by an older rtit).
pub fn open(arg: Option<&Path>) -> Result<Recording> {
    let dir: PathBuf = match arg {
        // A name `rtit ls` lists, as rr takes one: a recording under the default root (or
        // one inside it, of a program its execve ran: `NAME/exec-1`).
        Some(name) if !name.exists() && name.is_relative() && default_root().join(name).is_dir() => {
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

/// More programs than this in one run's chain of execve calls is taken for a loop.
const MOST_PROGRAMS: usize = 100_000;

/// The recording of the last program `rec`'s run became through execve (`rec` itself if it
/// ran none), said on stderr when it is another: a wrapper's recording is mostly of the
/// program it runs. Each program's recording lies in its own directory, served by naming it.
pub fn last_program(rec: Recording) -> Result<Recording> {
    let first = rec.dir.clone();
    let mut rec = rec;
    let mut chain = Vec::new();
    while let EndState::Exec {
        program,
        next: Some(next),
    } = &rec.manifest.end
    {
        let dir = lexical(&rec.dir.join(next));
        // Only a hand-edited manifest can make the chain go round.
        if chain.len() > MOST_PROGRAMS {
            bail!(
                "{}: more than {MOST_PROGRAMS} programs follow each other through execve",
                first.display()
            );
        }
        chain.push(program.clone());
        rec = Recording::open(&dir).with_context(|| {
            format!(
                "{}: the recording of {program}, which its execve ran",
                rec.dir.display()
            )
        })?;
    }
    let ran = match chain.as_slice() {
        [] => return Ok(rec),
        [one] => format!("ran execve of {one}"),
        [.., last] => format!("ran execve {} times, the last of {last}", chain.len()),
    };
    eprintln!(
        "rtit: the program {ran}; replaying that program's recording, {} (`--no-follow` replays {} itself)",
        rec.dir.display(),
        first.display()
    );
    Ok(rec)
}

/// `path` with its `..` parts taken off lexically (`r/exec-1/../exec-2` is `r/exec-2`).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
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

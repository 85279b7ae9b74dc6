//! Finding recordings: a directory given on the command line, or the latest one.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rtit_replay_core::recording::{default_root, EndState, Recording};

/// The recording at `arg`, or the latest under the default root.
pub fn open(arg: Option<&Path>) -> Result<Recording> {
    let dir: PathBuf = match arg {
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
    Recording::open(&dir).with_context(|| format!("cannot open the recording {}", dir.display()))
}

/// One line about how a run ended.
pub fn describe_end(end: &EndState) -> String {
    match end {
        EndState::Exited { code } => format!("exited with status {code}"),
        EndState::Signaled { name, address, ip, .. } => {
            let mut s = format!("killed by {name}");
            if let Some(ip) = ip {
                s += &format!(" at {ip}");
            }
            if let Some(a) = address {
                s += &format!(" (address {a})");
            }
            s
        }
        EndState::Interrupted => "interrupted (rtit record received SIGINT)".to_string(),
        EndState::Unsupported { reason } => format!("stopped: {reason}"),
    }
}

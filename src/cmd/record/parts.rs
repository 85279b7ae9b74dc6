//! A run that calls execve is recorded as one recording per program (issue 43): the first
//! program's where `rtit record` was asked to write, each next one's inside it
//! (`exec-1`, `exec-2`, …), named by the end of the one before. `rtit replay` serves the
//! last (the program a wrapper runs), and any of them by its directory.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use rtit_recorder::outcome::Outcome;
use rtit_recorder::writer::Meta;
use rtit_recorder::{qemu, step};
use rtit_replay_core::recording::EndState;

/// A program that execve started, not recorded yet.
pub enum Next {
    /// Under ptrace, stopped at its first instruction.
    Step(step::Next),
    /// Under QEMU started again, waiting for rtit at its first instruction.
    Qemu(qemu::launch::Next),
}

impl Next {
    /// Its command line.
    fn argv(&self) -> Vec<OsString> {
        match self {
            Self::Step(n) => n.argv.clone(),
            Self::Qemu(n) => n.argv.clone(),
        }
    }

    /// Records it.
    fn record(self) -> anyhow::Result<(Outcome, Option<Next>)> {
        match self {
            Self::Step(n) => {
                let part = n.record()?;
                Ok((part.outcome, part.next.map(Self::Step)))
            }
            Self::Qemu(n) => {
                let part = n.record()?;
                Ok((part.outcome, part.next.map(Self::Qemu)))
            }
        }
    }
}

/// The recordings of the programs from `first` on, each with its metadata (`meta` is the
/// first's; the next ones are named by their command lines). A program that cannot be
/// recorded ends the list, with an error said on stderr: the ones before are kept.
pub fn record_all(first: Outcome, mut next: Option<Next>, meta: Meta) -> Vec<(Outcome, Meta)> {
    let mut parts = vec![(first, meta)];
    while let Some(n) = next.take() {
        let command: Vec<String> = n.argv().iter().map(|a| a.to_string_lossy().into_owned()).collect();
        match n.record() {
            Ok((outcome, after)) => {
                let meta = Meta {
                    command,
                    ..parts[0].1.clone()
                };
                parts.push((outcome, meta));
                next = after;
            }
            Err(e) => {
                eprintln!("rtit: error: cannot record {}: {e:#}", command.join(" "));
                break;
            }
        }
    }
    // Each execve's end names the recording of the program it ran, where there is one.
    let count = parts.len();
    for (k, (outcome, _)) in parts.iter_mut().enumerate() {
        if let EndState::Exec { next, .. } = &mut outcome.end {
            *next = (k + 1 < count).then(|| relative(k, k + 1));
        }
    }
    parts
}

/// Where the `k`th program's recording goes, the first's at `out`.
pub fn dir(out: &Path, k: usize) -> PathBuf {
    match k {
        0 => out.to_path_buf(),
        k => out.join(format!("exec-{k}")),
    }
}

/// The `to`th program's directory as seen from the `from`th's.
fn relative(from: usize, to: usize) -> String {
    match from {
        0 => format!("exec-{to}"),
        _ => format!("../exec-{to}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_part_names_the_next_from_its_own_directory() {
        let out = Path::new("/r/sh-1");
        for (from, to) in [(0, 1), (1, 2), (2, 3)] {
            let there = dir(out, from).join(relative(from, to));
            let expected = dir(out, to);
            let normal: PathBuf = there.components().fold(PathBuf::new(), |mut p, c| {
                match c {
                    std::path::Component::ParentDir => {
                        p.pop();
                    }
                    c => p.push(c),
                }
                p
            });
            assert_eq!(normal, expected, "from {from} to {to}");
        }
    }
}

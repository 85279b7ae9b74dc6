//! `rtit ls`: the recordings under the default directory.

use anyhow::{Context, Result};
use clap::Args;
use rtit_replay_core::recording::{default_root, Recording};

/// Arguments of `rtit ls`.
#[derive(Debug, Args)]
pub struct LsArgs {}

/// Runs `rtit ls`.
pub fn run(_args: &LsArgs) -> Result<()> {
    let root = default_root();
    if !root.exists() {
        println!("no recordings in {}", root.display());
        return Ok(());
    }
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .with_context(|| format!("cannot list {}", root.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n != "latest") && Recording::is_recording(p))
        .collect();
    dirs.sort();
    for dir in dirs {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match Recording::open(&dir) {
            Ok(rec) => println!(
                "{name:<24} {:>12} insns  {:<40} {}",
                rec.manifest.instructions,
                rec.manifest.command.join(" "),
                rec.manifest.end
            ),
            Err(e) => println!("{name:<24} unreadable: {e}"),
        }
    }
    Ok(())
}

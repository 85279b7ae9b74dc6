//! `rtit ls`: the recordings under the default directory.

use anyhow::{Context, Result};
use clap::Args;
use std::path::Path;

use rtit_replay_core::recording::{default_root, EndState, Recording};

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
            Ok(rec) => {
                line(&name, &rec);
                // The programs its execve calls ran, each a recording inside it; `rtit
                // replay` serves the last.
                let mut rec = rec;
                while let EndState::Exec { next: Some(next), .. } = &rec.manifest.end {
                    let Some(part) = Path::new(next).file_name().map(|n| dir.join(n)) else {
                        break;
                    };
                    let label = format!("  {name}/{}", part.file_name().unwrap_or_default().to_string_lossy());
                    match Recording::open(&part) {
                        Ok(r) => {
                            line(&label, &r);
                            rec = r;
                        }
                        Err(e) => {
                            println!("{label:<24} unreadable: {e}");
                            break;
                        }
                    }
                }
            }
            Err(e) => println!("{name:<24} unreadable: {e}"),
        }
    }
    Ok(())
}

/// One recording's line: its name, instructions, command line and end.
fn line(name: &str, rec: &Recording) {
    println!(
        "{name:<24} {:>12} insns  {:<40} {}",
        rec.manifest.instructions,
        rec.manifest.command.join(" "),
        rec.manifest.end
    );
}

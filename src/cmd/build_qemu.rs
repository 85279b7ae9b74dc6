//! `rtit build-qemu`: builds a `qemu-x86_64` that can load plugins, for the qemu backend, where
//! the distribution's cannot (Debian 13's is static with plugins disabled) or is older than
//! wanted. Runs the script the binary carries (`scripts/build-qemu.sh`, the same a checkout
//! has): Debian's source package of QEMU, built into the directory `rtit record` looks in.

use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;

/// The build script, carried by the binary so an installed `rtit` has it.
const SCRIPT: &str = include_str!("../../scripts/build-qemu.sh");

/// Arguments of `rtit build-qemu`.
#[derive(Debug, Args)]
pub struct BuildQemuArgs {
    /// The Debian suite whose QEMU source package is built (trixie: QEMU 10.0).
    #[arg(long, default_value = "trixie")]
    suite: String,
}

/// Builds QEMU (or finds it built already) and prints its path.
pub fn run(args: &BuildQemuArgs) -> Result<()> {
    let dir = rtit_recorder::qemu::find::built_dir();
    let status = Command::new("bash")
        .arg("-c")
        .arg(SCRIPT)
        .arg("build-qemu")
        .env("RTIT_QEMU_SUITE", &args.suite)
        .env("RTIT_QEMU_DIR", &dir)
        .status()
        .context("cannot run bash")?;
    if !status.success() {
        bail!("building QEMU failed ({status}); what it printed above says where");
    }
    Ok(())
}

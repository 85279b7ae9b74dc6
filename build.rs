//! Puts the QEMU plugin inside release builds of `rtit`, so that an installed `rtit`
//! (`cargo install --path .`, which installs binaries only) still has its default backend:
//! at run time it writes the library out once to its cache directory when none is found next
//! to it (src/plugin.rs). The plugin is a `cdylib` of another package of this workspace, which
//! cargo cannot hand to a build script, so it is built here by a nested `cargo build` into a
//! target directory of its own under OUT_DIR.
//!
//! Debug builds (`cargo build`, `cargo test`) leave it out, as the workspace build puts the
//! plugin next to `rtit` anyway; `RTIT_EMBED_PLUGIN=1` or `=0` forces either way.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=RTIT_EMBED_PLUGIN");
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dest = out.join("librtit_qemu_plugin.so");
    let release = env::var("PROFILE").is_ok_and(|p| p == "release");
    let embed = match env::var("RTIT_EMBED_PLUGIN") {
        Ok(v) => v == "1",
        Err(_) => release,
    };
    if !embed {
        std::fs::write(&dest, []).expect("write an empty plugin placeholder");
        return;
    }
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    for dir in ["recorder/src", "recorder/qemu-plugin", "replay-core/src", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={dir}");
    }
    let target = out.join("plugin-target");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "rtit-qemu-plugin",
            "--manifest-path",
        ])
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        // The outer build's settings for this package are not the plugin's.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        // What ships inside rtit needs no debug information.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .env("CARGO_PROFILE_RELEASE_STRIP", "true")
        .status()
        .expect("run cargo to build the QEMU plugin");
    assert!(status.success(), "building the QEMU plugin (rtit-qemu-plugin) failed");
    let built = target.join("release/librtit_qemu_plugin.so");
    std::fs::copy(&built, &dest).unwrap_or_else(|e| panic!("{}: {e}", built.display()));
}

//! The README's install command, `cargo install --locked --path .`, gives an `rtit` whose default
//! backend works: installed into a temporary root with no plugin library next to it, it
//! records with the qemu backend from the plugin its release build carries.

use std::path::Path;
use std::process::Command;

#[test]
fn the_installed_rtit_records_with_the_qemu_backend() {
    assert!(
        Command::new("qemu-x86_64").arg("--version").output().is_ok(),
        "qemu-x86_64 is needed (package qemu-user; .ci/run installs it)"
    );
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("install");
    let root = scratch.join("root");
    let _ = std::fs::remove_dir_all(&root);
    // Its own target directory, kept between runs so a second run is quick.
    let status = Command::new(env!("CARGO"))
        .args([
            "install",
            "--quiet",
            "--locked",
            "--offline",
            "--path",
            env!("CARGO_MANIFEST_DIR"),
            "--root",
        ])
        .arg(&root)
        .arg("--target-dir")
        .arg(scratch.join("target"))
        .status()
        .expect("cargo install");
    assert!(status.success(), "cargo install --path . failed");
    let rtit = root.join("bin/rtit");
    assert!(
        !root.join("bin/librtit_qemu_plugin.so").exists(),
        "cargo install puts binaries only: the plugin must come from rtit itself"
    );
    let cache = scratch.join("cache");
    let _ = std::fs::remove_dir_all(&cache);
    let out = scratch.join("rec");
    let _ = std::fs::remove_dir_all(&out);
    let record = Command::new(&rtit)
        .args(["record", "--out"])
        .arg(&out)
        .args(["--", "/bin/true"])
        .env("XDG_CACHE_HOME", &cache)
        .env_remove("RTIT_QEMU_PLUGIN")
        .output()
        .expect("the installed rtit runs");
    let stderr = String::from_utf8_lossy(&record.stderr);
    assert!(record.status.success(), "{stderr}");
    assert!(stderr.contains("recording with the qemu backend"), "{stderr}");
    let info = Command::new(&rtit)
        .args(["info", "--decode"])
        .arg(&out)
        .output()
        .expect("info");
    let text = String::from_utf8_lossy(&info.stdout);
    assert!(
        text.contains("backend       qemu") && text.contains(" 0 errors"),
        "{text}"
    );
    let written: Vec<_> = std::fs::read_dir(cache.join("rtit"))
        .expect("the plugin was written out")
        .collect();
    assert_eq!(written.len(), 1, "one plugin, named by its hash");
}

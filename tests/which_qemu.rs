//! Which `qemu-x86_64` `rtit record` takes, and what it says when the only one cannot load
//! plugins, as on Debian 13 (its `qemu-user` is static with plugins disabled). The stand-in
//! is a static program that answers `-plugin` as such a QEMU does; rtit must tell it apart
//! without running it, say so in one line with the fix, and fall back to the step backend
//! only where the backend was left to it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A static `qemu-x86_64` without plugins, alone in a directory of its own.
fn static_qemu(dir: &Path) -> PathBuf {
    let src = dir.join("qemu.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(void) { fputs(\"qemu: unknown option 'plugin'\\n\", stderr); return 1; }\n",
    )
    .expect("source");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let exe = bin.join("qemu-x86_64");
    let status = Command::new("gcc")
        .args(["-static", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(status.success(), "gcc -static");
    exe
}

/// `rtit record` with only `bin` on PATH and an empty home (no QEMU built by rtit).
fn record(dir: &Path, bin: &Path, flags: &[&str], out: &str) -> (Output, String) {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .arg("record")
        .args(flags)
        .arg("--out")
        .arg(dir.join(out))
        .args(["--", "/bin/true"])
        .env("PATH", bin)
        .env("HOME", &home)
        .env_remove("XDG_CACHE_HOME")
        .env_remove("RTIT_QEMU")
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .output()
        .expect("rtit record");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stderr)
}

#[test]
fn a_qemu_that_cannot_load_plugins_is_named_with_the_fix() {
    let dir = common::scratch("which_qemu", "static");
    let qemu = static_qemu(&dir);
    let bin = qemu.parent().expect("bin");
    let named = format!("{} cannot load plugins", qemu.display());

    // Left to rtit: the step backend, and why, in the line that names the backend.
    let (out, stderr) = record(&dir, bin, &[], "auto");
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(&named)).collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(
        lines[0].starts_with("rtit: recording with the step backend"),
        "{stderr}"
    );
    assert!(lines[0].contains("rtit build-qemu"), "the fix: {stderr}");

    // Asked for: refused, before any line about recording.
    let (out, stderr) = record(&dir, bin, &["--backend", "qemu"], "qemu");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("recording with"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("rtit: error: ") && stderr.contains(&named),
        "{stderr}"
    );

    // Named: refused the same way, whether by option or by environment.
    let (out, stderr) = record(&dir, bin, &["--qemu", qemu.to_str().expect("utf-8")], "named");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&named), "{stderr}");
    let missing = dir.join("no-such-qemu");
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--out"])
        .arg(dir.join("env"))
        .args(["--", "/bin/true"])
        .env("RTIT_QEMU", &missing)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .output()
        .expect("rtit record");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a misspelt $RTIT_QEMU is no reason to step: {stderr}"
    );
    assert!(
        stderr.contains(&format!("{}: no such qemu-x86_64", missing.display())),
        "{stderr}"
    );
}

#[test]
fn a_qemu_that_loads_plugins_is_taken_and_said_with_verbose() {
    let Some(qemu) = ["/usr/bin/qemu-x86_64"]
        .map(PathBuf::from)
        .into_iter()
        .find(|p| p.is_file())
    else {
        eprintln!("skipped: no /usr/bin/qemu-x86_64");
        return;
    };
    let dir = common::scratch("which_qemu", "found");
    // A static one first on PATH is passed over for one that loads plugins.
    let fake = static_qemu(&dir);
    let path = std::env::join_paths([fake.parent().expect("bin"), qemu.parent().expect("dir")]).expect("PATH");
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "-v", "--out"])
        .arg(dir.join("rec"))
        .args(["--", "/bin/true"])
        .env("PATH", path)
        .env("XDG_CACHE_HOME", dir.join("no-cache"))
        .env_remove("RTIT_QEMU")
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .output()
        .expect("rtit record");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} loads plugins ({} on PATH cannot)",
            rtit_recorder::qemu::find::described(&qemu),
            fake.display()
        )),
        "{stderr}"
    );
}

/// `rtit record -v` with PATH's QEMU and one "built" by rtit as `version` (a link to PATH's,
/// in a cache of its own): what it says it records with.
fn record_beside_built(qemu: &Path, version: &str) -> (PathBuf, String) {
    let dir = common::scratch("which_qemu", &format!("built-{version}"));
    let built = dir.join("cache/rtit/qemu").join(version).join("qemu-x86_64");
    std::fs::create_dir_all(built.parent().expect("dir")).expect("cache");
    std::os::unix::fs::symlink(qemu, &built).expect("link");
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "-v", "--out"])
        .arg(dir.join("rec"))
        .args(["--", "/bin/true"])
        .env("PATH", qemu.parent().expect("dir"))
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env_remove("RTIT_QEMU")
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .output()
        .expect("rtit record");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (built, stderr)
}

#[test]
fn a_qemu_rtit_built_is_taken_where_it_is_newer_than_paths() {
    let qemu = PathBuf::from("/usr/bin/qemu-x86_64");
    let Some(on_path) = rtit_recorder::qemu::find::version(&qemu) else {
        eprintln!("skipped: no /usr/bin/qemu-x86_64 that says its version");
        return;
    };
    // Newer: taken, and said so, with what each says its version is. (A link to PATH's
    // QEMU: the version that decides is the directory's.)
    let newer = format!("{}.0.0", on_path[0] + 1);
    let (built, stderr) = record_beside_built(&qemu, &newer);
    let described = rtit_recorder::qemu::find::described;
    let said = format!(
        "{} loads plugins and is newer than {} on PATH",
        described(&built),
        described(&qemu)
    );
    assert!(described(&qemu).ends_with(")"), "{}", described(&qemu));
    assert!(stderr.contains(&said), "{stderr}");
    // As old or older: PATH's stays.
    let older = match on_path[0] {
        0 => "0.0.0".to_string(),
        major => format!("{}.0.0", major - 1),
    };
    for version in [older, on_path.iter().map(u64::to_string).collect::<Vec<_>>().join(".")] {
        let (built, stderr) = record_beside_built(&qemu, &version);
        assert!(
            stderr.contains(&format!("{} loads plugins", described(&qemu))),
            "{version}: {stderr}"
        );
        assert!(!stderr.contains(&built.display().to_string()), "{version}: {stderr}");
    }
}

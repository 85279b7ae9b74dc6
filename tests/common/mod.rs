//! What several end-to-end test files share: scratch directories, compiling a C program,
//! recording it from `main` with the step backend, the plugin library, the executable copy of
//! a recording. Each test file uses part of it.
#![allow(dead_code)]

pub mod gdb;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use rtit_replay_core::recording::Recording;

/// `rtit insns --json` of `rec` equals the instructions the recorder logged (`--truth`),
/// with no error or gap event, and the run has over `min` instructions.
pub fn assert_decode_is_truth(rec: &Recording, what: &str, min: usize) {
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["insns", "--json"])
        .arg(&rec.dir)
        .output()
        .expect("rtit insns");
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    let mut ips = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
        assert!(v["event"] != "error" && v["event"] != "gap", "{what}: {v}");
        if let Some(ip) = v["ip"].as_str().filter(|_| v.get("i").is_some()) {
            ips.push(u64::from_str_radix(ip.trim_start_matches("0x"), 16).expect("hex"));
        }
    }
    let truth = rec.truth().expect("readable").expect("--truth was given");
    assert!(truth.len() > min, "{what}: a real run ({} instructions)", truth.len());
    let at = ips.iter().zip(&truth).position(|(a, b)| a != b);
    assert!(
        ips.len() == truth.len() && at.is_none(),
        "{what}: {} decoded vs {} true; first difference at {at:?}",
        ips.len(),
        truth.len()
    );
}

/// What `rtit record` (`result`, into `out`) shows where the recording stopped before
/// something it cannot follow and the program ran on unrecorded (issue 43): rtit left with
/// the program's status `code`, the program's output is `stdout` whole, and the recording
/// ends unsupported, for a `reason` naming `what`, then the program's exit; the recording.
pub fn assert_ran_on(result: &std::process::Output, out: &Path, code: i32, stdout: &str, what: &str) -> Recording {
    use rtit_replay_core::recording::EndState;
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(code), "the program's own status\n{stderr}");
    assert_eq!(String::from_utf8_lossy(&result.stdout), stdout, "{stderr}");
    assert!(stderr.contains(what), "{stderr}");
    let rec = Recording::open(out).expect("a valid recording");
    assert!(
        matches!(&rec.manifest.end, EndState::Unsupported { reason, afterwards: Some(a) }
            if reason.contains(what) && **a == EndState::Exited { code }),
        "{:?}",
        rec.manifest.end
    );
    rec
}

/// A fresh directory `SUITE/NAME` under cargo's temporary directory for tests.
pub fn scratch(suite: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(suite).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Removes its directory when dropped, unless the thread is panicking (a failed test keeps
/// its files to look at). Held by the tests whose recordings are large: a full run's
/// recordings would otherwise hold gigabytes at once, more than CI's disk.
pub struct RemovedOnSuccess(pub PathBuf);

impl Drop for RemovedOnSuccess {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Compiles `src` (a path under the repository) with gcc `-O1 -g` and `flags` into `dir`.
pub fn gcc(src: &str, flags: &[&str], dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
    let exe = dir.join(src.file_stem().expect("a file name"));
    let status = Command::new("gcc")
        .args(["-O1", "-g"])
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc is needed (`.ci/run` installs it)");
    assert!(status.success(), "gcc failed on {}", src.display());
    exe
}

/// Records `exe` from `main` with the step backend and the truth into `out`.
pub fn record_from_main(exe: &Path, out: &Path) -> Recording {
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "step", "--truth", "--start", "main", "--out"])
        .arg(out)
        .arg("--")
        .arg(exe)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.code().is_some(), "rtit record ran");
    Recording::open(out).expect("a recording")
}

/// The recording's copy of the executable (its first image that is a file).
pub fn executable(rec: &Recording) -> PathBuf {
    let image = rec
        .manifest
        .images
        .iter()
        .find(|i| !i.path.starts_with('['))
        .expect("an ELF image");
    rec.dir.join(&image.file)
}

/// The QEMU plugin library, built once for the test run (cargo builds no cdylib for tests).
pub fn plugin() -> &'static Path {
    static PLUGIN: OnceLock<PathBuf> = OnceLock::new();
    PLUGIN.get_or_init(|| {
        assert!(
            Command::new("qemu-x86_64").arg("--version").output().is_ok(),
            "qemu-x86_64 is needed (apt-get install qemu-user; `.ci/run` installs it)"
        );
        // In the profile the tests were built in, where rtit looks for it: a `--release` run
        // otherwise used a release plugin built before, whatever the sources said since.
        let release: &[&str] = if cfg!(debug_assertions) { &[] } else { &["--release"] };
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "rtit-qemu-plugin"])
            .args(release)
            .status()
            .expect("cargo");
        assert!(status.success(), "building the plugin");
        let lib = Path::new(env!("CARGO_BIN_EXE_rtit"))
            .parent()
            .expect("target dir")
            .join("librtit_qemu_plugin.so");
        assert!(lib.is_file(), "{} was built", lib.display());
        lib
    })
}

/// Whether this kernel lets the plugin track written pages (asynchronous userfaultfd
/// write-protection, Linux 6.7): anchors are taken only then.
pub fn kernel_tracks_written_pages() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release.trim().split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (6, 7)
}

/// Whether a test of anchors must skip on this kernel (it says so, with why): true before
/// Linux 6.7, where the plugin cannot track written pages and takes no anchors.
pub fn skip_without_anchors() -> bool {
    if kernel_tracks_written_pages() {
        return false;
    }
    eprintln!("skipped: this kernel has no asynchronous userfaultfd write-protection (Linux 6.7)");
    true
}

/// A `qemu-x86_64` older than 9.0 on PATH (Debian 12's 7.2), whose plugins read no
/// registers, for the tests of what the qemu backend does there: `rtit record` takes a newer
/// one `rtit build-qemu` built, so they name it with `--qemu`. `None` (a skip, said) where
/// there is none.
pub fn qemu_before_9() -> Option<String> {
    let on_path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&on_path)
        .map(|d| d.join("qemu-x86_64"))
        .filter(|p| rtit_recorder::qemu::find::loads_plugins(p))
        .find(|p| rtit_recorder::qemu::find::version(p).is_some_and(|v| v < vec![9]));
    if found.is_none() {
        eprintln!("skipped: no qemu-x86_64 older than 9.0 that loads plugins on PATH");
    }
    found.map(|p| p.display().to_string())
}

/// `rtit record` of python3 running `script`, with `options`; it dies of SIGSEGV.
pub fn record_python3_crash(out: &Path, script: &str, options: &[&str]) -> Recording {
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--out"])
        .arg(out)
        .args(options)
        .env("RTIT_QEMU_PLUGIN", plugin())
        .args(["--", "/usr/bin/python3", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(!status.success(), "python3 dies of SIGSEGV");
    Recording::open(out).expect("a recording")
}

/// Records Debian's `sort` of 4,000 lines into `dir/rec` with the qemu backend and an anchor
/// every 300,000 instructions; the recording's directory.
pub fn record_sort_with_anchors(dir: &Path) -> PathBuf {
    let input = dir.join("input");
    let text: String = (0..4_000u64)
        .map(|i| format!("{:x} line\n", i * 2654435761 % 1_000_003))
        .collect();
    std::fs::write(&input, text).expect("input");
    let out = dir.join("rec");
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--anchor-every", "300000", "--out"])
        .arg(&out)
        .args(["--", "/usr/bin/sort", "-o", "/dev/null"])
        .arg(&input)
        .env("RTIT_QEMU_PLUGIN", plugin())
        .output()
        .expect("rtit record");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    out
}

/// The newest QEMU `rtit build-qemu` built (or `RTIT_TEST_QEMU`), or `None` (a skip, said)
/// where none was built; CI builds one and sets `RTIT_REQUIRE_NEWER_QEMU`, which turns the
/// skip into a failure.
pub fn newer_qemu() -> Option<PathBuf> {
    if let Some(named) = std::env::var_os("RTIT_TEST_QEMU") {
        return Some(PathBuf::from(named));
    }
    let found = rtit_recorder::qemu::find::built().into_iter().next();
    if found.is_none() {
        assert!(
            std::env::var_os("RTIT_REQUIRE_NEWER_QEMU").is_none(),
            "no QEMU built by `rtit build-qemu` (scripts/build-qemu.sh), and this run requires one"
        );
        eprintln!("skipped: no QEMU built by `rtit build-qemu`");
    }
    found
}

/// `rtit check-values`: no value wrong, and at least `known` % of the GPR samples known.
pub fn check_values(rec: &Recording, known: f64, what: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .arg("check-values")
        .arg(&rec.dir)
        .output()
        .expect("rtit check-values");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what}: {text}");
    let gprs = text
        .lines()
        .find(|l| l.starts_with("all GPRs"))
        .unwrap_or_else(|| panic!("{what}: {text}"));
    let cols: Vec<&str> = gprs.split_whitespace().collect();
    let (right, wrong, unknown): (u64, u64, u64) = (
        cols[2].parse().expect("right"),
        cols[3].parse().expect("wrong"),
        cols[4].parse().expect("unknown"),
    );
    assert_eq!(wrong, 0, "{what}: {text}");
    assert!(right > 0, "{what}: {text}");
    let share = 100.0 * right as f64 / (right + unknown) as f64;
    assert!(share >= known, "{what}: {share:.1}% of GPRs known\n{text}");
}

/// `rtit info --decode`: every recorded instruction decoded, with no error or gap (for runs
/// too long to compare with the truth instruction by instruction).
pub fn assert_decodes_completely(rec: &Recording) {
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["info", "--decode"])
        .arg(&rec.dir)
        .output()
        .expect("rtit info");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("decoded")).expect("a decode line");
    let expected = format!(
        "decoded       {} instructions, 0 errors, 0 gaps",
        rec.manifest.instructions
    );
    assert!(line.starts_with(&expected), "{line}\nexpected {expected}");
}

/// A fixed shuffle of 300,000 numbers, one a line, in `dir`/numbers: enough for GNU sort to
/// sort on two threads.
pub fn shuffled_numbers(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("dir");
    let mut x = 12345u64;
    let lines: String = (1..=300_000u64)
        .map(|i| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            format!("{}\n", (i * 7919 + (x >> 40)) % 1_000_003)
        })
        .collect();
    let input = dir.join("numbers");
    std::fs::write(&input, lines).expect("input");
    input
}

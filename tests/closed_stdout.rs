//! A listing whose reader goes away (`rtit insns | head -1`) ends quietly, as `ls` or `grep`
//! do: killed by SIGPIPE (status 141 in a shell) or done, never a panic.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

#[test]
fn every_listing_ends_quietly_when_its_reader_goes_away() {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corrupt/base");
    let rec = base.to_str().expect("utf-8");
    let trace = base.join("trace.rtit");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corrupt");
    let commands: [&[&str]; 5] = [
        &["info", "--decode", rec],
        &["insns", rec],
        &["calls", rec],
        &["dump", trace.to_str().expect("utf-8")],
        &["ls"],
    ];
    for args in commands {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rtit"))
            .args(args)
            .env("RTIT_DIR", &root)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rtit");
        // The reader is gone before the first line is written.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("rtit ends");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "rtit {}: {stderr}", args.join(" "));
        assert!(
            out.status.signal() == Some(13) || out.status.code() == Some(0),
            "rtit {}: {:?} {stderr}",
            args.join(" "),
            out.status
        );
    }
}

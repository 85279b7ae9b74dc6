//! The corpus of damaged recordings (`tests/corrupt/`): one small recording as rtit wrote it
//! (`base/`, the step backend on tests/programs/guarded_spin.S) and, in `cases.json`, the
//! ways recordings come to harm: cut short by a full disk, bits flipped, files edited, copied
//! or missing. Every command that reads a recording (`info --decode`, `insns`, `calls`,
//! `replay`) must end each case with a one-line error naming the file and what is wrong, under
//! a memory limit (`ulimit -v`) and a time limit: never a panic, an abort, a hang or a silently
//! shorter history.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// Address space allowed to each command (`ulimit -v`, KiB).
const MEMORY_KIB: u64 = 1 << 20;
/// Seconds allowed to each command.
const SECONDS: u64 = 30;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corrupt")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Sets the value at a JSON pointer, creating the last key if it is missing.
fn set(doc: &mut Value, pointer: &str, value: Value) {
    if let Some(slot) = doc.pointer_mut(pointer) {
        *slot = value;
        return;
    }
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    let parent = doc
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .expect("parent object");
    parent.insert(key.to_string(), value);
}

/// Applies a case's damage to the recording in `dir`.
fn damage(dir: &Path, case: &Value) {
    let file = dir.join(case["file"].as_str().expect("file"));
    if case["delete"] == true {
        std::fs::remove_file(&file).expect("delete");
    }
    if let Some(n) = case["truncate"].as_u64() {
        let f = std::fs::OpenOptions::new().write(true).open(&file).expect("open");
        f.set_len(n).expect("truncate");
    }
    if let Some(flips) = case["xor"].as_array() {
        let mut bytes = std::fs::read(&file).expect("read");
        for flip in flips {
            let (at, mask) = (flip[0].as_u64().expect("offset"), flip[1].as_u64().expect("mask"));
            bytes[at as usize] ^= mask as u8;
        }
        std::fs::write(&file, bytes).expect("write");
    }
    if let Some(change) = case["set"].as_array() {
        let mut doc: Value = serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("json");
        set(&mut doc, change[0].as_str().expect("pointer"), change[1].clone());
        std::fs::write(&file, serde_json::to_vec_pretty(&doc).expect("json")).expect("write");
    }
}

/// `rtit ARGS` under the limits; (exit code or -signal, stderr).
fn limited(args: &[&str]) -> (i32, String) {
    let line = format!(
        "ulimit -v {MEMORY_KIB}; exec timeout -s KILL {SECONDS} {} {}",
        env!("CARGO_BIN_EXE_rtit"),
        args.join(" ")
    );
    let out = Command::new("bash")
        .args(["-c", &line])
        .stdin(Stdio::null())
        .output()
        .expect("bash");
    let code = out.status.code().unwrap_or(-1);
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Starts `rtit replay --no-gdb` on `dir`, runs gdb against it, returns gdb's output.
fn replay_and_step(dir: &Path) -> String {
    use std::io::{BufRead, BufReader};
    let mut server = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["replay", "--no-gdb", "--port", "0"])
        .arg(dir)
        .stderr(Stdio::piped())
        .spawn()
        .expect("rtit replay");
    let mut lines = BufReader::new(server.stderr.take().expect("stderr")).lines();
    let port = lines
        .find_map(|l| {
            l.ok()?
                .strip_prefix("listening on ")?
                .rsplit(':')
                .next()?
                .parse::<u16>()
                .ok()
        })
        .expect("the server listens");
    std::thread::spawn(move || for _ in lines {});
    let out = Command::new("gdb")
        .args(["-batch", "-nx", "-ex"])
        .arg(format!("target remote :{port}"))
        .args(["-ex", "stepi 6", "-ex", "reverse-stepi 6", "-ex", "p/x $pc"])
        .output()
        .expect("gdb");
    let _ = server.kill();
    let _ = server.wait();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn every_damaged_recording_ends_in_one_clear_error_within_bounds() {
    let cases: Vec<Value> =
        serde_json::from_slice(&std::fs::read(corpus().join("cases.json")).expect("cases.json")).expect("json");
    assert!(cases.len() >= 20, "the corpus is all there");
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("corrupt_recordings");
    let _ = std::fs::remove_dir_all(&scratch);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let name = case["name"].as_str().expect("name");
        let dir = scratch.join(format!("case-{i}"));
        copy_dir(&corpus().join("base"), &dir);
        damage(&dir, case);
        let expect = case["expect"].as_str().expect("expect");
        let d = dir.to_str().expect("utf-8 path");
        let commands: Vec<&str> = match case["commands"].as_array() {
            Some(c) => c.iter().filter_map(Value::as_str).collect(),
            None => vec!["info", "insns", "calls", "replay"],
        };
        for command in commands {
            if command == "replay-ok" {
                let out = replay_and_step(&dir);
                if !out.contains("= 0x401000") {
                    failures.push(format!("{name}: replay: gdb did not step there and back:\n{out}"));
                }
                continue;
            }
            let args: Vec<&str> = match command {
                "info" => vec!["info", "--decode", d],
                "info-plain" => vec!["info", d],
                "replay" => vec!["replay", "--no-gdb", "--port", "0", d],
                other => vec![other, d],
            };
            let (code, stderr) = limited(&args);
            if expect.contains("manifest expects") && !command.starts_with("replay") && command != "info-plain" {
                // Incomplete, not invalid: --partial uses what is there, with a warning.
                let mut partial = args.clone();
                partial.insert(1, "--partial");
                let (code, stderr) = limited(&partial);
                if code != 0 || !stderr.contains("rtit: warning:") || !stderr.contains(expect) {
                    failures.push(format!("{name}: `rtit {}` exited {code}:\n{stderr}", partial.join(" ")));
                }
            }
            let last = stderr.lines().last().unwrap_or_default();
            if code != 1 || !last.starts_with("rtit: error:") || !stderr.contains(expect) || stderr.contains("panicked")
            {
                failures.push(format!(
                    "{name}: `rtit {}` exited {code}, wanted 1 with `{expect}`; stderr:\n{stderr}",
                    args.join(" ")
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The base recording itself is whole: every command accepts it.
#[test]
fn the_undamaged_recording_reads_cleanly() {
    let d = corpus().join("base");
    let d = d.to_str().expect("utf-8 path");
    for args in [vec!["info", "--decode", d], vec!["insns", d], vec!["calls", d]] {
        let (code, stderr) = limited(&args);
        assert_eq!(code, 0, "rtit {}: {stderr}", args.join(" "));
    }
    let out = replay_and_step(&corpus().join("base"));
    assert!(out.contains("= 0x401000"), "{out}");
}

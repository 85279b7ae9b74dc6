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

/// Sets the value at a JSON pointer, creating the last key if it is missing (or appending,
/// one past an array's end).
fn set(doc: &mut Value, pointer: &str, value: Value) {
    if let Some(slot) = doc.pointer_mut(pointer) {
        *slot = value;
        return;
    }
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    match doc.pointer_mut(parent).expect("parent") {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
        }
        // One past an array's end appends.
        Value::Array(items) if key.parse() == Ok(items.len()) => items.push(value),
        other => panic!("cannot set {pointer} in {other}"),
    }
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
    if let Some(text) = case["write"].as_str() {
        std::fs::write(&file, text).expect("write");
    }
    if let Some(kind) = case["replace"].as_str() {
        let _ = std::fs::remove_file(&file);
        match kind {
            "fifo" => assert!(Command::new("mkfifo").arg(&file).status().expect("mkfifo").success()),
            "zero" => std::os::unix::fs::symlink("/dev/zero", &file).expect("symlink"),
            "dir" => std::fs::create_dir(&file).expect("mkdir"),
            "outside" => {
                let outside = dir.parent().expect("scratch").join("outside-file");
                std::fs::write(&outside, b"not a trace").expect("write");
                std::os::unix::fs::symlink(&outside, &file).expect("symlink");
            }
            other => panic!("unknown replacement {other}"),
        }
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

/// Applies every case of the corpus to a copy of the base recording (sealed first, as this
/// rtit writes recordings, if `sealed`) and runs the commands on it; what went otherwise than
/// the case says.
fn run_corpus(sealed: bool) -> Vec<String> {
    let cases: Vec<Value> =
        serde_json::from_slice(&std::fs::read(corpus().join("cases.json")).expect("cases.json")).expect("json");
    assert!(cases.len() >= 20, "the corpus is all there");
    let suite = if sealed { "corrupt_sealed" } else { "corrupt_recordings" };
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join(suite);
    let _ = std::fs::remove_dir_all(&scratch);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let name = case["name"].as_str().expect("name");
        let dir = scratch.join(format!("case-{i}"));
        copy_dir(&corpus().join("base"), &dir);
        if sealed {
            rtit_replay_core::recording::seal::seal(&dir).expect("seal");
        }
        damage(&dir, case);
        // Sealed, damage to a file is refused by its seal where no check before caught it:
        // the error names the file, unless the case says what it is.
        let file_named = format!("{}: ", case["file"].as_str().expect("file"));
        let expect = match (sealed, case["sealed_expect"].as_str()) {
            (false, _) => case["expect"].as_str().expect("expect"),
            (true, Some(e)) => e,
            (true, None) => &file_named,
        };
        let d = dir.to_str().expect("utf-8 path");
        let commands: Vec<&str> = match case["commands"].as_array() {
            Some(c) => c.iter().filter_map(Value::as_str).collect(),
            None => vec!["info", "insns", "calls", "replay"],
        };
        for mut command in commands {
            if command == "replay-ok" && expect != "listening on" {
                command = "replay";
            }
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
    failures
}

/// The corpus on the base as an older rtit wrote it, without a seal: the checks of each
/// file's form and meaning refuse each case.
#[test]
fn every_damaged_recording_ends_in_one_clear_error_within_bounds() {
    let failures = run_corpus(false);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The corpus on a sealed copy of the base: every change to a file is refused, naming it.
#[test]
fn every_damaged_sealed_recording_is_refused_naming_the_file() {
    let failures = run_corpus(true);
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
        // Made before rtit sealed recordings: it opens, and says damage cannot be told.
        let warning = format!("rtit: warning: {d} was made by an rtit that did not seal its files");
        let lines: Vec<&str> = stderr.lines().collect();
        assert!(lines.len() == 1 && lines[0].starts_with(&warning), "{stderr}");
    }
    let out = replay_and_step(&corpus().join("base"));
    assert!(out.contains("= 0x401000"), "{out}");
}

/// A recording that is not there is said to be not there (not "not a recording"); a name
/// `rtit ls` lists is found under the recordings' root, as rr finds one.
#[test]
fn a_missing_recording_is_said_missing_and_a_listed_name_is_found() {
    let (code, stderr) = limited(&["replay", "--no-gdb", "/no/such/recording"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stderr.trim(), "rtit: error: /no/such/recording: no such directory");
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("corrupt_names");
    let _ = std::fs::remove_dir_all(&root);
    copy_dir(&corpus().join("base"), &root.join("base-0"));
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["info", "base-0"])
        .env("RTIT_DIR", &root)
        .current_dir(root.join("base-0").join("images"))
        .output()
        .expect("rtit info");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains(&format!("recording     {}", root.join("base-0").display())),
        "{stdout}"
    );
}

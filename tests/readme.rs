//! The README as a user meets it (issue 39): its main job, and the walkthrough of a crash run
//! as written there, command by command, with the output it shows checked against what rtit
//! and a real gdb print. A change that makes the README wrong fails here.
//!
//! What may differ from machine to machine is not compared: addresses QEMU places the program
//! and its stack at (0x40…, which move with the environment's size), the counts and the
//! directory in rtit's summary line, QEMU's own line about the signal (its words vary with
//! its version), and where gdb wraps a long line.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).expect("README.md")
}

/// The code blocks of the README's section `heading` (its `## ` line), each as its lines.
fn blocks(text: &str, heading: &str) -> Vec<Vec<String>> {
    let start = text
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("a section {heading}"));
    let section = &text[start + 1..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut blocks = Vec::new();
    let mut current: Option<Vec<String>> = None;
    for line in section.lines() {
        match (line.starts_with("```"), current.take()) {
            (true, None) => current = Some(Vec::new()),
            (true, Some(block)) => blocks.push(block),
            (false, Some(mut block)) => {
                block.push(line.to_string());
                current = Some(block);
            }
            (false, None) => {}
        }
    }
    blocks
}

/// A line as compared: addresses in the program's memory (10 to 12 significant digits) as
/// `0x…`, and rtit's summary line with its counts and directory left out.
fn normal(line: &str) -> String {
    let line = line.trim();
    if line.starts_with("rtit: ") && line.contains(" bytes of trace in ") {
        return "rtit: N instructions, N bytes of trace in DIR".to_string();
    }
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("0x") {
        out.push_str(&rest[..at]);
        let digits = rest[at + 2..].bytes().take_while(u8::is_ascii_hexdigit).count();
        let number = &rest[at + 2..at + 2 + digits];
        let significant = number.trim_start_matches('0');
        // An address in the program's memory: where QEMU put it (0x40… under QEMU 7.2, where
        // Linux does under QEMU 9.0 and later, 0x5555… and 0x7ff…) is not the README's to say.
        match (10..=12).contains(&significant.len()) {
            true => out.push_str("0x…"),
            false => out.push_str(&rest[at..at + 2 + digits]),
        }
        rest = &rest[at + 2 + digits..];
    }
    out.push_str(rest);
    out
}

/// gdb's output as lines: the prompts it prints before each answer left out, and a line it
/// wrapped (the rest indented on the next) joined again.
fn gdb_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.trim_start_matches("(gdb) ");
        match lines.last_mut() {
            Some(last) if line.starts_with("    ") && !last.is_empty() => {
                *last = format!("{} {}", last.trim_end(), line.trim());
            }
            _ => lines.push(line.to_string()),
        }
    }
    lines.iter().map(|l| normal(l)).collect()
}

/// Whether every line of `expected` is among `actual`, in order; the first that is not.
fn missing(expected: &[String], actual: &[String]) -> Option<String> {
    let mut at = actual.iter();
    expected.iter().map(|e| normal(e)).find(|e| !at.any(|a| a == e))
}

fn scratch(name: &str) -> PathBuf {
    let dir = common::scratch("readme", name);
    let examples = dir.join("examples/c");
    std::fs::create_dir_all(&examples).expect("mkdir");
    std::fs::create_dir_all(dir.join("target")).expect("mkdir");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c/overflow.c");
    std::fs::copy(source, examples.join("overflow.c")).expect("copy");
    dir
}

/// A shell command of the README run in `dir` with this build's rtit and plugin, recordings
/// under `dir/recs`; `stdin` typed into it. Its stdout and stderr, one after the other.
fn run(dir: &Path, command: &str, stdin: &str) -> String {
    let rtit = env!("CARGO_BIN_EXE_rtit");
    let command = command
        .replace("cargo run --release -q --", rtit)
        .replace("$(which rtit)", rtit);
    let command = match command.strip_prefix("rtit ") {
        Some(rest) => format!("{rtit} {rest}"),
        None => command,
    };
    let mut child = Command::new("bash")
        .args(["-c", &command])
        .current_dir(dir)
        .env("RTIT_DIR", dir.join("recs"))
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("typed");
    let out = child.wait_with_output().expect("output");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn the_walkthrough_runs_as_written() {
    let text = readme();
    let dir = scratch("walkthrough");
    // Shell commands, each with the gdb commands typed into it and the lines it shows.
    let mut steps: Vec<(String, Vec<String>, Vec<String>)> = Vec::new();
    for line in blocks(&text, "A crash, step by step").concat() {
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push((command.to_string(), Vec::new(), Vec::new()));
            continue;
        }
        let (_, typed, shown) = steps.last_mut().expect("a command first");
        match line.strip_prefix("(gdb) ") {
            Some(gdb) => typed.push(gdb.to_string()),
            // QEMU's own words about the signal vary with its version.
            None if line.starts_with("qemu: ") => {}
            None => shown.push(line),
        }
    }
    let commands: Vec<&str> = steps.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(
        commands,
        [
            "gcc -g -o target/overflow examples/c/overflow.c",
            "rtit record -- target/overflow",
            "rtit replay"
        ]
    );
    for (command, typed, shown) in &steps {
        let input: String = typed.iter().map(|t| format!("{t}\n")).collect::<String>() + "quit\n";
        let out = run(&dir, command, &input);
        let lines = gdb_lines(&out);
        if let Some(line) = missing(shown, &lines) {
            panic!("`{command}` did not show\n  {line}\nas the README says; it showed:\n{out}");
        }
    }
}

#[test]
fn the_main_job_records_once_and_opens_gdb_without_warnings() {
    let text = readme();
    let main_job = text
        .lines()
        .find(|l| l.ends_with("# the main job"))
        .expect("the main job's line");
    let command = main_job.trim_end_matches("# the main job").trim();
    // The build is this test's own: what follows it runs with this build's rtit.
    let command = command
        .strip_prefix("cargo build --release && ")
        .expect("the main job builds first");
    let dir = scratch("main-job");
    let out = run(&dir, command, "continue\nbt\nquit\n");
    let backend_lines: Vec<&str> = out.lines().filter(|l| l.starts_with("rtit: recording with")).collect();
    assert_eq!(backend_lines, ["rtit: recording with the qemu backend"], "{out}");
    let warnings: Vec<&str> = out.lines().filter(|l| l.to_lowercase().contains("warning")).collect();
    assert!(warnings.is_empty(), "gdb or rtit warned:\n{out}");
    assert!(
        out.contains("Program received signal SIGSEGV") && out.contains("in main (argc=1"),
        "the crash and its backtrace:\n{out}"
    );
    // gdb read the libraries where they are, as natively, not over the remote protocol.
    assert!(!out.contains("from remote target"), "{out}");
    assert!(
        out.contains("Reading symbols from /usr/lib/x86_64-linux-gnu/libc.so.6"),
        "{out}"
    );
}

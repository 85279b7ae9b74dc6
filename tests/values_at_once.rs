//! Values at once (issue 40): what gdb shows at a stop is final when the stop is shown. A
//! real gdb with its default settings connects the moment the server listens, with no
//! `monitor wait`: a crash after a billion instructions shows native gdb's frames and the
//! NULL that caused it, and at positions `monitor goto` jumps to, the registers, the stack
//! and the frames are what the passes' chains show once complete on the same recording.

mod common;

use common::gdb::Server;

/// A program that loops, then passes NULL to `strlen` through ctypes.
fn crash_after(iterations: u64) -> String {
    format!("s = 0\nfor i in range({iterations}): s += i * i\nimport ctypes; ctypes.string_at(0)")
}

#[test]
fn a_crash_after_a_billion_instructions_shows_natives_frames_at_once() {
    if common::skip_without_anchors() {
        return;
    }
    let dir = common::scratch("values_at_once", "long-crash");
    let _removed = common::RemovedOnSuccess(dir.clone());
    let script = crash_after(900_000);
    let rec = common::record_python3_crash(&dir.join("rec"), &script, &[]);
    assert!(
        rec.manifest.instructions >= 1_000_000_000,
        "{}",
        rec.manifest.instructions
    );
    assert!(rec.anchors().expect("anchors").is_some(), "anchors taken");
    let server = Server::start(&rec);
    let replayed = server.gdb(None, &["continue", "p/x $rdi", "p/x $rsp", "bt 7"]);
    let native = common::gdb::native_python3_crash(&script);
    common::gdb::assert_same_python3_crash(&replayed, &native);
}

/// What gdb shows at a position: the frames, some registers and the top of the stack.
const LOOK: [&str; 3] = ["bt 4", "info registers rip rsp rbp rax rdi", "x/4gx $rsp"];

#[test]
fn where_goto_lands_gdb_sees_what_the_complete_chains_show() {
    if common::skip_without_anchors() {
        return;
    }
    let dir = common::scratch("values_at_once", "goto");
    let rec = common::record_python3_crash(
        &dir.join("rec"),
        "import ctypes; ctypes.string_at(0)",
        &["--anchor-every", "3000000"],
    );
    let anchors = rec.anchors().expect("anchors").expect("anchors taken");
    assert!(anchors.list.len() >= 5, "{} anchors", anchors.list.len());
    let last = rec.manifest.instructions;
    // Positions spread over the history, none an anchor's, one just past an anchor.
    let mut positions: Vec<u64> = (1..=5).map(|k| last * k / 6 + 12_345).collect();
    positions.push(anchors.list[2].position + 1);
    let mut commands: Vec<String> = Vec::new();
    for p in &positions {
        commands.push(format!("monitor goto {p}"));
        commands.push("maint flush register-cache".into());
        commands.push("maint flush dcache".into());
        commands.extend(LOOK.iter().map(|c| c.to_string()));
    }
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let anchored = Server::start(&rec).gdb(None, &commands);
    let chains = Server::start_with(&rec, &["--ignore-anchors"]);
    // The reference, not what is tested: a loaded machine may keep `monitor wait`'s dots more
    // than gdb's default 2 s apart (it then drops the connection), so this gdb waits longer.
    let mut waited = vec!["set remotetimeout 30", "monitor wait"];
    waited.extend(&commands);
    let complete = chains.gdb(None, &waited);
    // What gdb shows, without the line a long `goto` keeps gdb waiting with.
    let from_first_goto = |out: &str| {
        let shown = &out[out.find("position ").unwrap_or(0)..];
        let kept: Vec<&str> = shown
            .lines()
            .filter(|l| !l.starts_with("working out the values here"))
            .collect();
        kept.join("\n")
    };
    let (anchored, complete) = (from_first_goto(&anchored), from_first_goto(&complete));
    assert!(anchored.matches("\n#1 ").count() >= positions.len(), "{anchored}");
    assert!(!anchored.contains("<unavailable>"), "{anchored}");
    assert_eq!(anchored, complete, "with anchors (left) and after the chains (right)");
}

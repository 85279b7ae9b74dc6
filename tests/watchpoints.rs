//! Watchpoints (issue 41), tried with a real gdb against native gdb on the same program
//! (tests/programs/watch/watch.c, built -O0): `watch`, `rwatch` and `awatch` going forwards
//! stop where native gdb's hardware watchpoints stop, with the same values, and also at the
//! kernel's write (`read` into the watched variable), which native gdb does not see;
//! `reverse-continue` from the end stops at the same writes in reverse order with the values
//! swapped (as gdb's `record full` does, checked by hand); a watchpoint on a local of a
//! recursive function ends with its frame as natively; a store through an address the
//! recording does not give stops the search with a message.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::gdb::{interleaved, Server};
use rtit_replay_core::recording::Recording;

/// The line of the `printf` at the end of `main`.
const END_LINE: u32 = 45;

/// Builds the program and records it with the qemu backend, with `args`.
fn record(dir: &Path, args: &[&str]) -> (PathBuf, Recording) {
    record_with(dir, &[], args)
}

/// [`record`] with `flags` for `rtit record`.
fn record_with(dir: &Path, flags: &[&str], args: &[&str]) -> (PathBuf, Recording) {
    let exe = common::gcc("tests/programs/watch/watch.c", &["-O0"], dir);
    let out = dir.join("rec");
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu"])
        .args(flags)
        .arg("--out")
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .args(args)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .output()
        .expect("rtit record");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    (exe, Recording::open(&out).expect("a recording"))
}

/// Native gdb on `exe` from `main`, then `commands`.
fn native(exe: &Path, commands: &[&str]) -> String {
    let mut gdb = Command::new("gdb");
    gdb.args([
        "-batch",
        "-nx",
        "-ex",
        "set pagination off",
        "-ex",
        "break main",
        "-ex",
        "run",
    ]);
    for c in commands {
        gdb.arg("-ex").arg(c);
    }
    gdb.arg(exe);
    interleaved(&mut gdb)
}

/// The replay from `main`, then `commands`.
fn replayed(server: &Server, commands: &[&str]) -> String {
    let mut all = vec!["set pagination off", "break main", "continue"];
    all.extend_from_slice(commands);
    server.gdb(None, &all)
}

/// A watchpoint's report: its values (`Old value`, `New value` or `Value`) and the function
/// gdb shows the stop in.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Report {
    values: Vec<String>,
    function: String,
}

/// Every watchpoint report gdb printed, in order.
fn reports(out: &str) -> Vec<Report> {
    let mut all = Vec::new();
    let mut lines = out.lines().peekable();
    while let Some(line) = lines.next() {
        if !line.contains("atchpoint ") || !line.contains(": ") {
            continue;
        }
        let mut values = Vec::new();
        while lines.peek().is_some_and(|l| l.trim().is_empty()) {
            lines.next();
        }
        while let Some(v) = lines.peek().and_then(|l| value(l)) {
            values.push(v);
            lines.next();
        }
        if values.is_empty() {
            continue;
        }
        let frame = lines.next().unwrap_or_default();
        all.push(Report {
            values,
            function: function(frame),
        });
    }
    all
}

/// `Old value = 3` → `old 3`, and so on.
fn value(line: &str) -> Option<String> {
    let (name, v) = line.split_once(" = ")?;
    let name = match name {
        "Old value" => "old",
        "New value" => "new",
        "Value" => "value",
        _ => return None,
    };
    Some(format!("{name} {v}"))
}

/// The function of a frame line (`0x… in f (…) at …` or `f (…) at …`), libc's variants of
/// `memcpy` and `memset` by their family (QEMU's CPU picks others than this machine's).
fn function(frame: &str) -> String {
    let frame = frame
        .split_once(" in ")
        .map_or(frame, |(a, b)| if a.starts_with("0x") { b } else { frame });
    let name = frame.split(' ').next().unwrap_or_default();
    for family in ["memcpy", "memset", "memmove"] {
        if name.starts_with(&format!("__{family}")) {
            return family.to_string();
        }
    }
    name.to_string()
}

/// The reports without their old values.
fn new_values(reports: &[Report]) -> Vec<Report> {
    let strip = |r: &Report| Report {
        values: r.values.iter().filter(|v| !v.starts_with("old ")).cloned().collect(),
        function: r.function.clone(),
    };
    reports.iter().map(strip).collect()
}

/// The kernel's write into `target` (`read` from /dev/zero): a stop native gdb does not make.
fn is_read(r: &Report) -> bool {
    r.function.contains("read")
}

#[test]
fn watchpoints_stop_where_native_gdb_stops_both_ways() {
    let dir = common::scratch("watchpoints", "global");
    let (exe, rec) = record(&dir, &[]);
    let server = Server::start(&rec);
    let continues = vec!["continue"; 14];

    // watch, forwards.
    let mut commands = vec!["watch target"];
    commands.extend(&continues);
    let ours = replayed(&server, &commands);
    let theirs = native(&exe, &commands);
    let (ours_r, theirs_r) = (reports(&ours), reports(&theirs));
    assert!(
        theirs_r.len() >= 8,
        "native gdb stopped {} times:\n{theirs}",
        theirs_r.len()
    );
    let kernel: Vec<&Report> = ours_r.iter().filter(|r| is_read(r)).collect();
    assert_eq!(kernel.len(), 1, "one stop at read's write:\n{ours}");
    assert_eq!(kernel[0].values.last().map(String::as_str), Some("new 0"), "{ours}");
    // Without it, the same stops with the same new values (the old value after it is the
    // one read wrote, which native gdb did not see).
    let ours_user: Vec<Report> = ours_r.iter().filter(|r| !is_read(r)).cloned().collect();
    assert_eq!(
        new_values(&ours_user),
        new_values(&theirs_r),
        "replayed:\n{ours}\nnative:\n{theirs}"
    );
    // watch, backwards from the end: the same writes, last first, the values swapped.
    let end = format!("break {END_LINE}");
    let mut commands = vec![end.as_str(), "continue", "watch target"];
    let reverses = vec!["reverse-continue"; 14];
    commands.extend(&reverses);
    let back = replayed(&server, &commands);
    let back_r = reports(&back);
    let expected: Vec<Vec<String>> = ours_r
        .iter()
        .rev()
        .map(|r| {
            let swap = |v: &String| {
                v.replace("old ", "was ")
                    .replace("new ", "old ")
                    .replace("was ", "new ")
            };
            let mut v: Vec<String> = r.values.iter().map(swap).collect();
            v.sort();
            v
        })
        .collect();
    let got: Vec<Vec<String>> = back_r
        .iter()
        .map(|r| {
            let mut v = r.values.clone();
            v.sort();
            v
        })
        .collect();
    assert_eq!(got, expected, "backwards:\n{back}\nforwards:\n{ours}");
    let functions = |r: &[Report]| r.iter().map(|r| r.function.clone()).collect::<Vec<_>>();
    let mut forward_functions = functions(&ours_r);
    forward_functions.reverse();
    assert_eq!(functions(&back_r), forward_functions, "backwards:\n{back}");

    // awatch, forwards: every value native gdb shows, in the same order (each access
    // reported; libc's variants differ in how many stores memset makes, and the kernel's
    // write is a stop of its own here), and the last at printf's read.
    let mut commands = vec!["awatch target"];
    let more = vec!["continue"; 24];
    commands.extend(&more);
    let ours = replayed(&server, &commands);
    let theirs = native(&exe, &commands);
    let seen = |out: &str| {
        let mut v: Vec<String> = reports(out)
            .iter()
            .filter_map(|r| {
                r.values
                    .last()
                    .map(|v| v.rsplit(' ').next().unwrap_or_default().to_string())
            })
            .collect();
        v.dedup();
        v
    };
    assert!(reports(&theirs).len() >= 10, "awatch: native:\n{theirs}");
    assert_eq!(
        seen(&ours),
        seen(&theirs),
        "awatch: replayed:\n{ours}\nnative:\n{theirs}"
    );
    assert_eq!(
        reports(&ours).last(),
        reports(&theirs).last(),
        "awatch: replayed:\n{ours}"
    );

    // rwatch, forwards: the program's reads of `target`, and only those. Native gdb is no
    // oracle here: x86 has no data breakpoint for reads alone, so gdb sets an access one and
    // calls an access a read when the value did not change (memcpy's second, overlapping
    // store of the same bytes) and a write when it did (the read after `read` changed it
    // unseen).
    let mut commands = vec!["rwatch target"];
    commands.extend(&continues);
    let ours = replayed(&server, &commands);
    let values: Vec<String> = reports(&ours).iter().flat_map(|r| r.values.clone()).collect();
    let reads = ["value 2", "value 3", "value 5", "value 0", "value 42"];
    assert_eq!(values, reads, "rwatch:\n{ours}");

    // Two at once: `target` and `other[5]` (set in `churn`), as natively.
    let mut commands = vec!["watch target", "watch other[5]"];
    commands.extend(&continues);
    let ours = replayed(&server, &commands);
    let theirs = native(&exe, &commands);
    let ours_r: Vec<Report> = reports(&ours).into_iter().filter(|r| !is_read(r)).collect();
    let theirs_r = reports(&theirs);
    assert!(theirs_r.iter().any(|r| r.function == "churn"), "native:\n{theirs}");
    assert_eq!(
        new_values(&ours_r),
        new_values(&theirs_r),
        "two watches: replayed:\n{ours}\nnative:\n{theirs}"
    );

    // Who wrote it last, and who writes it first, without moving.
    let end = format!("break {END_LINE}");
    let out = replayed(
        &server,
        &[
            end.as_str(),
            "continue",
            "eval \"monitor last-write %p 8\", &target",
            "eval \"monitor next-write %p 8\", &target",
        ],
    );
    let last = out
        .lines()
        .position(|l| l.starts_with("last write of 8 bytes at 0x"))
        .expect(&out);
    let lines: Vec<&str> = out.lines().skip(last).take(3).collect();
    assert!(
        lines[0].contains("set_direct") && lines[0].contains("watch.c:15"),
        "{out}"
    );
    assert_eq!(
        lines[1].trim(),
        "before: 00 00 00 00 00 00 00 00",
        "read wrote 0:\n{out}"
    );
    assert_eq!(lines[2].trim(), "after:  2a 00 00 00 00 00 00 00", "42:\n{out}");
    assert!(out.contains("no write of 8 bytes at 0x"), "none after:\n{out}");
    assert!(
        out.contains(&format!("(`monitor goto {}`", position_of(lines[0]))),
        "{out}"
    );
    let out = replayed(&server, &["eval \"monitor next-write %p 8\", &target"]);
    let first = out
        .lines()
        .find(|l| l.starts_with("next write of 8 bytes"))
        .expect(&out);
    assert!(first.contains("set_direct"), "{out}");
    assert!(
        out.contains("after:  01 00 00 00 00 00 00 00"),
        "the first write, of 1:\n{out}"
    );
}

/// The position a `last-write`/`next-write` answer names.
fn position_of(line: &str) -> u64 {
    let (_, rest) = line.split_once("position ").expect("a position");
    rest.split(',').next().and_then(|p| p.parse().ok()).expect("a number")
}

#[test]
fn a_watched_local_of_a_recursive_function_ends_with_its_frame() {
    let dir = common::scratch("watchpoints", "local");
    let (exe, rec) = record(&dir, &[]);
    let server = Server::start(&rec);
    let commands = [
        "break depth if n == 1",
        "continue",
        "watch local",
        "continue",
        "continue",
        "continue",
        "continue",
    ];
    let ours = server.gdb(None, &[&["set pagination off"][..], &commands].concat());
    let mut native_commands = vec!["break depth if n == 1", "run"];
    native_commands.extend(&commands[2..]);
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx", "-ex", "set pagination off"]);
    for c in &native_commands {
        gdb.arg("-ex").arg(c);
    }
    let theirs = interleaved(gdb.arg(&exe));
    // The new values: the first old value is what the stack held before, another run's.
    let (ours_r, theirs_r) = (new_values(&reports(&ours)), new_values(&reports(&theirs)));
    assert_eq!(theirs_r.len(), 3, "native:\n{theirs}");
    assert_eq!(ours_r, theirs_r, "replayed:\n{ours}\nnative:\n{theirs}");
    for out in [&ours, &theirs] {
        assert!(
            out.contains("left the block"),
            "the watchpoint ends with its frame:\n{out}"
        );
    }
}

#[test]
fn a_store_through_an_address_the_recording_does_not_give_stops_the_search_and_says_so() {
    // With an argument, the program stores through rdtsc's result, which the qemu backend
    // records under QEMU 9.0 and later only.
    let Some(qemu) = common::qemu_before_9() else { return };
    let dir = common::scratch("watchpoints", "unknown");
    let (_, rec) = record_with(&dir, &["--qemu", &qemu], &["x"]);
    let server = Server::start(&rec);
    let mut commands = vec!["watch target"];
    commands.extend(vec!["continue"; 11]);
    let out = replayed(&server, &commands);
    assert!(out.contains("New value = 42"), "the last write is found:\n{out}");
    let (before, after) = out
        .split_once("may touch watched memory")
        .expect("a stop at the unknown store");
    assert!(before.contains("New value = 42"), "after the last write:\n{out}");
    assert!(
        before
            .lines()
            .last()
            .is_some_and(|l| l.contains("rtit: the instruction at position")),
        "the message names the position:\n{out}"
    );
    assert!(
        after.lines().take(6).any(|l| l.contains("printf(")),
        "stopped after the store, before printf:\n{out}"
    );
    // Without the argument, no such stop.
    let dir = common::scratch("watchpoints", "known");
    let (_, rec) = record(&dir, &[]);
    let server = Server::start(&rec);
    let out = replayed(&server, &commands);
    assert!(!out.contains("may touch watched memory"), "{out}");
    assert!(out.contains("New value = 42"), "{out}");
}

#[test]
fn the_index_of_written_addresses_skips_only_blocks_that_write_nothing_watched() {
    use rtit_replay_core::session::Session;
    use rtit_replay_core::state::watch::{Found, Watch, WatchKind};
    use rtit_replay_core::timeline::cache::Policy;

    if common::skip_without_anchors() {
        return;
    }
    let dir = common::scratch("watchpoints", "index");
    let rec = Recording::open(&common::record_sort_with_anchors(&dir)).expect("a recording");
    let anchors = rec.anchors().expect("anchors read").expect("anchors taken");
    assert!(anchors.list.len() >= 3, "{} anchors", anchors.list.len());
    let open = || Session::open_cached(rec.clone(), false, Policy::Off, &mut |_| {}).expect("session");
    let (mut indexed, mut walked) = (open(), open());
    walked.values().expect("values").walk_every_instruction_for_watches();
    let last = indexed.last();
    // What sort writes between anchors (a page each of three anchors', 8 bytes into it), and
    // the stack below the middle's stack pointer.
    let mut watches: Vec<u64> = [1, anchors.list.len() / 2, anchors.list.len() - 1]
        .iter()
        .filter_map(|&i| {
            let pages = anchors.pages(i).expect("pages");
            let page = pages
                .iter()
                .find(|(_, b)| b.is_some_and(|b| b.iter().any(|&x| x != 0)))?;
            Some(page.0 + 8)
        })
        .collect();
    indexed.set_position(last / 2);
    indexed.settle(&mut || false);
    watches.push(indexed.register("rsp").expect("rsp in the middle") - 64);
    let mut hits = 0;
    for address in watches {
        let w = [Watch {
            address,
            len: 8,
            kind: WatchKind::Write,
        }];
        for (from, to) in [(0, last / 2), (last / 3, last)] {
            let first = |s: &mut Session| s.values().expect("values").first_access(from, to, &w, &mut || false);
            let found = first(&mut indexed);
            assert_eq!(found, first(&mut walked), "first write of {address:#x} in {from}..{to}");
            let back = |s: &mut Session| s.values().expect("values").last_access(from, to, &w, &mut || false);
            let found_back = back(&mut indexed);
            assert_eq!(
                found_back,
                back(&mut walked),
                "last write of {address:#x} in {from}..{to}"
            );
            hits += [found, found_back]
                .iter()
                .filter(|f| matches!(f, Some(Found::Hit { .. })))
                .count();
        }
    }
    assert!(
        hits >= 6,
        "{hits} writes found: a comparison that finds nothing proves nothing"
    );
}

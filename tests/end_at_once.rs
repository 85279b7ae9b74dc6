//! The end at once (issue 40): a C program that works for a billion instructions and then
//! crashes, recorded with the default backend. A real gdb connecting the moment the server
//! listens gets through the loader's library stops and a `continue` to the crash before
//! the trace is decoded, and its `bt` there is native gdb's. With the decode held back, a
//! session's answers at a stop in the history's beginning and at the end are those the
//! whole decoded history gives.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use common::gdb::Server;
use rtit_replay_core::recording::Recording;
use rtit_replay_core::session::{Session, Stop};
use rtit_replay_core::timeline::cache::Policy;

/// `rtit record` (qemu backend) of `tests/programs/crash_after.c` built at -O0, `rounds`
/// rounds of its loop: it dies of SIGSEGV.
fn record(dir: &Path, rounds: &str) -> (Recording, std::path::PathBuf) {
    let exe = common::gcc("tests/programs/crash_after.c", &["-O0"], dir);
    let out = dir.join("rec");
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--out"])
        .arg(&out)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .arg("--")
        .arg(&exe)
        .arg(rounds)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(!status.success(), "the program dies of SIGSEGV");
    (Recording::open(&out).expect("a recording"), exe)
}

/// Hex numbers masked: addresses differ between QEMU and a native run.
fn masked(frames: &[String]) -> Vec<String> {
    frames
        .iter()
        .map(|f| {
            let mut out = String::new();
            let mut rest = f.as_str();
            while let Some(i) = rest.find("0x") {
                out.push_str(&rest[..i]);
                out.push_str("0x…");
                rest = rest[i + 2..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
            }
            out + rest
        })
        .collect()
}

#[test]
fn a_crash_after_a_billion_instructions_shows_natives_frames_before_the_decode() {
    if common::skip_without_anchors() {
        return;
    }
    let dir = common::scratch("end_at_once", "gdb");
    let _removed = common::RemovedOnSuccess(dir.clone());
    let (rec, exe) = record(&dir, "34000000");
    assert!(
        rec.manifest.instructions >= 1_000_000_000,
        "{}",
        rec.manifest.instructions
    );
    let server = Server::start(&rec);
    let replayed = server.gdb(None, &["monitor info", "continue", "bt", "p value", "monitor info"]);
    let native = Command::new("gdb")
        .args(["-batch", "-nx", "-ex", "run", "-ex", "bt", "-ex", "p value", "--args"])
        .arg(&exe)
        .arg("34000000")
        .output()
        .expect("gdb");
    let native = String::from_utf8_lossy(&native.stdout).into_owned();
    assert!(replayed.contains("SIGSEGV"), "{replayed}");
    let frames = masked(&common::gdb::frames(&replayed));
    assert_eq!(frames.len(), 5, "store ×3, finish, main: {replayed}");
    assert_eq!(
        frames,
        masked(&common::gdb::frames(&native)),
        "replayed:\n{replayed}\nnative:\n{native}"
    );
    let value = |out: &str| out.lines().find(|l| l.starts_with("$1 = ")).map(str::to_string);
    assert_eq!(value(&replayed), value(&native), "{replayed}");
    // Asked while the history is still read, `monitor info` says the values shown are final.
    assert!(
        !replayed.contains("being read in the background") || replayed.contains("values    final at every stop"),
        "{replayed}"
    );
}

/// What a `bt` reads at the current position: registers and the top of the stack.
fn look(s: &mut Session) -> (Vec<Option<u64>>, Option<Vec<u8>>) {
    let regs = ["rip", "rsp", "rbp", "rdi", "rsi", "rax", "eflags"].map(|r| s.register(r));
    let stack = regs[1].and_then(|sp| s.read_memory(sp, 64));
    (regs.to_vec(), stack)
}

#[test]
fn answers_before_the_decode_are_the_whole_historys() {
    if common::skip_without_anchors() {
        return;
    }
    let dir = common::scratch("end_at_once", "held");
    let (rec, _) = record(&dir, "34000000");
    // The oracle: the whole history, decoded first.
    let mut whole = Session::open_cached(rec.clone(), false, Policy::Off, &mut |_| {}).expect("opens");
    let early = whole.ip_at(100_000).expect("an instruction early on");
    let entry = whole.ip_at(0).expect("the first instruction");
    assert_eq!(
        whole.continue_forward(&HashSet::from([early]), || false),
        Stop::Breakpoint
    );
    let hit = whole.position();
    whole.settle(&mut || false);
    let at_hit = look(&mut whole);
    assert!(
        at_hit.0[1].is_some() && at_hit.1.is_some(),
        "the stack is known there: {at_hit:?}"
    );
    whole.set_position(0);
    assert_eq!(
        whole.continue_forward(&HashSet::from([entry]), || false),
        Stop::Signal(11)
    );
    let end = whole.position();
    let at_end = look(&mut whole);
    // Code that runs only after the loop, past the last anchor: `store`, a few instructions
    // before the fault.
    let late = whole.ip_at(end - 5).expect("an instruction before the fault");
    whole.set_position(hit);
    assert_eq!(
        whole.continue_forward(&HashSet::from([late]), || false),
        Stop::Breakpoint
    );
    let late_hit = whole.position();
    assert!(late_hit > end - 100, "{late_hit} {end}");
    whole.settle(&mut || false);
    let at_late = look(&mut whole);

    // A session whose decode waits at its first progress report until the test says.
    let (go, gate) = mpsc::channel::<()>();
    let gate = Mutex::new(gate);
    let progress = Box::new(move |_| {
        let _ = gate.lock().map(|g| g.recv());
    });
    let mut held =
        Session::open_background(rec.clone(), false, Policy::Off, progress, Box::new(|_| {})).expect("opens");
    assert_eq!(
        held.continue_forward(&HashSet::from([early]), || false),
        Stop::Breakpoint
    );
    assert_eq!(held.position(), hit, "the beginning's first hit is the whole's");
    assert!(held.settle(&mut || false));
    assert_eq!(look(&mut held), at_hit, "values at the hit before the decode");
    // The breakpoint after the last anchor is found in the window from that anchor to the
    // fault (a `continue` that waited for the decode would be interrupted here).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    assert_eq!(
        held.continue_forward(&HashSet::from([late]), || std::time::Instant::now() > deadline),
        Stop::Breakpoint
    );
    assert_eq!(held.position(), late_hit, "the whole's hit");
    assert!(held.settle(&mut || false));
    assert_eq!(look(&mut held), at_late, "values at the late hit before the decode");
    assert_eq!(
        held.continue_forward(&HashSet::from([entry]), || false),
        Stop::Signal(11)
    );
    assert_eq!(held.position(), end);
    assert_eq!(look(&mut held), at_end, "values at the end before the decode");
    assert!(!held.ready(), "all this before the whole history was decoded");

    drop(go);
    assert!(
        held.wait_ready(Duration::from_secs(120)),
        "the decode goes on once let go"
    );
    assert!(
        held.failure().is_none(),
        "the code list and the beginning agree with the whole"
    );
    assert_eq!(look(&mut held), at_end, "the same values once decoded");
    assert_eq!(held.step_backward(), Stop::Step);
    assert_eq!(held.position(), end - 1);
}

/// Debian's python3 running a loop of `rounds` rounds, then exiting normally.
const LOOP: &str = "s = 0\nfor i in range({rounds}): s += i * i\nprint(s)";

/// The end at once after an exit (QEMU 7.2 reads no registers at `exit_group`): a
/// `continue` to the end of a billion-instruction python3 run, `bt` and `p $rdi` there are
/// native gdb's at its `exit_group`; and a session whose decode is held back answers at the
/// end, at a breakpoint found going back from it and a step after it with the whole
/// history's values, then finds the whole's end the same as the one it decoded alone.
#[test]
fn after_an_exit_the_end_answers_before_the_decode() {
    if common::skip_without_anchors() {
        return;
    }
    let dir = common::scratch("end_at_once", "exit");
    let _removed = common::RemovedOnSuccess(dir.clone());
    let script = LOOP.replace("{rounds}", "1000000");
    let out = dir.join("rec");
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--out"])
        .arg(&out)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .args(["--", "/usr/bin/python3", "-S", "-c", &script])
        .stdout(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.success());
    let rec = Recording::open(&out).expect("a recording");
    let total = rec.manifest.instructions;
    assert!(total >= 1_000_000_000, "{total}");
    assert!(rec.sync_points().expect("read").is_some_and(|p| p.len() > 100));

    // gdb the moment the server listens, against native gdb at the same exit.
    let server = Server::start(&rec);
    let replayed = server.gdb(None, &["continue", "bt", "p $rdi"]);
    drop(server);
    let native = Command::new("gdb")
        .args([
            "-batch",
            "-nx",
            "-ex",
            "catch syscall exit_group",
            "-ex",
            "run",
            "-ex",
            "bt",
        ])
        .args(["-ex", "p $rdi", "--args", "/usr/bin/python3", "-S", "-c", &script])
        .output()
        .expect("gdb");
    let native = String::from_utf8_lossy(&native.stdout).into_owned();
    // The replay stops at the `syscall` instruction, native gdb after it (the start of a
    // line): frame 0 shows its address in one and not the other.
    let unaddressed = |out: &str| -> Vec<String> {
        let frames = masked(&common::gdb::frames(out));
        frames.iter().map(|f| f.replacen("0x… in ", "", 1)).collect()
    };
    let frames = unaddressed(&replayed);
    assert!(frames.len() >= 4, "_exit down to _start: {replayed}");
    assert_eq!(frames, unaddressed(&native), "replayed:\n{replayed}\nnative:\n{native}");
    let value = |out: &str| out.lines().find(|l| l.starts_with("$1 = ")).map(str::to_string);
    assert_eq!(value(&replayed), value(&native), "{replayed}");

    // The oracle: the whole history, decoded first.
    let mut whole = Session::open_cached(rec.clone(), false, Policy::Off, &mut |_| {}).expect("opens");
    assert_eq!(whole.continue_forward(&HashSet::new(), || false), Stop::End);
    let end = whole.position();
    assert_eq!(end, total - 1, "the last position: the exit_group call");
    whole.settle(&mut || false);
    let at_end = look(&mut whole);
    assert!(
        at_end.0[1].is_some() && at_end.1.is_some(),
        "the stack is known: {at_end:?}"
    );
    // A breakpoint a thousand positions before the end, or halfway to the last anchor
    // where that is nearer (the recorder takes an anchor whenever its watch finds one due,
    // once 553 positions before the exit).
    let anchors = rec.anchors().expect("read").expect("anchors");
    let last_anchor = anchors.list.last().expect("an anchor").position;
    assert!(
        end - last_anchor >= 2,
        "the last anchor {last_anchor} is not before the end {end}"
    );
    let near = HashSet::from([whole
        .ip_at(end - 1000.min((end - last_anchor) / 2))
        .expect("an instruction")]);
    assert_eq!(whole.continue_backward(&near, || false), Stop::Breakpoint);
    let hit = whole.position();
    whole.settle(&mut || false);
    let at_hit = look(&mut whole);
    assert!(
        hit > last_anchor,
        "the hit {hit} is after the last anchor {last_anchor}"
    );
    // A step back below the last anchor, out of the end's window.
    whole.set_position(last_anchor - 1);
    whole.settle(&mut || false);
    let below_anchor = look(&mut whole);

    // A breakpoint past the history's beginning: an instruction first run between 2^23
    // and 2^24 positions in (the beginning ends at the first anchor past 2^22).
    let seen: HashSet<u64> = whole.timeline().ips().take(1 << 23).collect();
    let first = (whole.timeline().ips().enumerate())
        .skip(1 << 23)
        .take(1 << 23)
        .find(|(_, ip)| !seen.contains(ip))
        .map(|(p, ip)| (p as u64, ip))
        .expect("new code between 2^23 and 2^24");
    // `monitor goto` to the middle.
    let middle = total / 2;
    whole.set_position(middle);
    whole.settle(&mut || false);
    let at_middle = look(&mut whole);
    whole.set_position(first.0);
    whole.settle(&mut || false);
    let at_first = look(&mut whole);
    assert!(at_first.0[1].is_some(), "rsp known at {}: {at_first:?}", first.0);

    // A session whose decode waits at its first progress report until the test says (or
    // two minutes: a move that waited for the decode then fails the `ready` check below).
    let (go, gate) = mpsc::channel::<()>();
    let gate = Mutex::new(gate);
    let progress = Box::new(move |_| {
        let _ = gate.lock().map(|g| g.recv_timeout(Duration::from_secs(120)));
    });
    let mut held =
        Session::open_background(rec.clone(), false, Policy::Off, progress, Box::new(|_| {})).expect("opens");
    assert_eq!(
        held.continue_forward(&HashSet::from([first.1]), || false),
        Stop::Breakpoint
    );
    assert_eq!(
        held.position(),
        first.0,
        "the first hit past the beginning is the whole's"
    );
    assert!(held.settle(&mut || false));
    assert_eq!(look(&mut held), at_first, "values at that hit before the decode");
    assert!(
        !held.ready(),
        "a hit past the beginning before the whole history was decoded"
    );
    assert!(held.goto_early(middle), "a window answers in the middle");
    assert!(held.settle(&mut || false));
    assert_eq!(look(&mut held), at_middle, "values in the middle before the decode");
    assert_eq!(held.continue_forward(&HashSet::new(), || false), Stop::End);
    assert_eq!(held.position(), end);
    assert!(held.settle(&mut || false));
    assert_eq!(look(&mut held), at_end, "values at the end before the decode");
    assert_eq!(held.continue_backward(&near, || false), Stop::Breakpoint);
    assert_eq!(held.position(), hit, "the end's hit going back is the whole's");
    assert!(held.settle(&mut || false));
    assert_eq!(look(&mut held), at_hit, "values at the hit before the decode");
    assert_eq!(held.step_forward(), Stop::Step);
    assert_eq!(held.position(), hit + 1);
    assert!(
        held.goto_early(last_anchor),
        "the end's window starts at the last anchor"
    );
    assert_eq!(held.step_backward(), Stop::Step);
    assert_eq!(held.position(), last_anchor - 1);
    assert!(held.settle(&mut || false));
    assert_eq!(
        look(&mut held),
        below_anchor,
        "values a step below the end's window, before the decode"
    );
    assert!(!held.ready(), "all this before the whole history was decoded");

    drop(go);
    assert!(
        held.wait_ready(Duration::from_secs(300)),
        "the decode goes on once let go"
    );
    assert!(held.failure().is_none(), "the end decoded alone is the whole's");
    held.set_position(end);
    assert_eq!(look(&mut held), at_end, "the same values once decoded");
}

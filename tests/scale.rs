//! Replay at scale (issue 19): a recording whose history the first design held at 24 bytes
//! a position (over 1 GB here) opens at once and serves a real gdb with its default
//! settings (no `remotetimeout`): breakpoints in libc, `bt`, `continue` to the end and
//! `reverse-continue` back to the start, in a server that stays small.

mod common;

use std::process::{Command, Stdio};

use common::gdb::Server;
use rtit_replay_core::recording::Recording;
use rtit_replay_core::session::Session;
use rtit_replay_core::timeline::cache::{self, CacheError, Origin, Policy};

#[test]
fn a_55_million_instruction_history_serves_a_default_gdb_from_end_to_start() {
    let dir = common::scratch("scale", "sha256sum");
    // sha256sum of 1 MiB: about 55 million instructions, read 32 KiB at a time.
    let input = dir.join("zeros");
    std::fs::write(&input, vec![0u8; 1 << 20]).expect("input");
    let rec = dir.join("rec");
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--out"])
        .arg(&rec)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .args(["--", "/usr/bin/sha256sum"])
        .arg(&input)
        .stdout(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.success());
    let rec = Recording::open(&rec).expect("recording");
    let n = rec.manifest.instructions;
    assert!(n > 45_000_000, "{n} instructions: at 24 bytes each, over 1 GB");
    let server = Server::start(&rec);
    let out = server.gdb(
        None,
        &[
            "break read",
            "continue",
            "continue",
            "p $rdx",
            "bt",
            "delete",
            "continue",
            "monitor when",
            // Asked at once at the end, then again once the values are final: the answer
            // given before must not stick (it showed <unavailable> until one moved).
            // `monitor wait` is what a script waits for them with.
            "p $rsp",
            "monitor wait",
            "monitor info",
            // What the gdb `rtit replay` starts does after every monitor command.
            "maintenance flush register-cache",
            "p $rsp",
            "reverse-continue",
            "monitor when",
        ],
    );
    let peak = server.peak_kib();
    assert!(out.contains("in _start ()"), "gdb connected at position 0:\n{out}");
    let reads = out.matches("Breakpoint 1, __GI___libc_read (fd=").count();
    assert_eq!(reads, 2, "{out}");
    assert!(out.contains("$1 = 32768"), "the second read asks for 32 KiB:\n{out}");
    for frame in ["__GI___fread_unlocked", "__libc_start_main"] {
        assert!(out.contains(frame), "`bt` through {frame}:\n{out}");
    }
    assert!(out.contains("__GI__exit"), "`continue` reached the exit:\n{out}");
    let last = n - 1;
    assert!(out.contains(&format!("position {last} of 0..{last}")), "{out}");
    assert!(
        out.contains(&format!("position 0 of 0..{last}")),
        "`reverse-continue` reached the start:\n{out}"
    );
    assert_eq!(out.matches("No more reverse-execution history").count(), 2, "{out}");
    let after = out.split("values    final").last().expect("output");
    assert!(
        out.contains("values final\n") && out.contains("values    final"),
        "`monitor wait` came back once the values were final:\n{out}"
    );
    let rsp = after
        .lines()
        .find(|l| l.starts_with('$') && l.contains(" = "))
        .unwrap_or("");
    assert!(
        rsp.contains("0x"),
        "rsp at the end once the values are final: {rsp}\n{out}"
    );
    assert!(
        !out.contains("Remote connection closed") && !out.contains("nack"),
        "{out}"
    );
    // The first design held 24 bytes a position: 1.3 GB here.
    assert!(peak < 1 << 20, "the server's peak is {peak} KiB");
    eprintln!("{n} positions, server peak {} MiB", peak >> 10);
}

/// Records `sort -n` on `lines` numbers with the qemu backend.
fn record_sort(name: &str, lines: u32) -> Recording {
    let text: String = (0..lines).map(|i| format!("{}\n", (i * 7919) % 10007)).collect();
    record_sort_of(name, &text, &["-n"])
}

/// Records `sort FLAGS` on `text` with the qemu backend (in the C.UTF-8 locale, as a
/// Debian shell has it: sort collates with strcoll then).
fn record_sort_of(name: &str, text: &str, flags: &[&str]) -> Recording {
    let dir = common::scratch("scale", name);
    let input = dir.join("numbers");
    std::fs::write(&input, text).expect("input");
    let rec = dir.join("rec");
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--out"])
        .arg(&rec)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .env("LANG", "C.UTF-8")
        .env_remove("LC_ALL")
        .args(["--", "/usr/bin/sort"])
        .args(flags)
        .arg(&input)
        .stdout(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.success());
    Recording::open(&rec).expect("recording")
}

/// Plain `sort` (no key) copies each line's record whole, two of its four words never written
/// (no key to point at): they are the zeros of the 1.1 MiB buffer sort mapped, and replay
/// lost every value copied with them while it forgot anonymous mappings over 1 MiB instead
/// of knowing them zero: at the first `write` the buffer's bytes were unknown and `bt` ended
/// after 6 of 13 frames (a user's check; `sort -n` sets the key words and did not show it).
#[test]
fn plain_sort_s_output_is_known_at_its_first_write() {
    // 2,000 random numbers of 7 or 8 digits (xorshift), as `shuf -i` would give.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let text: String = (0..2000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("{}\n", 1_000_000 + x % 99_000_000)
        })
        .collect();
    let rec = record_sort_of("plain", &text, &[]);
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    let first: Vec<String> = format!("{}\n", lines.join("\n"))
        .bytes()
        .take(8)
        .map(|b| format!("0x{b:02x}"))
        .collect();
    let (bytes, out) = first_write(&rec);
    assert_eq!(bytes, first, "the first line sort writes:\n{out}");
    assert!(out.contains("#10 "), "bt reaches __libc_start_main:\n{out}");
    assert!(out.contains("__libc_start_main"), "{out}");
}

#[test]
fn a_timeline_decoded_once_is_read_back_by_the_next_replay_and_never_when_stale() {
    let rec = record_sort("cache", 3000);
    let stored = rec.dir.join(cache::FILE);
    let mut first = Session::open_cached(rec.clone(), false, Policy::Always, &mut |_| {}).expect("first open");
    assert!(
        matches!(first.origin(), Some(Origin::Decoded { set_aside: None, .. })),
        "{:?}",
        first.origin()
    );
    assert_eq!(first.stored().expect("stored").expect("written"), stored);
    // Smaller than the trace it was decoded from: this sort's loop packs its runs into 0.74
    // bytes of trace each, and the history unpacked came to 1.07 times the trace here; packed
    // with LZ4, under a third.
    let size = |name: &str| std::fs::metadata(rec.dir.join(name)).expect(name).len();
    assert!(
        size(cache::FILE) * 2 < size("trace.rtit"),
        "the stored history takes {} bytes, the trace {} ({:?} runs and blocks, {} events)",
        size(cache::FILE),
        size("trace.rtit"),
        first.timeline().counts(),
        first.timeline().events().len(),
    );
    let mut again = Session::open(rec.clone()).expect("second open");
    assert!(
        matches!(again.origin(), Some(Origin::Read(p)) if *p == stored),
        "{:?}",
        again.origin()
    );
    assert_eq!(first.timeline().first_difference(again.timeline()), None);
    assert!(again.len() > 1_000_000, "{} positions", again.len());
    // The same values wherever asked: the state layer works on the history read back.
    for position in [0, 20_000, again.len() / 2] {
        first.set_position(position);
        again.set_position(position);
        for reg in ["rip", "rsp", "rax", "rdi"] {
            assert_eq!(first.register(reg), again.register(reg), "{reg} at {position}");
        }
    }
    again.set_position(20_000);
    assert!(again.register("rsp").is_some(), "rsp is known at 20,000");

    // A real gdb on a replay that read it back.
    let server = Server::start(&rec);
    let out = server.gdb(None, &["monitor info", "break exit", "continue", "bt 2"]);
    assert!(out.contains(&format!("read back from {}", stored.display())), "{out}");
    assert!(out.contains("Breakpoint 1, ") && out.contains("exit"), "{out}");
    drop(server);

    // A recording changed since (here only a file's modification time): decoded again.
    let maps = std::fs::File::options()
        .write(true)
        .open(rec.dir.join("maps.json"))
        .expect("maps.json");
    maps.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .expect("touch");
    let third = Session::open(rec.clone()).expect("third open");
    assert!(
        matches!(
            third.origin(),
            Some(Origin::Decoded {
                set_aside: Some(CacheError::OtherKey),
                ..
            })
        ),
        "{:?}",
        third.origin()
    );
    assert_eq!(first.timeline().first_difference(third.timeline()), None);
}

/// A gdb served while the history is still being decoded: it connects and reads position 0
/// (registers from the start snapshot, the stack's memory), and a monitor command that needs
/// the history waits for it, longer than gdb's default remote timeout, telling gdb it is
/// waiting; then moves work. The decode is held back until gdb has read position 0 (`shell
/// touch`), and released 4 s after that, so the order never depends on timing.
#[test]
fn a_gdb_is_served_at_position_0_while_the_history_is_decoded() {
    let rec = record_sort("background", 3000);
    let mut eager = Session::open_cached(rec.clone(), false, Policy::Off, &mut |_| {}).expect("open");
    let go = rec.dir.join("go");
    let (release, held) = std::sync::mpsc::channel::<()>();
    let on_done: rtit_replay_core::session::OnDone = Box::new(move |h| {
        // Decoded already: wait for gdb's word before saying so.
        let _ = held.recv();
        assert!(h.is_ok(), "decoded");
    });
    let session = Session::open_background(rec.clone(), false, Policy::Off, Box::new(|_| {}), on_done)
        .expect("open in the background");
    assert!(!session.ready(), "the history is held back");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("address").port();
    let target = rtit_stub::ReplayTarget::new(session);
    std::thread::spawn(move || rtit_stub::server::serve_forever(&listener, target, |_| {}));
    let watch = go.clone();
    std::thread::spawn(move || {
        while !watch.exists() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // Longer than gdb's default remote timeout (2 s): `monitor insns` must keep it waiting.
        std::thread::sleep(std::time::Duration::from_secs(4));
        let _ = release.send(());
    });
    let mut gdb = Command::new("gdb");
    gdb.args(["-batch", "-nx"])
        .arg("-ex")
        .arg(format!("target remote :{port}"));
    for c in [
        "p/x $pc",
        "p/x $rsp",
        "x/2gx $rsp",
        "monitor when",
        "monitor info",
        &format!("shell touch {}", go.display()),
        "monitor insns 1",
        "stepi",
        "monitor when",
        "p/x $pc",
    ] {
        gdb.arg("-ex").arg(c);
    }
    let out = common::gdb::interleaved(&mut gdb);
    let pc = eager.pc();
    let rsp = eager.register("rsp").expect("rsp at 0");
    let word = eager.read_memory(rsp, 8).expect("the stack at 0");
    assert!(out.contains(&format!("$1 = {pc:#x}")), "pc at 0 is {pc:#x}:\n{out}");
    assert!(out.contains(&format!("$2 = {rsp:#x}")), "rsp at 0 is {rsp:#x}:\n{out}");
    let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
    assert!(
        out.contains(&format!("{rsp:#x}:\t{word:#018x}")),
        "the stack's first word {word:#x}:\n{out}"
    );
    let recorded = rec.manifest.instructions;
    assert!(
        out.contains(&format!(
            "position 0 (the history of {recorded} instructions is still being read"
        )),
        "`monitor when` before the decode ends:\n{out}"
    );
    // `monitor info` says what the recording is at once, and that the history is on its way.
    assert!(
        out.contains("command   ") && out.contains(&format!("history   {recorded} instructions, being read")),
        "`monitor info` before the decode ends:\n{out}"
    );
    assert!(
        out.contains(&format!(
            "waiting for the history ({recorded} instructions) to be decoded."
        )),
        "`monitor insns` says it waits, past gdb's remote timeout:\n{out}"
    );
    assert!(
        out.contains("=> ") && !out.contains("try again") && !out.contains("Remote connection closed"),
        "`monitor insns` answered once the history was there:\n{out}"
    );
    let n = eager.len();
    assert!(
        out.contains(&format!("position 1 of 0..{}", n - 1)),
        "`stepi` after the decode:\n{out}"
    );
    eager.set_position(1);
    assert!(out.contains(&format!("$3 = {:#x}", eager.pc())), "pc at 1:\n{out}");
}

/// A recording whose trace is whole but holds fewer instructions than its manifest counts
/// is refused: at once by an eager open, once decoded by one in the background, whose moves
/// then stop with `NoHistory` and which has no positions.
#[test]
fn an_incomplete_history_found_in_the_background_leaves_no_history() {
    let rec = record_sort("background-incomplete", 200);
    let path = rec.dir.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("manifest")).expect("json");
    let n = manifest["instructions"].as_u64().expect("a count");
    manifest["instructions"] = (n + 1).into();
    std::fs::write(&path, serde_json::to_vec(&manifest).expect("json")).expect("manifest");
    // Sealed again, as a recorder that miscounted would have written it.
    rtit_replay_core::recording::seal::seal(&rec.dir).expect("seal");
    let rec = Recording::open(&rec.dir).expect("recording");
    let refused = Session::open_cached(rec.clone(), false, Policy::Off, &mut |_| {}).err();
    assert!(
        matches!(
            refused,
            Some(rtit_replay_core::recording::RecordingError::Incomplete { .. })
        ),
        "{refused:?}"
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let on_done: rtit_replay_core::session::OnDone = Box::new(move |h| {
        let _ = tx.send(h.err().map(ToString::to_string));
    });
    let mut session =
        Session::open_background(rec, false, Policy::Off, Box::new(|_| {}), on_done).expect("the files are fine");
    let told = rx.recv().expect("on_done").expect("an error");
    assert!(told.contains("incomplete"), "{told}");
    let stop = session.continue_forward(&std::collections::HashSet::new(), || false);
    assert_eq!(stop, rtit_replay_core::session::Stop::NoHistory);
    assert_eq!(session.len(), 0);
    assert!(session.failure().is_some_and(|e| e.to_string().contains("incomplete")));
}

/// A call that writes more than a log record holds (16 MiB) logs the rest as ranges, and
/// replay forgets only those: before, such a call was logged as incomplete and every value
/// after it was lost (plain `sort` reads its whole input in one call, and at its first
/// `write` on 200,000 lines rsp and the buffer were unknown, a user's check).
#[test]
fn a_read_over_the_log_bound_leaves_the_rest_of_memory_known() {
    let dir = common::scratch("scale", "bigread");
    let _removed = common::RemovedOnSuccess(dir.clone());
    let input = dir.join("17mib");
    std::fs::write(&input, vec![b'x'; 17 << 20]).expect("input");
    let rec = dir.join("rec");
    let script = format!(
        "import os; fd = os.open('{}', os.O_RDONLY); d = os.read(fd, 17 << 20); os.write(1, b'read %d' % len(d))",
        input.display()
    );
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--out"])
        .arg(&rec)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .args(["--", "/usr/bin/python3", "-c", &script])
        .stdout(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.success());
    let recording = Recording::open(&rec).expect("recording");
    let records = recording.syscalls().expect("syscalls");
    let read = records
        .iter()
        .find(|r| r.nr == 0 && r.after.get("rax").map(String::as_str) == Some("0x1100000"))
        .expect("the 17 MiB read");
    assert!(!read.complete, "an older reader must forget all memory there");
    assert_eq!(read.writes.iter().map(|w| w.bytes.len() / 2).sum::<usize>(), 16 << 20);
    assert_eq!(read.unlogged.iter().map(|u| u.len).sum::<u64>(), 1 << 20);
    let (bytes, out) = first_write(&recording);
    let want: Vec<String> = b"read 178".iter().map(|b| format!("0x{b:02x}")).collect();
    assert_eq!(bytes, want, "the text written after the read:\n{out}");
    assert!(out.contains("__libc_start_main"), "bt reaches the start:\n{out}");
}

/// At the program's first `write` (values final): the first 8 bytes of its buffer as gdb
/// prints them (`0x..` each), and gdb's whole output (with `bt`).
fn first_write(rec: &Recording) -> (Vec<String>, String) {
    let server = Server::start(rec);
    let out = server.gdb(
        None,
        &[
            "monitor wait",
            "maintenance flush register-cache",
            "break write",
            "continue",
            "x/8xb $rsi",
            "bt",
        ],
    );
    let line = out
        .lines()
        .find(|l| l.contains(":\t0x"))
        .unwrap_or_else(|| panic!("the buffer's bytes:\n{out}"));
    let bytes = line.split('\t').skip(1).map(|b| b.trim().to_string()).collect();
    (bytes, out)
}

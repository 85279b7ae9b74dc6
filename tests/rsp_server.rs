//! The replay server against awkward clients, over real TCP with a real gdb: a second client
//! while a gdb is debugging, a client that never speaks, huge memory reads from a raw client,
//! reconnecting after every way a client can leave, `monitor goto` followed by `bt` in the gdb
//! `rtit replay` starts, and `monitor info`/`help` as people read them.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rtit_replay_core::recording::{EndState, Recording};

/// A bound that only a hang exceeds.
const HANG: Duration = Duration::from_secs(60);

/// examples/c/recursion.c, static, recorded from main with the step backend and the truth.
fn recording(name: &str) -> Recording {
    let dir = common::scratch("rsp_server", name);
    let exe = common::gcc("examples/c/recursion.c", &["-static"], &dir);
    let rec = common::record_from_main(&exe, &dir.join("rec"));
    assert_eq!(rec.manifest.end, EndState::Exited { code: 0 }, "rtit record");
    rec
}

/// `rtit replay --no-gdb --port 0`, its stderr kept line by line; killed when dropped.
struct Server {
    child: Child,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(rec: &Path, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rtit"))
            .args(["replay", "--no-gdb", "--port", "0"])
            .args(extra)
            .arg(rec)
            .stderr(Stdio::piped())
            .spawn()
            .expect("rtit replay");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let port = loop {
            let line = lines.next().expect("rtit replay says where it listens").expect("utf-8");
            if let Some(addr) = line.strip_prefix("listening on ") {
                break addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
            }
        };
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().expect("log").push(line);
            }
        });
        Self { child, port, log }
    }

    /// Waits for a line of the server's log containing `text`.
    fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + HANG;
        loop {
            let log = self.log.lock().expect("log").clone();
            if let Some(line) = log.iter().find(|l| l.contains(text)) {
                return line.clone();
            }
            assert!(Instant::now() < deadline, "no `{text}` in the server's log: {log:#?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn gdb_command(&self, exe: &Path, commands: &[&str]) -> Command {
        let mut gdb = Command::new("gdb");
        gdb.args(["-batch", "-nx"])
            .arg("-ex")
            .arg(format!("file {}", exe.display()))
            .arg("-ex")
            .arg(format!("target remote :{}", self.port));
        for c in commands {
            gdb.arg("-ex").arg(c);
        }
        gdb.stdin(Stdio::null());
        gdb
    }

    /// Runs gdb in batch mode with `commands` after connecting; returns its output.
    fn gdb(&self, exe: &Path, commands: &[&str]) -> String {
        output(self.gdb_command(exe, commands).output().expect("gdb is needed"))
    }

    /// The server's threads now.
    fn threads(&self) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("the server runs");
        status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("Threads")
    }

    fn connect(&self) -> TcpStream {
        let conn = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        conn.set_read_timeout(Some(HANG)).expect("timeout");
        conn
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn output(out: std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// Every `position N of 0..LAST` that `monitor when` printed.
fn positions(out: &str) -> Vec<u64> {
    out.lines()
        .filter_map(|l| l.strip_prefix("position ")?.split_whitespace().next()?.parse().ok())
        .collect()
}

fn packet(body: &str) -> Vec<u8> {
    let sum = body.bytes().fold(0u8, |a, b| a.wrapping_add(b));
    format!("${body}#{sum:02x}").into_bytes()
}

/// Reads one packet (acknowledgements before it skipped), checks its checksum and returns
/// its body with run-length encoding expanded; `None` if the connection closed first.
fn read_packet(conn: &mut TcpStream) -> Option<String> {
    let mut byte = [0u8; 1];
    loop {
        if conn.read(&mut byte).expect("read") == 0 {
            return None;
        }
        if byte[0] == b'$' {
            break;
        }
        assert_eq!(byte[0], b'+', "only acknowledgements between packets");
    }
    let mut raw = Vec::new();
    loop {
        conn.read_exact(&mut byte).expect("a whole packet");
        if byte[0] == b'#' {
            break;
        }
        raw.push(byte[0]);
    }
    let mut sum = [0u8; 2];
    conn.read_exact(&mut sum).expect("checksum");
    let expected = raw.iter().fold(0u8, |a, &b| a.wrapping_add(b));
    assert_eq!(
        std::str::from_utf8(&sum).expect("hex"),
        format!("{expected:02x}"),
        "checksum"
    );
    // `c*N` repeats c N - 29 more times.
    let mut body = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'*' {
            let last = *body.last().expect("a repeat follows a character");
            body.extend(std::iter::repeat(last).take(usize::from(raw[i + 1] - 29)));
            i += 2;
        } else {
            body.push(raw[i]);
            i += 1;
        }
    }
    Some(String::from_utf8(body).expect("ASCII"))
}

/// An `m` reply as the protocol allows it: bytes in hex, or a lone error. Panics on anything
/// else (data followed by an error above all).
fn memory_reply(reply: &str) -> Result<Vec<u8>, String> {
    if reply.len() == 3 && reply.starts_with('E') && reply[1..].bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(reply.to_string());
    }
    assert!(
        reply.len() % 2 == 0 && reply.bytes().all(|b| b.is_ascii_hexdigit()),
        "neither hex data nor a lone error: {}…{}",
        &reply[..reply.len().min(40)],
        &reply[reply.len().saturating_sub(40)..]
    );
    Ok((0..reply.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&reply[i..i + 2], 16).expect("hex"))
        .collect())
}

/// Reads memory with one `m` packet on a raw connection.
fn read_memory(conn: &mut TcpStream, addr: u64, len: u64) -> Result<Vec<u8>, String> {
    conn.write_all(&packet(&format!("m{addr:x},{len:x}"))).expect("send");
    memory_reply(&read_packet(conn).expect("a reply"))
}

#[test]
fn a_second_client_is_refused_and_the_debugging_gdb_goes_on() {
    let rec = recording("busy");
    let exe = common::executable(&rec);
    let server = Server::start(&rec.dir, &[]);
    let dir = rec.dir.parent().expect("scratch").to_path_buf();
    let go_on = dir.join("go-on");
    // The first gdb stays attached until the test lets it go on.
    let wait = format!(
        "shell for i in $(seq 1200); do [ -e {} ] && break; sleep 0.05; done",
        go_on.display()
    );
    let first = server
        .gdb_command(&exe, &["monitor when", &wait, "stepi", "monitor when"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gdb");
    server.wait_for("gdb attached");

    let mut raw = server.connect();
    raw.write_all(&packet("qSupported:multiprocess+;swbreak+"))
        .expect("send");
    let reply = read_packet(&mut raw).expect("a reply");
    assert_eq!(reply, "E.rtit: another gdb is debugging this recording");
    assert_eq!(read_packet(&mut raw), None, "then closed");
    server.wait_for("refused 127.0.0.1:");

    let second = server.gdb(&exe, &["monitor when"]);
    assert!(
        second.contains("Remote failure reply: E.rtit: another gdb is debugging this recording"),
        "a second gdb is told why: {second}"
    );
    assert_eq!(positions(&second), [] as [u64; 0], "and gets nothing: {second}");

    std::fs::write(&go_on, "").expect("flag");
    let first = output(first.wait_with_output().expect("gdb"));
    assert_eq!(positions(&first), [0, 1], "the first gdb went on: {first}");
    assert!(!first.contains("Remote connection closed"), "{first}");
}

#[test]
fn a_silent_connection_delays_no_one_and_is_dropped() {
    let rec = recording("silent");
    let exe = common::executable(&rec);
    let server = Server::start(&rec.dir, &[]);
    let mut silent = server.connect();
    let out = server.gdb(&exe, &["stepi", "monitor when"]);
    assert_eq!(positions(&out), [1], "served while the silent one waits: {out}");
    // Had the gdb waited for the silent connection to be dropped, that would be closed by now.
    silent.set_nonblocking(true).expect("nonblocking");
    let pending = silent.read(&mut [0u8; 1]).map_err(|e| e.kind());
    assert_eq!(pending, Err(std::io::ErrorKind::WouldBlock), "still open");
    silent.set_nonblocking(false).expect("blocking");
    // rtit_stub::server::FIRST_PACKET_TIMEOUT later, it is closed.
    assert_eq!(silent.read(&mut [0u8; 1]).expect("closed, not reset"), 0);
    server.wait_for("sent nothing in 10 s");
    let out = server.gdb(&exe, &["monitor when"]);
    assert_eq!(positions(&out), [0], "{out}");
}

/// Issue 38: 70 connections that sent nothing locked a real gdb out ("Connection reset by
/// peer") until they timed out, 10 s later: every connection past the 64th waiting was
/// refused, gdb's too. Now the one silent longest makes room for each newcomer.
#[test]
fn a_crowd_of_silent_connections_cannot_lock_a_gdb_out() {
    const WAITING: usize = 64;
    let rec = recording("crowd");
    let exe = common::executable(&rec);
    let server = Server::start(&rec.dir, &[]);
    let mut crowd: Vec<TcpStream> = (0..100).map(|_| server.connect()).collect();
    let out = server.gdb(&exe, &["stepi", "monitor when"]);
    assert_eq!(positions(&out), [1], "served despite the crowd: {out}");
    // A thread for each waiting connection at most (and a few of the server's own): the
    // crowd cannot exhaust threads either.
    let threads = server.threads();
    assert!(threads <= WAITING + 8, "{threads} threads");
    // 100 silent ones and gdb came in order: the first 37 made room, oldest first.
    let dropped = crowd.len() + 1 - WAITING;
    for (n, conn) in crowd.iter_mut().enumerate() {
        conn.set_nonblocking(true).expect("nonblocking");
        let state = match conn.read(&mut [0u8; 1]) {
            Ok(0) => "closed",
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => "open",
            other => panic!("connection {n}: {other:?}"),
        };
        let expected = if n < dropped { "closed" } else { "open" };
        assert_eq!(state, expected, "connection {n} of the crowd");
    }
    // Each drop is said, with who was dropped, why and for whom.
    let last = crowd[dropped - 1].local_addr().expect("address");
    server.wait_for(&format!("dropped {last}: it had sent nothing in "));
    let said: Vec<String> = server
        .log
        .lock()
        .expect("log")
        .iter()
        .filter(|l| {
            l.contains(&format!(
                "the longest of the {WAITING} connections waiting to say something"
            ))
        })
        .cloned()
        .collect();
    assert_eq!(said.len(), dropped, "{said:#?}");
    let first = crowd[0].local_addr().expect("address");
    let newcomer = crowd[WAITING].local_addr().expect("address");
    assert!(
        said[0].starts_with(&format!("rtit: dropped {first}: "))
            && said[0].ends_with(&format!("and {newcomer} connected")),
        "{said:#?}"
    );
}

/// Memory reads of 1 MiB and more from a raw client: each reply comes, is the known prefix in
/// hex or a lone error, and its bytes are the memory's.
#[test]
fn huge_memory_reads_answer_a_known_prefix_or_an_error() {
    use object::{Object, ObjectSegment, ObjectSymbol};
    let rec = recording("huge");
    let server = Server::start(&rec.dir, &[]);
    let mut raw = server.connect();
    let mib = 1 << 20;

    // Code: read-only image bytes, compared with the executable's own file.
    let bytes = std::fs::read(common::executable(&rec)).expect("exe");
    let elf = object::File::parse(&*bytes).expect("ELF");
    let main = elf.symbols().find(|s| s.name() == Ok("main")).expect("main").address();
    let segment = elf
        .segments()
        .find(|s| (s.address()..s.address() + s.size()).contains(&main))
        .expect("main's segment");
    let file = &segment.data().expect("data")[(main - segment.address()) as usize..];
    let code = read_memory(&mut raw, main, mib).expect("code is known");
    assert!(!code.is_empty() && code.len() <= mib as usize);
    let n = code.len().min(file.len());
    assert_eq!(code[..n], file[..n], "the executable's bytes");
    assert_eq!(read_memory(&mut raw, main + 100, 16), Ok(code[100..116].to_vec()));
    // The longest address a 4096-byte packet holds (zeros in front) leaves gdbstub the
    // smallest buffer to read into: the same answer.
    let padded = format!("m{main:0>4084x},100000");
    raw.write_all(&packet(&padded)).expect("send");
    assert_eq!(packet(&padded).len(), 4096);
    assert_eq!(memory_reply(&read_packet(&mut raw).expect("a reply")), Ok(code.clone()));

    // The top of the stack: known from the snapshot up to its last byte, nothing after it.
    let stack = rec
        .snapshot(false)
        .expect("snapshot")
        .into_iter()
        .max_by_key(|(start, _)| *start)
        .expect("the stack is the highest region");
    let top = stack.0 + stack.1.len() as u64;
    let tail = read_memory(&mut raw, top - 100, mib).expect("known up to the top");
    assert_eq!(
        tail,
        stack.1[stack.1.len() - 100..],
        "exactly the last 100 bytes, no more"
    );
    let near_top = read_memory(&mut raw, top - 60, 40).expect("known");
    assert_eq!(near_top, tail[40..80], "the same bytes at the same addresses");

    // Nothing known: an error, for any length.
    for len in [1, 0x1000, mib, u64::MAX] {
        assert!(read_memory(&mut raw, 0x10, len).is_err(), "{len:#x}");
    }
    assert!(read_memory(&mut raw, top, mib).is_err(), "past the top of the stack");
    // The connection is still fine.
    raw.write_all(&packet("?")).expect("send");
    let stop = read_packet(&mut raw).expect("a stop reply");
    assert!(stop.starts_with('T') || stop.starts_with('S'), "{stop}");
}

#[test]
fn every_way_of_leaving_lets_the_next_gdb_in() {
    let rec = recording("leave");
    let exe = common::executable(&rec);
    let server = Server::start(&rec.dir, &[]);
    let out = server.gdb(&exe, &["stepi", "monitor when"]);
    assert_eq!(positions(&out), [1], "{out}");
    server.wait_for("detached");
    // A client that goes away without a word, and one in the middle of a packet.
    drop(server.connect());
    let mut raw = server.connect();
    raw.write_all(&packet("qSupported:swbreak+")).expect("send");
    assert!(read_packet(&mut raw).expect("a reply").contains("PacketSize="));
    raw.write_all(b"$m40").expect("half a packet");
    drop(raw);
    server.wait_for("closed the connection");
    let out = server.gdb(&exe, &["stepi", "stepi", "monitor when", "kill"]);
    assert_eq!(positions(&out), [2], "a new gdb starts at 0: {out}");
    server.wait_for("killed the program");
    let out = server.gdb(&exe, &["monitor when"]);
    assert_eq!(positions(&out), [0], "and after `kill`: {out}");
}

/// gdb's backtrace lines (`#N ...`) between two `echo` marks.
fn frames_between(out: &str, from: &str, to: &str) -> Vec<String> {
    let start = out.find(from).unwrap_or_else(|| panic!("no {from}: {out}"));
    let end = out[start..].find(to).unwrap_or_else(|| panic!("no {to}: {out}")) + start;
    out[start..end]
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// `rtit replay` starting gdb (here a gdb in batch mode with commands after rtit's own
/// arguments): `monitor goto N` then `bt` shows what stepping to N shows.
#[test]
fn monitor_goto_then_bt_in_the_launched_gdb_equals_stepping_there() {
    let rec = recording("goto");
    let truth = rec.truth().expect("truth").expect("truth");
    // The deepest fib call (fib(1) from fib(2) … from main), at its first instruction.
    let fib = {
        use object::{Object, ObjectSymbol};
        let bytes = std::fs::read(common::executable(&rec)).expect("exe");
        let elf = object::File::parse(&*bytes).expect("ELF");
        let sym = elf.symbols().find(|s| s.name() == Ok("fib")).expect("fib");
        sym.address()
    };
    let n = (0..truth.len())
        .filter(|&p| truth[p] == fib)
        .nth(463)
        .expect("464 calls");
    let dir = rec.dir.parent().expect("scratch").to_path_buf();
    let wrapper = dir.join("gdb");
    let commands = [
        "show remotetimeout".to_string(),
        "bt".to_string(),
        "echo =goto=\\n".to_string(),
        format!("monitor goto {n}"),
        "bt".to_string(),
        "echo =stepped=\\n".to_string(),
        "monitor goto 0".to_string(),
        format!("stepi {n}"),
        "monitor when".to_string(),
        "bt".to_string(),
        "echo =end=\\n".to_string(),
    ];
    let script = format!(
        "#!/bin/sh\nexec gdb -nx -batch \"$@\" {}\n",
        commands
            .iter()
            .map(|c| format!("-ex '{c}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    std::fs::write(&wrapper, script).expect("wrapper");
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&wrapper, mode).expect("chmod");
    let mut replay = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["replay", "--port", "0", "--gdb"])
        .arg(&wrapper)
        .arg(&rec.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rtit replay");
    let deadline = Instant::now() + HANG;
    while replay.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = replay.kill();
            panic!("rtit replay with gdb did not end");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = output(replay.wait_with_output().expect("output"));
    assert!(out.contains("is 60."), "the launched gdb waits 60 s for answers: {out}");
    let gone_to = frames_between(&out, "=goto=", "=stepped=");
    let stepped = frames_between(&out, "=stepped=", "=end=");
    assert_eq!(positions(&out), [n as u64], "{out}");
    assert_eq!(stepped.len(), 12, "fib × 11 and main: {out}");
    assert_eq!(gone_to, stepped, "{out}");
    assert!(
        !out.contains("a gdb not started by"),
        "the launched gdb flushes its caches itself: {out}"
    );
}

#[test]
fn monitor_info_and_help_read_as_text() {
    let rec = recording("info");
    let exe = common::executable(&rec);
    let server = Server::start(&rec.dir, &[]);
    let out = server.gdb(&exe, &["monitor info", "monitor help", "monitor goto 1"]);
    assert!(
        out.contains("(a gdb not started by `rtit replay`: run `maint flush register-cache`"),
        "another gdb is told to flush its caches after a goto: {out}"
    );
    let info: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("recording "))
        .take_while(|l| !l.starts_with("rtit monitor commands:"))
        .collect();
    assert!(info.len() >= 5, "{out}");
    assert!(info.contains(&"ended     exited with status 0"), "{out}");
    assert!(info.iter().all(|l| !l.contains('{')), "no Rust debug text: {out}");
    assert!(
        !info.iter().any(|l| l.starts_with("warning")),
        "a complete recording: {out}"
    );
    assert!(out.lines().any(|l| l == "rtit monitor commands:"), "{out}");
    assert!(!out.lines().any(|l| l.trim() == "\\"), "no stray backslash: {out}");
}

/// A recording whose trace was cut in half, replayed with --partial: `monitor info` says so,
/// and values at its last position come from the start and the semantics (the end snapshot
/// is of a later position), as in the whole recording.
#[test]
fn a_cut_recording_says_so_and_keeps_its_values() {
    let rec = recording("cut");
    let exe = common::executable(&rec);
    let cut = rec.dir.parent().expect("scratch").join("cut");
    std::fs::create_dir_all(cut.join("images")).expect("dir");
    for entry in walk(&rec.dir) {
        let to = cut.join(entry.strip_prefix(&rec.dir).expect("inside"));
        std::fs::copy(&entry, &to).expect("copy");
    }
    let trace = std::fs::read(rec.dir.join("trace.rtit")).expect("trace");
    std::fs::write(cut.join("trace.rtit"), &trace[..trace.len() / 2]).expect("cut");
    let partial = Server::start(&cut, &["--partial"]);
    let at_end = ["monitor info", "continue", "monitor when", "p/x $rsp", "p/x $rbx"];
    let out = partial.gdb(&exe, &at_end);
    let warning = out
        .lines()
        .find(|l| l.starts_with("warning   "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(warning.contains("incomplete"), "{warning}");
    let last = positions(&out)[0];
    assert!(last > 100 && last + 100 < rec.manifest.instructions, "cut: {out}");
    let values =
        |out: &str| -> Vec<String> { out.lines().filter(|l| l.starts_with('$')).map(str::to_string).collect() };
    let whole = Server::start(&rec.dir, &[]);
    let goto = format!("monitor goto {last}");
    let flush = ["maint flush register-cache", "maint flush dcache"];
    let there = whole.gdb(&exe, &[&goto, flush[0], flush[1], "p/x $rsp", "p/x $rbx"]);
    assert_eq!(values(&there).len(), 2, "{there}");
    assert!(
        values(&there).iter().all(|v| v.contains("0x")),
        "known in the whole recording: {there}"
    );
    assert_eq!(values(&out), values(&there), "{out}\n{there}");
}

/// The files under a directory, recursively.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

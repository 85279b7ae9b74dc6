//! Replay at scale (issue 19): recordings of real programs under the qemu backend
//! (`sha256sum`, a hot loop; `python3` serialising JSON, code spread over the interpreter and
//! libc) of about 1e7, 1e8 and 1e9 instructions, and for each:
//! - from the start of `rtit replay --no-gdb` (a raw client in place of gdb): the time until
//!   it listens, until it answered the client's first questions (`?`, `g`), and until a
//!   first `stepi` was answered (the history decoded in the background is there), with the
//!   server's peak memory: first with nothing stored, then again once the timeline it
//!   decoded is stored next to the recording (when decoding took over a second);
//! - the decode throughput (the timeline built from the trace) on one core and on all;
//! - on a session opened in a process of its own (so its peak memory is its own):
//!   `continue` across the whole history (a breakpoint that never hits), `reverse-continue`
//!   back to the start, `reverse-stepi` at the end with the registers gdb then reads, and a
//!   `bt`'s reads (registers and 256 bytes of stack) at random positions, first while the
//!   values are still being worked out in the background, then once they are final; how
//!   long the values take to be final and the peak memory then.
//!
//! Each measurement is taken three times and given as a range. Needs qemu-x86_64 and a
//! release build of the plugin (`cargo build --release`). Run with
//! `cargo bench --bench replay_scale`; `RTIT_SCALE_SIZES=1e7,1e8` picks sizes and
//! `RTIT_SCALE_PROGRAMS=python3` programs.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use rtit_replay_core::recording::Recording;
use rtit_replay_core::session::Session;
use rtit_replay_core::timeline::cache;
use rtit_replay_core::timeline::parallel::{self, Split};

#[path = "common/memory.rs"]
mod memory;
#[path = "common/recordings.rs"]
mod recordings;

use memory::peak_mib;

/// What [`listen`] measured: seconds from the start of `rtit replay --no-gdb` until it
/// listens, until it answered a client's first questions (`?`, `g`: where it stopped and the
/// registers, as gdb's first packets), until a first `stepi` was answered (the history is
/// there), and the server's peak memory by then (or once the timeline it stores is there).
struct Listened {
    listening: f64,
    answers: f64,
    ready: f64,
    peak: f64,
}

/// One packet to the server and its reply (acknowledgements left out).
fn ask(conn: &mut std::net::TcpStream, packet: &str) -> String {
    use std::io::{Read, Write};
    let sum = packet.bytes().fold(0u8, |a, b| a.wrapping_add(b));
    conn.write_all(format!("${packet}#{sum:02x}").as_bytes()).expect("send");
    let (mut reply, mut byte, mut hashes) = (Vec::new(), [0u8], None);
    while hashes != Some(0) {
        conn.read_exact(&mut byte).expect("a reply");
        match (byte[0], hashes) {
            (b'#', None) => hashes = Some(2),
            (_, Some(n)) => hashes = Some(n - 1),
            (b'+' | b'$', None) if reply.is_empty() => {}
            (b, None) => reply.push(b),
        }
    }
    conn.write_all(b"+").expect("ack");
    String::from_utf8_lossy(&reply).into_owned()
}

/// Runs `rtit replay --no-gdb` on `rec` as a client would meet it ([`Listened`]); with
/// `keep`, the server is left running until the timeline it stores is there.
fn listen(rec: &Path, keep: bool) -> Listened {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["replay", "--no-gdb", "--port", "0"])
        .arg(rec)
        .stderr(Stdio::piped())
        .spawn()
        .expect("rtit replay");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("rtit replay says where it listens").expect("utf-8");
        if let Some(addr) = line.strip_prefix("listening on ") {
            break addr.to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let listening = started.elapsed().as_secs_f64();
    let mut conn = std::net::TcpStream::connect(&addr).expect("connect");
    ask(&mut conn, "?");
    let regs = ask(&mut conn, "g");
    assert!(regs.len() > 100, "registers: {regs}");
    let answers = started.elapsed().as_secs_f64();
    let stop = ask(&mut conn, "s");
    assert!(stop.starts_with('T') || stop.starts_with('S'), "stepi: {stop}");
    let ready = started.elapsed().as_secs_f64();
    drop(conn);
    let stored = rec.join(cache::FILE);
    let storing = || {
        std::fs::read_dir(rec)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
    };
    while keep && !stored.exists() && storing() {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let peak = peak_mib(child.id());
    let _ = child.kill();
    let _ = child.wait();
    Listened {
        listening,
        answers,
        ready,
        peak,
    }
}

/// A `bt`'s questions at the current position: the registers gdb unwinds with and the stack.
fn backtrace_reads(s: &mut Session) -> usize {
    let mut known = 0;
    for r in ["rip", "rsp", "rbp", "rbx", "r12", "r13", "r14", "r15"] {
        known += usize::from(s.register(r).is_some());
    }
    if let Some(sp) = s.register("rsp") {
        known += s.read_memory_prefix(sp, 256).len();
    }
    known
}

/// Milliseconds `f` takes.
fn ms<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let t = Instant::now();
    let v = f();
    (t.elapsed().as_secs_f64() * 1e3, v)
}

/// The measurements on one session, in this process (run as a child of the bench).
fn one(rec: &Path) {
    let rec = Recording::open(rec).expect("recording");
    let (open, s) = ms(|| Session::open(rec).expect("session"));
    let mut s = s;
    let peak_open = peak_mib(std::process::id());
    let last = s.last();
    let never: HashSet<u64> = [1].into();
    let (cont, _) = ms(|| s.continue_forward(&never, || false));
    assert_eq!(s.position(), last);
    let (rcont, _) = ms(|| s.continue_backward(&never, || false));
    assert_eq!(s.position(), 0);
    s.set_position(last);
    let (rstepi, _) = ms(|| {
        s.step_backward();
        backtrace_reads(&mut s)
    });
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let mut random = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % (last + 1)
    };
    let mut early = 0.0_f64;
    for _ in 0..5 {
        s.set_position(random());
        early = early.max(ms(|| backtrace_reads(&mut s)).0);
    }
    let (fin, _) = ms(|| s.prepare(|_, _| {}));
    let mut late = 0.0_f64;
    for _ in 0..5 {
        s.set_position(random());
        late = late.max(ms(|| backtrace_reads(&mut s)).0);
    }
    let peak = peak_mib(std::process::id());
    println!(
        "{open} {peak_open} {cont} {rcont} {rstepi} {early} {} {late} {peak}",
        fin / 1e3
    );
}

/// `min–max` of a column.
fn range(v: &[f64], digits: usize) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.digits$}–{hi:.digits$}")
}

/// Instructions a second decoding the timeline on one core and on all, in this process.
fn throughput(rec: &Path) {
    let rec = Recording::open(rec).expect("recording");
    let space = rec.address_space().expect("images");
    let trace = rec.trace().expect("trace");
    let gaps = rec.gaps();
    let input = rec.decode_input(&trace, &space, &gaps);
    let mut rates = Vec::new();
    for split in [Split::sequential(), Split::all_cores()] {
        let (took, built) = ms(|| parallel::build(&input, split, &mut |_| {}));
        rates.push(built.timeline.len() as f64 / took / 1e3);
    }
    println!("{} {}", rates[0], rates[1]);
}

/// Runs this bench again as a child measuring `rec` (`what`: the environment variable that
/// says what to measure); the numbers it printed last.
fn child(what: &str, rec: &Path) -> Vec<f64> {
    let out = Command::new(std::env::current_exe().expect("the bench"))
        .env(what, rec)
        .output()
        .expect("the measuring child");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8_lossy(&out.stdout);
    let nums = line.lines().last().unwrap_or("");
    nums.split_whitespace().map(|v| v.parse().expect("a number")).collect()
}

fn main() {
    if let Ok(rec) = std::env::var("RTIT_SCALE_ONE") {
        return one(Path::new(&rec));
    }
    if let Ok(rec) = std::env::var("RTIT_SCALE_DECODE") {
        return throughput(Path::new(&rec));
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("replay_scale");
    std::fs::create_dir_all(&dir).expect("dir");
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/librtit_qemu_plugin.so");
    assert!(plugin.is_file(), "build the plugin first: cargo build --release");
    let sizes = std::env::var("RTIT_SCALE_SIZES").unwrap_or_else(|_| "1e7,1e8,1e9".into());
    let programs = std::env::var("RTIT_SCALE_PROGRAMS").unwrap_or_else(|_| "sha256sum,python3".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut decode_rows = Vec::new();
    println!(
        "| program | instructions | listening | first answers | history there | peak then | history there, timeline stored | peak then | continue, whole history | reverse-continue | reverse-stepi + regs | bt while values come | values final after | bt then | peak with final values |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for program in programs.split(',').map(str::trim) {
        for n in sizes
            .split(',')
            .map(|s| s.trim().parse::<f64>().expect("a size such as 1e8"))
        {
            let rec = recordings::recording(&dir, &plugin, program, n);
            let positions = Recording::open(&rec).expect("recording").manifest.instructions;
            let (mut first, mut again) = (Vec::new(), Vec::new());
            let mut cols: Vec<Vec<f64>> = vec![Vec::new(); 9];
            let mut rates: Vec<Vec<f64>> = vec![Vec::new(); 2];
            for _ in 0..3 {
                let _ = std::fs::remove_file(rec.join(cache::FILE));
                first.push(listen(&rec, true));
                if rec.join(cache::FILE).exists() {
                    again.push(listen(&rec, false));
                }
                for (c, v) in cols.iter_mut().zip(child("RTIT_SCALE_ONE", &rec)) {
                    c.push(v);
                }
                for (c, v) in rates.iter_mut().zip(child("RTIT_SCALE_DECODE", &rec)) {
                    c.push(v);
                }
            }
            let per = |mib: &[f64]| {
                let bytes: Vec<f64> = mib.iter().map(|m| m * f64::from(1 << 20) / positions as f64).collect();
                format!("{} MiB ({} B/insn)", range(mib, 0), range(&bytes, 2))
            };
            let col = |v: &[Listened], f: fn(&Listened) -> f64| v.iter().map(f).collect::<Vec<f64>>();
            let (again_secs, again_peak) = if again.is_empty() {
                ("not stored (decoded in under 1 s)".to_string(), "".to_string())
            } else {
                (
                    format!("{} s", range(&col(&again, |l| l.ready), 2)),
                    per(&col(&again, |l| l.peak)),
                )
            };
            println!(
                "| {program} | {positions} | {} s | {} s | {} s | {} | {again_secs} | {again_peak} | {} ms | {} ms | {} ms | {} ms | {} s | {} ms | {} |",
                range(&col(&first, |l| l.listening), 2),
                range(&col(&first, |l| l.answers), 2),
                range(&col(&first, |l| l.ready), 2),
                per(&col(&first, |l| l.peak)),
                range(&cols[2], 1),
                range(&cols[3], 1),
                range(&cols[4], 2),
                range(&cols[5], 1),
                range(&cols[6], 1),
                range(&cols[7], 1),
                per(&cols[8]),
            );
            decode_rows.push(format!(
                "| {program} | {positions} | {} M/s | {} M/s |",
                range(&rates[0], 0),
                range(&rates[1], 0)
            ));
        }
    }
    println!();
    println!("| program | instructions | decode, one core | decode, {cores} cores |");
    println!("|---|---|---|---|");
    for row in decode_rows {
        println!("{row}");
    }
}

//! `rtit replay` end to end with a real gdb: recordings of the examples are served with
//! `rtit replay --no-gdb --port 0` and driven by `gdb -batch`; where gdb stops is checked against
//! the recorder's truth.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rtit_replay_core::recording::{EndState, Recording};

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("replay_gdb").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Compiles examples/c/NAME.c and records it from main, with the truth.
fn recording(name: &str, dynamic: bool) -> Recording {
    let dir = scratch(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/c/{name}.c"));
    let exe = dir.join(name);
    let mut gcc = Command::new("gcc");
    gcc.args(["-O1", "-g", "-o"]).arg(&exe).arg(&src);
    if !dynamic {
        gcc.arg("-static");
    }
    assert!(gcc.status().expect("gcc is needed").success());
    let out = dir.join("rec");
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "step", "--truth", "--start", "main", "--out"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.code().is_some(), "rtit record ran");
    Recording::open(&out).expect("a recording")
}

/// `rtit replay --no-gdb --port 0`, killed when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(rec: &Recording) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rtit"))
            .args(["replay", "--no-gdb", "--port", "0"])
            .arg(&rec.dir)
            .stderr(Stdio::piped())
            .spawn()
            .expect("rtit replay");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let port = loop {
            let line = lines.next().expect("rtit replay says where it listens").expect("utf-8");
            if let Some(addr) = line.strip_prefix("listening on ") {
                break addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
            }
        };
        // Keep draining stderr so the server never blocks on it.
        std::thread::spawn(move || for _ in lines {});
        Self { child, port }
    }

    /// Runs gdb in batch mode with `commands` after connecting; returns its output.
    fn gdb(&self, exe: Option<&Path>, commands: &[&str]) -> String {
        let mut gdb = Command::new("gdb");
        gdb.args(["-batch", "-nx"]);
        if let Some(exe) = exe {
            gdb.arg("-ex").arg(format!("file {}", exe.display()));
        }
        gdb.arg("-ex").arg(format!("target remote :{}", self.port));
        for c in commands {
            gdb.arg("-ex").arg(c);
        }
        let out = gdb.output().expect("gdb is needed (`.ci/run` installs it)");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn executable(rec: &Recording) -> PathBuf {
    let image = rec
        .manifest
        .images
        .iter()
        .find(|i| !i.path.starts_with('['))
        .expect("an ELF image");
    rec.dir.join(&image.file)
}

/// Every `position N of M` that `monitor when` printed.
fn positions(out: &str) -> Vec<u64> {
    out.lines()
        .filter_map(|l| l.strip_prefix("position ")?.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Every value `p/x $pc` printed.
fn pcs(out: &str) -> Vec<u64> {
    out.lines()
        .filter_map(|l| {
            let (_, v) = l.split_once(" = 0x")?;
            u64::from_str_radix(v.trim(), 16).ok()
        })
        .collect()
}

fn symbol(rec: &Recording, name: &str) -> u64 {
    use object::{Object, ObjectSymbol};
    let bytes = std::fs::read(executable(rec)).expect("exe");
    let file = object::File::parse(&*bytes).expect("ELF");
    let sym = file.symbols().find(|s| s.name() == Ok(name)).expect("symbol");
    sym.address()
}

#[test]
fn breakpoints_forwards_and_backwards_match_the_truth() {
    let rec = recording("recursion", false);
    let truth = rec.truth().expect("truth").expect("truth");
    let fib = symbol(&rec, "fib");
    let hits: Vec<u64> = (0..truth.len() as u64).filter(|&p| truth[p as usize] == fib).collect();
    let server = Server::start(&rec);
    let exe = executable(&rec);
    let when = "monitor when";
    let pc = "p/x $pc";
    let out = server.gdb(
        Some(&exe),
        &[
            when,
            pc,
            "break fib",
            "continue",
            when,
            pc,
            "continue",
            when,
            "reverse-continue",
            when,
            "reverse-stepi",
            when,
            pc,
            "stepi",
            when,
            pc,
            "x/i $pc",
            "delete",
            "continue",
            when,
            "reverse-continue",
            when,
            pc,
        ],
    );
    let last = truth.len() as u64 - 1;
    assert_eq!(
        positions(&out),
        [0, hits[0], hits[1], hits[0], hits[0] - 1, hits[0], last, 0],
        "{out}"
    );
    let p = pcs(&out);
    assert_eq!(p, [truth[0], fib, truth[hits[0] as usize - 1], fib, truth[0]], "{out}");
    assert!(out.contains("=> 0x"), "x/i $pc: {out}");
    assert_eq!(
        out.matches("No more reverse-execution history").count(),
        2,
        "both ends: {out}"
    );
}

#[test]
fn a_crash_stops_with_sigsegv_at_the_faulting_instruction() {
    let rec = recording("crash", false);
    let EndState::Signaled { ip: Some(ip), .. } = &rec.manifest.end else {
        panic!("{:?}", rec.manifest.end)
    };
    let fault = u64::from_str_radix(ip.trim_start_matches("0x"), 16).expect("hex");
    let server = Server::start(&rec);
    let out = server.gdb(
        Some(&executable(&rec)),
        &["continue", "p/x $pc", "reverse-stepi", "monitor when"],
    );
    assert!(out.contains("Program received signal SIGSEGV"), "{out}");
    assert_eq!(pcs(&out).first(), Some(&fault), "{out}");
    let truth = rec.truth().expect("truth").expect("truth");
    assert_eq!(
        positions(&out),
        [truth.len() as u64 - 1],
        "one step back: the last retired instruction"
    );
}

#[test]
fn registers_are_known_at_the_start_and_unavailable_elsewhere() {
    let rec = recording("goto", false);
    let rsp = u64::from_str_radix(rec.manifest.registers_start["rsp"].trim_start_matches("0x"), 16).expect("hex");
    let server = Server::start(&rec);
    let out = server.gdb(
        Some(&executable(&rec)),
        &["p/x $rsp", "stepi", "stepi", "p $rax", "p/x $pc"],
    );
    assert_eq!(pcs(&out).first(), Some(&rsp), "{out}");
    assert!(
        out.contains("<unavailable>"),
        "rax in the middle of the history is unknown: {out}"
    );
}

#[test]
fn disconnect_and_reconnect() {
    let rec = recording("dispatch", false);
    let server = Server::start(&rec);
    let exe = executable(&rec);
    for _ in 0..2 {
        let out = server.gdb(Some(&exe), &["stepi", "stepi", "monitor when"]);
        assert_eq!(positions(&out), [2], "each connection starts at position 0: {out}");
    }
    let help = server.gdb(Some(&exe), &["monitor help"]);
    assert!(help.contains("monitor goto N"), "{help}");
    let insns = server.gdb(Some(&exe), &["monitor insns 2"]);
    assert!(insns.contains("=>") && insns.contains("main"), "{insns}");
}

/// A plain gdb with no file finds the executable and the shared objects from the recording
/// (exec-file, host I/O, auxv, SVR4 library list), relocates the PIE and breaks in libc.
#[test]
fn plain_gdb_finds_the_program_and_its_libraries() {
    let rec = recording("dynamic", true);
    let server = Server::start(&rec);
    let out = server.gdb(
        None,
        &[
            "info symbol $pc",
            "info sharedlibrary",
            "break clock_gettime",
            "continue",
            "monitor when",
        ],
    );
    assert!(out.contains("main in section .text"), "{out}");
    assert!(out.lines().any(|l| l.contains("libc.so") && l.contains("Yes")), "{out}");
    assert!(out.contains("Breakpoint 1, ") && out.contains("clock_gettime"), "{out}");
    let truth = rec.truth().expect("truth").expect("truth");
    let stop = positions(&out)[0] as usize;
    assert!(stop > 0 && stop < truth.len(), "{out}");
}

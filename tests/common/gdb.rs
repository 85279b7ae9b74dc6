//! A replay server and a real gdb driven against it, and reading what gdb printed.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use rtit_replay_core::recording::Recording;

/// `rtit replay --no-gdb --port 0`, killed when dropped.
pub struct Server {
    child: Child,
    port: u16,
}

impl Server {
    pub fn start(rec: &Recording) -> Self {
        Self::start_with(rec, &[])
    }

    /// [`Self::start`] with more options for `rtit replay`.
    pub fn start_with(rec: &Recording, options: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rtit"))
            .args(["replay", "--no-gdb", "--port", "0"])
            .args(options)
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

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's peak resident memory so far (VmHWM), in KiB.
    pub fn peak_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("the server runs");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmHWM")
    }

    /// Runs gdb in batch mode with `commands` after connecting; returns its output.
    pub fn gdb(&self, exe: Option<&Path>, commands: &[&str]) -> String {
        let mut gdb = Command::new("gdb");
        gdb.args(["-batch", "-nx"]);
        if let Some(exe) = exe {
            gdb.arg("-ex").arg(format!("file {}", exe.display()));
        }
        gdb.arg("-ex").arg(format!("target remote :{}", self.port));
        for c in commands {
            gdb.arg("-ex").arg(c);
        }
        interleaved(&mut gdb)
    }
}

/// Runs `cmd` (gdb) with its standard output and error into one file, so what it printed is
/// in the order it printed it, and returns that.
pub fn interleaved(cmd: &mut Command) -> String {
    static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("rtit-test-gdb-{}-{n}.txt", std::process::id()));
    let file = std::fs::File::create(&path).expect("a temporary file");
    let status = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("clone"))
        .stderr(file)
        .status()
        .expect("gdb is needed (`.ci/run` installs it)");
    let out = std::fs::read_to_string(&path).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    assert!(status.code().is_some(), "gdb ran: {out}");
    out
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// gdb's backtrace lines (`#N ...`).
pub fn frames(out: &str) -> Vec<String> {
    out.lines().filter(|l| l.starts_with('#')).map(str::to_string).collect()
}

/// The library (or function) of each frame line of a `bt`: the part that is the same in a
/// native run and under QEMU, which loads libraries elsewhere.
pub fn frame_places(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| match l.split_once(" from ") {
            // By file name up to `.so`: native gdb names the loader's path
            // (/lib/…/libffi.so.8), the recording the file it resolved to (libffi.so.8.1.2).
            Some((_, lib)) => {
                let name = lib.rsplit('/').next().unwrap_or(lib);
                name.split(".so").next().unwrap_or(name).to_string()
            }
            None => {
                let rest = l.split_once(' ').map_or(l, |(_, r)| r.trim_start());
                let rest = rest.split_once(" in ").map_or(rest, |(_, r)| r);
                rest.split_whitespace().next().unwrap_or("").to_string()
            }
        })
        .collect()
}

/// The function of each frame of a `bt` (addresses and arguments differ between a native run
/// and one under QEMU, which loads the program elsewhere).
pub fn frame_functions(out: &str) -> Vec<String> {
    frames(out)
        .iter()
        .map(|f| {
            let rest = f.split_once("  ").map_or(f.as_str(), |(_, r)| r);
            let rest = rest.split_once(" in ").map_or(rest, |(_, r)| r);
            rest.split_whitespace().next().unwrap_or("").to_string()
        })
        .collect()
}

/// What native gdb shows where `python3 -c script` crashes: the first argument and 7 frames.
pub fn native_python3_crash(script: &str) -> String {
    let native = Command::new("gdb")
        .args([
            "-batch",
            "-nx",
            "-ex",
            "run",
            "-ex",
            "p/x $rdi",
            "-ex",
            "bt 7",
            "-ex",
            "p/x $eflags & 0x10000",
        ])
        .args(["--args", "/usr/bin/python3", "-c", script])
        .output()
        .expect("gdb");
    String::from_utf8_lossy(&native.stdout).into_owned() + &String::from_utf8_lossy(&native.stderr)
}

/// Checks that a replay of python3's ctypes crash (`continue`, `p/x $rdi`, `p/x $rsp`,
/// `bt 7`) shows the NULL passed to strlen, the stack pointer, and native gdb's callers.
pub fn assert_same_python3_crash(replayed: &str, native: &str) {
    assert!(replayed.contains("SIGSEGV"), "{replayed}");
    assert!(native.contains("$1 = 0x0"), "native: {native}");
    assert!(replayed.contains("$1 = 0x0"), "the NULL passed to strlen: {replayed}");
    assert!(replayed.contains("$2 = 0x"), "the stack pointer: {replayed}");
    // Frame 0 is glibc's strlen of each CPU (AVX2 under QEMU, maybe EVEX natively); the
    // callers are the same libraries in the same order.
    let (want, got) = (frame_places(native), frame_places(replayed));
    assert!(want.len() >= 7, "native: {native}");
    assert!(got.len() >= 7, "{replayed}");
    assert!(got[0].starts_with("__strlen_"), "{replayed}");
    assert_eq!(got[1..], want[1..], "replayed:\n{replayed}\nnative:\n{native}");
}

/// The values gdb printed (`$N = VALUE`), in order.
pub fn printed(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.starts_with('$'))
        .filter_map(|l| l.split_once(" = ").map(|(_, v)| v.trim().to_string()))
        .collect()
}

/// What native gdb prints of `$rdi` at each of `exe`'s four hits of `break add`
/// (examples/c/workers.c), sorted.
pub fn native_worker_arguments(exe: &Path) -> Vec<String> {
    let mut native = Command::new("gdb");
    native.args(["-batch", "-nx"]).arg(exe);
    for c in ["break add", "run"].into_iter().chain(["p $rdi", "continue"].repeat(4)) {
        native.arg("-ex").arg(c);
    }
    let mut values = printed(&interleaved(&mut native));
    values.sort();
    values
}

//! `rtit replay` end to end with a real gdb: recordings of the examples are served with
//! `rtit replay --no-gdb --port 0` and driven by `gdb -batch`; where gdb stops is checked against
//! the recorder's truth.

mod common;

use common::gdb::{frames, Server};

use std::path::Path;
use std::process::{Command, Stdio};

use rtit_replay_core::recording::{EndState, Recording};
use rtit_replay_core::state::vector::named::Named;

/// Compiles examples/c/NAME.c and records it from main, with the truth.
fn recording(name: &str, dynamic: bool) -> Recording {
    // Tests run in parallel: each recording gets its own directory.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = common::scratch("replay_gdb", &format!("{name}-{n}"));
    let flags: &[&str] = if dynamic { &[] } else { &["-static"] };
    let exe = common::gcc(&format!("examples/c/{name}.c"), flags, &dir);
    common::record_from_main(&exe, &dir.join("rec"))
}

/// Every `position N of 0..LAST` that `monitor when` printed.
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
    let bytes = std::fs::read(common::executable(rec)).expect("exe");
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
    let exe = common::executable(&rec);
    let when = "monitor when";
    let pc = "p/x $pc";
    let last = truth.len() as u64 - 1;
    let past = format!("monitor goto {}", last + 1);
    let out = server.gdb(
        Some(&exe),
        &[
            when,
            &past,
            "monitor info",
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
    assert_eq!(
        positions(&out),
        [0, hits[0], hits[1], hits[0], hits[0] - 1, hits[0], last, 0],
        "{out}"
    );
    // Every reply names the history's positions alike, both ends included.
    assert!(out.contains(&format!("position 0 of 0..{last}\n")), "{out}");
    let refused = format!("goto: `{}` is not a position of 0..{last}\n", last + 1);
    assert!(out.contains(&refused), "{out}");
    let info = format!("history   {} positions, 0..{last}\n", last + 1);
    assert!(out.contains(&info), "{out}");
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
        Some(&common::executable(&rec)),
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
fn code_patched_in_place_gives_no_value_from_the_images_version() {
    // The image holds `add rax, 7`; the program ran `add rax, 42`. rax after it is 45, or
    // unknown, never the 10 the image's code would give.
    let dir = common::scratch("replay_gdb", "patch_text");
    let exe = common::gcc("tests/programs/patch_text.c", &["-static"], &dir);
    let rec = common::record_from_main(&exe, &dir.join("rec"));
    assert_eq!(rec.manifest.end, EndState::Exited { code: 0 }, "the patched code ran");
    let at = symbol(&rec, "after_add");
    let server = Server::start(&rec);
    let out = server.gdb(
        Some(&common::executable(&rec)),
        &[
            &format!("break *{at:#x}"),
            "continue",
            "p $rax",
            "monitor why-unknown rax",
        ],
    );
    let rax = out.lines().find(|l| l.starts_with("$1 = ")).unwrap_or_default();
    assert!(
        rax == "$1 = <unavailable>" || rax == "$1 = 45",
        "rax after the patched add: {rax}\n{out}"
    );
    assert!(out.contains("code in pages the program made writable"), "{out}");
}

#[test]
fn registers_are_known_where_the_state_layer_can_tell_and_unavailable_elsewhere() {
    let rec = recording("goto", false);
    let rsp = u64::from_str_radix(rec.manifest.registers_start["rsp"].trim_start_matches("0x"), 16).expect("hex");
    // The widest form of register 0 the recorder read at main: zmm0 with AVX-512, ymm0 with AVX.
    let (name, value) = ["zmm0", "ymm0", "xmm0"]
        .iter()
        .find_map(|n| rec.manifest.registers_start.get(*n).map(|v| (*n, v.clone())))
        .expect("vector register 0 at the start");
    let named = Named::parse(name).expect("a vector register");
    let bytes = named.value(&value).expect("hex");
    let lane = |i: usize| u128::from_le_bytes(bytes[16 * i..16 * i + 16].try_into().expect("16 bytes"));
    let server = Server::start(&rec);
    let out = server.gdb(
        Some(&common::executable(&rec)),
        &[
            "p/x $rsp",
            "stepi",
            "stepi",
            "p/x $rsp",
            "p/x $xmm0.uint128",
            "p/x $ymm0.v2_int128",
            "p/x $zmm0.v4_int128",
            "p/x $k1",
            "p/x $pc",
        ],
    );
    let p = pcs(&out);
    assert_eq!(p.first(), Some(&rsp), "{out}");
    assert!(
        p.len() >= 2 && p[1] <= rsp,
        "rsp two instructions later is known: {out}"
    );
    // Register 0 as the recorder read it at main (nothing since wrote it).
    assert!(
        out.contains(&format!("= {:#x}\n", lane(0))),
        "xmm0 = {:#x}: {out}",
        lane(0)
    );
    match named.bytes() {
        16 => assert!(
            out.contains("<unavailable>}"),
            "ymm0's upper half was not recorded: {out}"
        ),
        32 => assert!(
            out.contains(&format!("= {{{:#x}, {:#x}}}", lane(0), lane(1))),
            "ymm0: {out}"
        ),
        _ => {
            let zmm = format!("= {{{:#x}, {:#x}, {:#x}, {:#x}}}", lane(0), lane(1), lane(2), lane(3));
            assert!(out.contains(&zmm), "zmm0 {zmm}: {out}");
            let k1 = &rec.manifest.registers_start["k1"];
            assert!(out.contains(&format!("= {k1}\n")), "k1 = {k1}: {out}");
        }
    }
}

#[test]
fn monitor_why_unknown_names_what_lost_a_value() {
    // A static program from main: `cpuid` in the C library's start-up has run; at main every
    // register is known, and memory nobody recorded is unknown from the start.
    let rec = recording("goto", false);
    let server = Server::start(&rec);
    let out = server.gdb(
        Some(&common::executable(&rec)),
        &[
            "monitor why-unknown rsp",
            "monitor why-unknown 0x10",
            "monitor why-unknown xyz",
            "monitor why-unknown xmm1",
            "monitor why-unknown xmm32",
        ],
    );
    assert!(out.contains("rsp is known here: 0x"), "{out}");
    assert!(
        out.contains("the byte at 0x10 is unknown here (position 0)")
            && out.contains("going forwards:  not in the start state at position 0"),
        "{out}"
    );
    assert!(out.contains("`xyz` is not a register rtit tracks"), "{out}");
    // Vector registers too: recorded at main, so known there, lowest byte first.
    // The widest form the recorder read (zmm1, ymm1 or xmm1): its low 32 hex digits are xmm1.
    let widest = ["zmm1", "ymm1", "xmm1"]
        .iter()
        .find_map(|n| rec.manifest.registers_start.get(*n))
        .expect("register 1 at main");
    let digits = format!("{:0>128}", widest.trim_start_matches("0x"));
    let line = out
        .lines()
        .find(|l| l.starts_with("xmm1 is known here: "))
        .unwrap_or_else(|| panic!("{out}"));
    let start = "xmm1 is known here: ".len();
    let shown: String = line.as_bytes()[start..start + 32]
        .chunks(2)
        .rev()
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    assert_eq!(shown, digits[96..], "{out}");
    assert!(out.contains("`xmm32` is not a register rtit tracks"), "{out}");
}

/// The commands that stop at the deepest level of the recursion example: fib(1) called from
/// fib(2) … fib(11) from main (the 464th call of fib).
const DEEPEST: [&str; 3] = ["break fib", "ignore 1 463", "continue"];

#[test]
fn backtrace_at_the_deepest_recursion_matches_native_gdb() {
    let rec = recording("recursion", false);
    let exe = common::executable(&rec);
    // The program as it was recorded (the copy in the recording is not executable).
    let program = &rec.manifest.command[0];
    let native = Command::new("gdb")
        .args([
            "-batch",
            "-nx",
            "-ex",
            "break fib",
            "-ex",
            "ignore 1 463",
            "-ex",
            "run",
            "-ex",
            "bt",
        ])
        .arg(program)
        .output()
        .expect("gdb");
    let native = String::from_utf8_lossy(&native.stdout).into_owned() + &String::from_utf8_lossy(&native.stderr);
    let native_frames = frames(&native);
    assert_eq!(native_frames.len(), 12, "fib x 11 and main natively: {native}");
    let server = Server::start(&rec);
    let mut commands = DEEPEST.to_vec();
    commands.extend(["bt", "up 11", "p total", "down 11", "info frame", "p n"]);
    let out = server.gdb(Some(&exe), &commands);
    assert_eq!(
        frames(&out)[..12],
        native_frames[..],
        "the same frames, arguments and addresses: {out}"
    );
    assert!(out.contains("\nStack level 0, frame at 0x"), "info frame: {out}");
    assert!(out.contains(" = 1\n"), "n is 1 at the deepest level: {out}");
    assert!(out.contains("in main () at"), "up 11 reaches main: {out}");
}

/// gdb's `catch syscall` stops `continue` and `reverse-continue` at a system call's entry
/// and return, with what native gdb shows there: printf's write of "total 232\n" (a user's
/// check found catchpoints refused: "Your system does not support this type of catchpoint").
#[test]
fn catch_syscall_stops_at_a_calls_entry_and_return_both_ways() {
    let rec = recording("recursion", false);
    let exe = common::executable(&rec);
    let program = &rec.manifest.command[0];
    let look = ["p $rdx", "x/s $rsi"];
    let mut args = vec!["-batch", "-nx", "-ex", "catch syscall write", "-ex", "run"];
    for c in look.iter().chain(&["continue", "p $rax"]) {
        args.extend(["-ex", c]);
    }
    let native = Command::new("gdb").args(&args).arg(program).output().expect("gdb");
    let native = String::from_utf8_lossy(&native.stdout).into_owned() + &String::from_utf8_lossy(&native.stderr);
    let values = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with('$') || l.starts_with("0x"))
            .map(|l| l.split_once(['=', ':']).map_or("", |(_, v)| v).trim().to_string())
            .collect()
    };
    assert_eq!(values(&native), ["10", "\"total 232\\n\"", "10"], "natively: {native}");
    let server = Server::start(&rec);
    let mut commands = vec!["catch syscall write", "continue"];
    commands.extend(look);
    commands.extend(["continue", "p $rax", "reverse-continue", "p $rdx", "reverse-continue"]);
    // The call that ends the program never returned to be logged: its number is rax there.
    commands.extend(["delete", "catch syscall exit_group", "continue", "p $rdi"]);
    let out = server.gdb(Some(&exe), &commands);
    assert_eq!(values(&out)[..3], values(&native)[..], "{out}");
    let stops: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("Catchpoint 1 (call") || l.starts_with("Catchpoint 1 (returned"))
        .collect();
    assert_eq!(stops.len(), 3, "entry, return, entry again: {out}");
    assert!(stops[0].contains("(call to syscall write)"), "{out}");
    assert!(stops[1].contains("(returned from syscall write)"), "{out}");
    assert!(stops[2].contains("(call to syscall write)"), "{out}");
    assert_eq!(values(&out)[3], "10", "rdx at the entry again: {out}");
    assert!(
        out.contains("No more reverse-execution history"),
        "no write before it: {out}"
    );
    assert!(out.contains("Catchpoint 2 (call to syscall exit_group)"), "{out}");
    assert_eq!(values(&out)[4], "0", "exit_group(0): {out}");
}

/// gdb reads the process's `/proc` files at connection and for `info proc`: served from the
/// recording (the map as it stands at the position, the command, the executable and the
/// directory), where every replay warned "unable to open /proc file".
#[test]
fn info_proc_shows_the_recorded_process() {
    let rec = recording("recursion", false);
    let exe = common::executable(&rec);
    let server = Server::start(&rec);
    let out = server.gdb(Some(&exe), &["info proc", "info proc mappings"]);
    assert!(!out.contains("unable to open /proc file"), "{out}");
    let program = &rec.manifest.command[0];
    assert!(out.contains(&format!("exe = '{program}'")), "{out}");
    assert!(out.contains(&format!("cwd = '{}'", rec.manifest.cwd)), "{out}");
    assert!(out.contains(&format!("cmdline = '{program}'")), "{out}");
    let maps = rec.maps().expect("maps");
    let stack = maps
        .initial
        .iter()
        .find(|m| m.path.as_deref() == Some("[stack]"))
        .expect("a stack");
    let line = out
        .lines()
        .find(|l| l.trim_end().ends_with("[stack]"))
        .unwrap_or_else(|| panic!("the stack in the mappings: {out}"));
    assert!(
        line.contains(&format!("{:#x}", stack.start)) && line.contains(&format!("{:#x}", stack.end)),
        "{line}"
    );
    assert!(
        out.lines().any(|l| l.trim_end().ends_with(program.as_str())),
        "the executable mapped: {out}"
    );
}

#[test]
fn finish_reports_the_returned_value() {
    let rec = recording("recursion", false);
    let server = Server::start(&rec);
    let mut commands = DEEPEST.to_vec();
    commands.extend(["finish", "finish", "finish"]);
    let out = server.gdb(Some(&common::executable(&rec)), &commands);
    // fib(1) returns 1 into fib(2), which then calls fib(0): the breakpoint is hit again
    // unless deleted, so the first finish is the one checked, then the rest without it.
    let values: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("Value returned is "))
        .collect();
    assert_eq!(values.first(), Some(&"$1 = 1"), "{out}");
    let mut commands = DEEPEST.to_vec();
    commands.extend(["delete", "finish", "finish", "finish"]);
    let out = server.gdb(Some(&common::executable(&rec)), &commands);
    let values: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("Value returned is "))
        .collect();
    // fib(1) = 1, fib(2) = 1, fib(3) = 2.
    assert_eq!(values, ["$1 = 1", "$2 = 1", "$3 = 2"], "{out}");
}

#[test]
fn reverse_finish_returns_to_the_call_site() {
    let rec = recording("recursion", false);
    let server = Server::start(&rec);
    let mut commands = DEEPEST.to_vec();
    commands.extend([
        "monitor when",
        "delete",
        "reverse-finish",
        "monitor when",
        "x/i $pc",
        "bt 1",
    ]);
    let out = server.gdb(Some(&common::executable(&rec)), &commands);
    let p = positions(&out);
    assert_eq!(p.len(), 2, "{out}");
    assert_eq!(p[1], p[0] - 1, "one instruction back: the call: {out}");
    assert!(out.contains(":\tcall   0x"), "at a call instruction: {out}");
    assert!(
        out.contains("#0  0x") && out.contains("in fib (n=n@entry=2)"),
        "in the caller, fib(2): {out}"
    );
}

#[test]
fn reverse_next_steps_over_a_call_backwards() {
    let rec = recording("recursion", false);
    let server = Server::start(&rec);
    let out = server.gdb(
        Some(&common::executable(&rec)),
        &[
            "break 10",
            "continue",
            "reverse-next",
            "monitor when",
            "reverse-next",
            "monitor when",
            "bt",
            "p total",
            "p i",
            "next",
            "monitor when",
        ],
    );
    let p = positions(&out);
    assert_eq!(p.len(), 3, "{out}");
    // fib(11) makes 287 calls: stepping back over it skips thousands of instructions.
    assert!(p[0] - p[1] > 2000, "reverse-next stepped over fib(11): {out}");
    assert_eq!(frames(&out).len(), 1, "still in main: {out}");
    assert!(out.contains("\n9\t        total += fib(i);"), "at line 9: {out}");
    assert!(out.contains("$1 = 143"), "total = fib(0) + … + fib(10): {out}");
    assert!(out.contains("$2 = 11"), "i: {out}");
    assert!(
        p[2] > p[0] - 10 && p[2] <= p[0],
        "next steps over it forwards again: {out}"
    );
}

/// A port in use is refused with status 1 and a message that names the address, who holds
/// it (this test, then another replay with its recording) and the way on, `--port 0`.
#[test]
fn a_busy_port_names_its_holder_and_the_way_on() {
    let rec = recording("dispatch", false);
    let replay_on = |port: u16| {
        let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
            .args(["replay", "--no-gdb", "--port", &port.to_string()])
            .arg(&rec.dir)
            .stdin(Stdio::null())
            .output()
            .expect("rtit replay");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = held.local_addr().expect("its address").port();
    let (status, err) = replay_on(port);
    assert_eq!(status, Some(1), "{err}");
    let busy = format!(
        "cannot listen on 127.0.0.1:{port}: the port is in use, by pid {} (`",
        std::process::id()
    );
    assert!(err.contains(&busy), "{err}");
    assert!(err.contains("; `--port 0` picks a free one"), "{err}");
    drop(held);
    let server = Server::start(&rec);
    let (status, err) = replay_on(server.port());
    assert_eq!(status, Some(1), "{err}");
    let busy = format!(
        "the port is in use, by `rtit replay` of {} (pid {}); `--port 0` picks a free one",
        rec.dir.display(),
        server.pid()
    );
    assert!(err.contains(&busy), "{err}");
}

#[test]
fn disconnect_and_reconnect() {
    let rec = recording("dispatch", false);
    let server = Server::start(&rec);
    let exe = common::executable(&rec);
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
    // Two locations where gdb finds the vDSO through /proc/PID/maps (its own clock_gettime).
    let hit = out.contains("Breakpoint 1, ") || out.contains("Breakpoint 1.1, ");
    assert!(hit && out.contains("clock_gettime"), "{out}");
    let truth = rec.truth().expect("truth").expect("truth");
    let stop = positions(&out)[0] as usize;
    assert!(stop > 0 && stop < truth.len(), "{out}");
}

/// The driver stand-in: examples/c/module/modload.c loads drvmod.o (ET_REL) the way the
/// kernel loads a module and calls into it; the recording traces only the object's text and
/// the loader's `drv_log` that it calls (`--filter` twice), keeps the object with its section
/// addresses (`--module`) and the address of `drv_log`, which the object uses but does not
/// define (`--kallsyms`, as a module uses the kernel's symbols); gdb steps through its
/// functions by source line after the `add-symbol-file` that `monitor info` prints.
#[test]
fn a_loaded_relocatable_object_is_debugged_with_add_symbol_file() {
    use object::{Object, ObjectSection, ObjectSymbol};
    let dir = common::scratch("replay_gdb", "module");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c/module");
    let (loader, obj) = (dir.join("modload"), dir.join("drvmod.o"));
    let gcc = |args: &[&str], out: &Path, src: &Path| {
        let ok = Command::new("gcc").args(args).arg("-o").arg(out).arg(src).status();
        assert!(ok.expect("gcc is needed").success());
    };
    gcc(&["-O1", "-g", "-static"], &loader, &src.join("modload.c"));
    gcc(&["-c", "-O1", "-g", "-fno-pic"], &obj, &src.join("drvmod.c"));
    // modload places .text first, at 0x20000000.
    let bytes = std::fs::read(&obj).expect("object");
    let text = object::File::parse(&*bytes)
        .expect("ELF")
        .section_by_name(".text")
        .expect(".text")
        .size();
    let loader_bytes = std::fs::read(&loader).expect("loader");
    let loader_elf = object::File::parse(&*loader_bytes).expect("ELF");
    let log = loader_elf
        .symbols()
        .find(|s| s.name() == Ok("drv_log"))
        .expect("drv_log");
    let (log_start, log_end) = (log.address(), log.address() + log.size());
    let filters = [
        format!("0x20000000-{:#x}", 0x2000_0000 + text),
        format!("{log_start:#x}-{log_end:#x}"),
    ];
    let (out, sys) = (dir.join("rec"), dir.join("sys"));
    let status = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "step", "--truth", "--start", "main"])
        .args(["--filter", &filters[0], "--filter", &filters[1]])
        .args(["--module", "drvmod", "--module-root"])
        .arg(&sys)
        .arg("--module-file")
        .arg(&obj)
        .arg("--kallsyms")
        .arg(sys.join("kallsyms"))
        .arg("--out")
        .arg(&out)
        .arg("--")
        .args([&loader, &obj, &sys])
        // Round 19 fails and calls drv_log.
        .arg("20")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rtit record");
    assert!(status.success());
    let rec = Recording::open(&out).expect("a recording");
    let module = rec
        .manifest
        .images
        .iter()
        .find(|i| i.kind == rtit_replay_core::recording::ImageKind::Relocatable)
        .expect("the object is in the recording");
    assert_eq!(module.sections.get(".text"), Some(&0x2000_0000));
    assert_eq!(
        module.externals.get("drv_log"),
        Some(&log_start),
        "the external symbol's address, from the loader's kallsyms"
    );
    let truth = rec.truth().expect("truth").expect("truth");
    assert!(
        truth
            .iter()
            .all(|&ip| (0x2000_0000..0x2000_0000 + text).contains(&ip) || (log_start..log_end).contains(&ip)),
        "only its text and drv_log traced"
    );
    assert!(truth.contains(&log_start), "drv_log was called");
    // The direct call into drv_log decodes only with the relocation the loader applied.
    let listed = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["insns", "--json"])
        .arg(&rec.dir)
        .output()
        .expect("rtit insns");
    let ips: Vec<u64> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("JSON");
            assert_ne!(v["event"], "error", "{v}");
            v.get("i")?;
            u64::from_str_radix(v["ip"].as_str()?.trim_start_matches("0x"), 16).ok()
        })
        .collect();
    assert!(ips == truth, "decoded {} instructions, {} ran", ips.len(), truth.len());
    let add = module.add_symbol_file_command(&rec.dir).expect("a command");

    let server = Server::start(&rec);
    let out = server.gdb(
        None,
        &[
            "monitor info",
            &add,
            "break checksum",
            "continue",
            "info line *$pc",
            "next",
            "next",
            "monitor when",
            "reverse-next",
            "monitor when",
            "delete 1",
            "break drv_main",
            "reverse-continue",
            "monitor when",
        ],
    );
    assert!(
        out.contains(&format!("  {add}")),
        "monitor info prints the command:\n{out}"
    );
    assert!(out.contains("Breakpoint 1, checksum ("), "{out}");
    assert!(out.contains("drvmod.c:16"), "stopped at checksum's first line:\n{out}");
    // next, next: the loop body (17), then the loop test (16); reverse-next goes back to 17.
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("1") && l.contains('\t')).collect();
    assert!(lines.len() >= 3, "{out}");
    assert!(lines[lines.len() - 3].starts_with("17\t"), "{out}");
    assert!(lines[lines.len() - 2].starts_with("16\t"), "{out}");
    assert!(lines[lines.len() - 1].starts_with("17\t"), "{out}");
    let at = positions(&out);
    assert_eq!(at.len(), 3, "{out}");
    assert!(at[1] < at[0], "reverse-next went back: {at:?}");
    // The first checksum call is reached from drv_main's entry, position 0, going backwards.
    assert_eq!(
        at[2], 0,
        "reverse-continue to drv_main lands at the start of the history:\n{out}"
    );
    assert!(out.contains("Breakpoint 2, drv_main ("), "{out}");
    assert_eq!(
        truth[0],
        symbol_in(&bytes, "drv_main"),
        "the truth starts in drv_main too"
    );
}

/// A symbol's address in a relocatable object placed with .text at 0x20000000.
fn symbol_in(object: &[u8], name: &str) -> u64 {
    use object::{Object, ObjectSymbol};
    let file = object::File::parse(object).expect("ELF");
    0x2000_0000 + file.symbols().find(|s| s.name() == Ok(name)).expect("symbol").address()
}

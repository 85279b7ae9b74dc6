//! The qemu backend's fast path (a run of a block's instructions retired at once, issue 20)
//! writes exactly what the RTIT unit model writes one instruction at a time: every example of
//! examples/c and Debian's sort, gzip and python3 recorded with `--check-fast-path`, which runs
//! the unit model beside the fast path in the plugin and fails the recording at the first
//! byte that differs, under the default configuration and with return compression off, an IP
//! filter, cycle-accurate mode, MTC and STS packets and the shortest PSB period.
//!
//! Needs `qemu-x86_64` and gcc (`.ci/run` installs them).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Object, ObjectSymbol};
use rtit_replay_core::recording::Recording;

/// The configurations checked: each changes what the model does per instruction or branch.
const CONFIGS: [&[&str]; 5] = [
    &[],
    &["--no-ret-compression"],
    &["--cycle-accurate"],
    &["--mtc", "--sts"],
    &["--psb-period", "2048"],
];

/// Records `exe args` with `--check-fast-path` and `flags`; the recording and stderr. The
/// check failing fails the recording.
fn checked(exe: &Path, args: &[&str], flags: &[&str], out: &Path) -> (Recording, String) {
    let result = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["record", "--backend", "qemu", "--check-fast-path", "--out"])
        .arg(out)
        .args(flags)
        .arg("--")
        .arg(exe)
        .args(args)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .env("PYTHONHASHSEED", "0")
        .output()
        .expect("rtit record");
    let stderr = String::from_utf8_lossy(&result.stderr).into_owned();
    assert!(
        stderr.contains("every byte is what the unit model wrote"),
        "{} {flags:?}: {stderr}",
        exe.display()
    );
    let rec = Recording::open(out).unwrap_or_else(|e| panic!("{}: {e}\n{stderr}", out.display()));
    (rec, stderr)
}

fn example(name: &str, dir: &Path) -> PathBuf {
    common::gcc(&format!("examples/c/{name}.c"), &[], dir)
}

/// `examples/c/NAME.c` linked statically at a fixed address, where an IP filter can name it.
fn static_example(name: &str, dir: &Path) -> PathBuf {
    common::gcc(&format!("examples/c/{name}.c"), &["-static"], dir)
}

#[test]
fn every_example_under_every_configuration() {
    let dir = common::scratch("fast_path", "examples");
    for name in [
        "recursion",
        "deep",
        "dispatch",
        "goto",
        "longjmp",
        "signals",
        "crash",
        "dynamic",
    ] {
        let exe = example(name, &dir);
        for (i, flags) in CONFIGS.iter().enumerate() {
            let (rec, _) = checked(&exe, &[], flags, &dir.join(format!("{name}-{i}")));
            assert!(rec.manifest.instructions > 1000, "{name} {flags:?}");
        }
    }
}

#[test]
fn an_ip_filter_on_one_function() {
    let dir = common::scratch("fast_path", "filter");
    let exe = static_example("recursion", &dir);
    let bytes = std::fs::read(&exe).expect("exe");
    let file = object::File::parse(&*bytes).expect("ELF");
    let fib = file.symbols().find(|s| s.name() == Ok("fib")).expect("fib");
    let range = format!("{:x}-{:x}", fib.address(), fib.address() + fib.size());
    let (rec, _) = checked(&exe, &[], &["--filter", &range], &dir.join("rec"));
    assert!(rec.manifest.instructions > 1000);
}

#[test]
fn debian_programs_under_the_default_configuration_and_without_return_compression() {
    let dir = common::scratch("fast_path", "debian");
    let lines: String = (0..3000u64)
        .map(|i| format!("{}\n", i.wrapping_mul(2654435761) % 10007))
        .collect();
    let input = dir.join("input.txt");
    std::fs::write(&input, lines).expect("input");
    let input = input.to_str().expect("utf-8");
    let programs: [(&str, &[&str]); 3] = [
        ("/usr/bin/sort", &["-n", input]),
        ("/usr/bin/gzip", &["-c", input]),
        ("/usr/bin/python3", &["-c", "print(sum(range(10)))"]),
    ];
    for (program, args) in programs {
        for (i, flags) in [&[][..], &["--no-ret-compression"]].iter().enumerate() {
            let name = Path::new(program)
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            let (rec, _) = checked(Path::new(program), args, flags, &dir.join(format!("{name}-{i}")));
            assert!(rec.manifest.instructions > 100_000, "{program} {flags:?}");
        }
    }
}

//! Decoding on every core (issue 19): a trace split at PSBs, each stretch decoded cold on a
//! thread of its own and joined where two stretches agree, gives exactly the history one
//! plain decode gives: every instruction and event at its position, and the end of the
//! trace (the recorder's count) reached the same way. Checked on real programs recorded
//! with the default backend, split far finer than `rtit replay` splits them so that there
//! are many joins, and through `rtit info --decode --verify-parallel`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use rtit_replay_core::recording::Recording;
use rtit_replay_core::timeline::parallel::{self, Split};

/// Records `args` with the qemu backend into `out`.
fn record(out: &Path, args: &[&str], stdin: Option<&Path>) -> Recording {
    let _ = std::fs::remove_dir_all(out);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rtit"));
    cmd.args(["record", "--backend", "qemu", "--out"])
        .arg(out)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .arg("--")
        .args(args)
        .stdout(Stdio::null());
    if let Some(input) = stdin {
        cmd.stdin(std::fs::File::open(input).expect("input"));
    }
    assert!(cmd.status().expect("rtit record").success(), "recording {args:?}");
    Recording::open(out).expect("recording")
}

/// Decodes `rec` split in stretches of about `bytes`, on 4 threads, and plainly; the
/// histories must be the same. Returns the joins made.
fn same_history(rec: &Recording, bytes: usize) -> usize {
    let space = rec.address_space().expect("space");
    let trace = rec.trace().expect("trace");
    let gaps = rec.gaps();
    let input = rec.decode_input(&trace, &space, &gaps);
    let split = Split {
        threads: 4,
        min_bytes: bytes,
    };
    let built = parallel::build(&input, split, &mut |_| {});
    let plain = parallel::build(&input, Split::sequential(), &mut |_| {});
    assert_eq!(plain.stretches, 1);
    assert_eq!(
        plain.timeline.len(),
        rec.manifest.instructions,
        "the plain decode is complete"
    );
    if let Some(d) = built.timeline.first_difference(&plain.timeline) {
        panic!("{}: split in {} stretches: {d}", rec.dir.display(), built.stretches);
    }
    assert!(built.stretches > 1, "{}: the trace was split", rec.dir.display());
    built.joins
}

#[test]
fn python3_sort_and_gzip_decoded_in_stretches_give_the_plain_history() {
    let dir = common::scratch("parallel_decode", "programs");
    let lines = dir.join("lines");
    let text: String = (0..20_000).map(|i| format!("{}\n", (i * 7919) % 10007)).collect();
    std::fs::write(&lines, text).expect("lines");
    let python = record(
        &dir.join("python3"),
        &["/usr/bin/python3", "-c", "print(sum(range(1000)))"],
        None,
    );
    let sort = record(&dir.join("sort"), &["/usr/bin/sort", "-n"], Some(&lines));
    let gzip = record(&dir.join("gzip"), &["/usr/bin/gzip", "-c"], Some(&lines));
    let mut joins = 0;
    for (rec, bytes) in [
        (&python, 64 << 10),
        (&python, 300 << 10),
        (&sort, 32 << 10),
        (&gzip, 16 << 10),
    ] {
        joins += same_history(rec, bytes);
    }
    assert!(
        joins >= 4,
        "stretches met each other ({joins} joins), not only decoded through"
    );
    // The same check as a user runs it.
    let out = Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(["info", "--decode", "--verify-parallel", "--threads", "2"])
        .arg(&python.dir)
        .output()
        .expect("rtit info");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("verified      the same history"), "{text}");
}

//! Replay latency on the longest example history: the dynamic example (examples/c/dynamic.c)
//! recorded with the step backend from its first instruction (dynamic loader included, about
//! 95,000 instructions). Measures, on the session that serves gdb:
//! - `reverse-stepi` from the end;
//! - `reverse-continue` from the end to a breakpoint whose only hit is position 0 (a scan of
//!   the whole history);
//! - opening the session (decoding the trace into positions), which `rtit replay` pays once;
//! - the first `info registers` at a position in the middle of the history on a fresh session
//!   (the state layer's checkpoints computed up to there, both passes), then `stepi` +
//!   `info registers` next to it, and the checkpoints' memory.
//!
//! Needs gcc. Run with `cargo bench --bench replay_latency`.

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

use criterion::{criterion_main, Criterion};
use rtit_recorder::model::{ModelOptions, RtitConfig};
use rtit_recorder::step::{self, StartAt, StepOptions};
use rtit_recorder::writer::{self, Meta};
use rtit_replay_core::recording::Recording;
use rtit_replay_core::session::{Session, Stop};

fn recording() -> Recording {
    let dir = std::env::temp_dir().join(format!("rtit-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    let exe = dir.join("dynamic");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c/dynamic.c");
    assert!(Command::new("gcc")
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc")
        .success());
    let outcome = step::record(StepOptions {
        program: exe.clone(),
        args: Vec::new(),
        aslr: false,
        start: StartAt::Entry,
        config: RtitConfig::user_process(0),
        model: ModelOptions::default(),
        truth: false,
        interrupted: rtit_recorder::interrupt::Interrupt::new(),
        progress: None,
    })
    .expect("record")
    .outcome;
    let out = dir.join("rec");
    let meta = Meta {
        command: vec![exe.display().to_string()],
        backend: "step".into(),
        aslr: false,
    };
    writer::write(&out, &outcome, &meta).expect("write");
    Recording::open(&out).expect("open")
}

fn bench(c: &mut Criterion) {
    let rec = recording();
    let mut session = Session::open(rec.clone()).expect("session");
    let last = session.last();
    let first_ip = session.ip_at(0).expect("position 0");
    let far_back: HashSet<u64> = [first_ip].into();
    eprintln!("history: {} positions", session.len());
    let mut group = c.benchmark_group("replay_latency");
    group.bench_function("reverse_stepi_at_the_end", |b| {
        b.iter(|| {
            session.set_position(last);
            session.step_backward()
        })
    });
    group.bench_function("reverse_continue_whole_history", |b| {
        b.iter(|| {
            session.set_position(last);
            let stop = session.continue_backward(&far_back, || false);
            assert!(matches!(stop, Stop::Breakpoint | Stop::Begin));
            session.position()
        })
    });
    let all = |s: &mut Session| {
        let names = [
            "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r15", "eflags", "fs_base",
        ];
        names.iter().filter(|n| s.register(n).is_some()).count()
    };
    // A position off any checkpoint boundary: the golden ratio of the history.
    let somewhere = (session.len() as f64 * 0.618) as u64;
    group.bench_function("stepi_then_info_registers", |b| {
        session.set_position(somewhere);
        all(&mut session);
        b.iter(|| {
            session.step_forward();
            all(&mut session)
        })
    });
    group.sample_size(10);
    group.bench_function("open_session", |b| {
        b.iter(|| Session::open(rec.clone()).expect("session").len())
    });
    group.bench_function("open_session_then_first_info_registers", |b| {
        b.iter(|| {
            let mut s = Session::open(rec.clone()).expect("session");
            s.set_position(somewhere);
            all(&mut s)
        })
    });
    let mut fresh = Session::open(rec.clone()).expect("session");
    fresh.set_position(somewhere);
    let known = all(&mut fresh);
    let stats = fresh.values_stats();
    eprintln!(
        "state at position {somewhere}: {known}/12 registers known; {} checkpoints holding {:.1} MiB",
        stats.checkpoints,
        stats.bytes as f64 / (1 << 20) as f64
    );
    group.finish();
    let _ = std::fs::remove_dir_all(rec.dir.parent().expect("scratch dir"));
}

// The macros generate undocumented public functions.
#[allow(missing_docs)]
mod harness {
    criterion::criterion_group!(benches, super::bench);
}
criterion_main!(harness::benches);

//! Watchpoints (issue 41): how long a search for the writes of some bytes takes, on python3
//! recordings (the qemu backend, anchors) of about 1e7, 1e8 and 1e9 instructions. The bytes
//! are libc's `environ`, which libc sets at startup and never again: a `reverse-continue`
//! from the end crosses the whole history to a write near its start. For each size, in a
//! process of its own (for its peak memory), three times:
//! - *back, at once*: from the end to that write right after opening (the index of written
//!   addresses walked on the spot where the background fill has not been yet);
//! - *back, indexed*: the same once the fill has been through;
//! - *forward*: from just after that write to the next one (or the end);
//! - *last-write*: from five random positions back to the write (the slowest);
//! - *no index*: back from the end walking every instruction (the search without anchors;
//!   up to 1e8);
//! - the index's bytes a position, and the peak memory.
//!
//! Run with `cargo bench --bench watchpoints`; `RTIT_WATCH_SIZES=1e7,1e8` picks sizes.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use object::{Object, ObjectSymbol};
use rtit_replay_core::recording::Recording;
use rtit_replay_core::session::Session;
use rtit_replay_core::state::watch::{Found, Watch, WatchKind};
use rtit_replay_core::timeline::cache::Policy;

#[path = "common/memory.rs"]
mod memory;
#[path = "common/recordings.rs"]
mod recordings;

use memory::peak_mib;

/// The address of libc's `environ` in the recording.
fn environ(rec: &Recording) -> u64 {
    let libc = (rec.manifest.images.iter())
        .find(|i| i.path.contains("libc.so"))
        .expect("libc among the images");
    let bytes = std::fs::read(rec.dir.join(&libc.file)).expect("libc's copy");
    let file = object::File::parse(&*bytes).expect("an ELF file");
    let symbol = (file.dynamic_symbols().chain(file.symbols()))
        .find(|s| s.name() == Ok("environ") || s.name() == Ok("__environ"))
        .expect("environ");
    let lowest = rtit_replay_core::image::lowest_vaddr(&libc.path, &bytes).expect("segments");
    libc.load_address - lowest + symbol.address()
}

/// Seconds `f` takes, and what it gives.
fn timed<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let t = Instant::now();
    let v = f();
    (t.elapsed().as_secs_f64(), v)
}

/// The child: measures one recording and prints the figures.
fn child(dir: &Path, without_index: bool) {
    let rec = Recording::open(dir).expect("a recording");
    let w = [Watch {
        address: environ(&rec),
        len: 8,
        kind: WatchKind::Write,
    }];
    let mut s = Session::open_cached(rec, false, Policy::Auto, &mut |_| {}).expect("a session");
    let last = s.last();
    s.set_position(last);
    s.settle(&mut || false);
    let v = s.values().expect("values");
    let (at_once, found) = timed(|| v.last_access(0, last, &w, &mut || false));
    let Some(Found::Hit { position, .. }) = found else {
        panic!("no write of environ found: {found:?}")
    };
    while !matches!(s.values_walked(), (done, total) if total > 0 && done >= total) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let v = s.values().expect("values");
    let (indexed, again) = timed(|| v.last_access(0, last, &w, &mut || false));
    assert_eq!(again, found, "the same write with the index complete");
    let (forward, _) = timed(|| v.first_access(position + 1, last, &w, &mut || false));
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let last_write = (0..5)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let p = position + 1 + (x >> 11) % (last - position);
            timed(|| v.last_access(0, p, &w, &mut || false)).0
        })
        .fold(0.0, f64::max);
    let (bytes, _, _) = s.write_index_size().expect("an index");
    let peak = peak_mib(std::process::id());
    let walked = match without_index {
        true => {
            let rec = Recording::open(dir).expect("a recording");
            let mut plain = Session::open_cached(rec, false, Policy::Auto, &mut |_| {}).expect("a session");
            let v = plain.values().expect("values");
            v.walk_every_instruction_for_watches();
            let (t, f) = timed(|| v.last_access(0, last, &w, &mut || false));
            assert_eq!(f, found, "the same write without the index");
            t
        }
        false => f64::NAN,
    };
    println!(
        "MEASURED {at_once} {indexed} {forward} {last_write} {walked} {} {peak}",
        bytes as f64 / (last + 1) as f64
    );
}

/// `min–max` of `values`, with `digits` decimals.
fn range(values: &[f64], digits: usize) -> String {
    let (lo, hi) = values
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
    match lo.is_nan() || lo == f64::MAX {
        true => "–".to_string(),
        false => format!("{lo:.digits$}–{hi:.digits$}"),
    }
}

fn main() {
    if let Ok(dir) = std::env::var("RTIT_WATCH_CHILD") {
        child(Path::new(&dir), std::env::var("RTIT_WATCH_PLAIN").as_deref() == Ok("1"));
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let plugin = root.join("target/release/librtit_qemu_plugin.so");
    // The recordings `values_at_once` makes, shared.
    let dir = root.join("target/bench/values_at_once");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let sizes = std::env::var("RTIT_WATCH_SIZES").unwrap_or_else(|_| "1e7,1e8,1e9".into());
    println!("python3, qemu backend, a watch on libc's environ: seconds (3 runs)");
    println!("size | insns | back, at once | back, indexed | forward | last-write, 5 random: slowest | no index | index bytes/insn | peak MiB");
    for size in sizes.split(',') {
        let n: f64 = size.parse().expect("a size such as 1e8");
        let out = recordings::recording(&dir, &plugin, "python3", n);
        let insns = Recording::open(&out).expect("a recording").manifest.instructions;
        let exe = std::env::current_exe().expect("this benchmark");
        let runs: Vec<Vec<f64>> = (0..3)
            .map(|_| {
                let o = Command::new(&exe)
                    .env("RTIT_WATCH_CHILD", &out)
                    .env("RTIT_WATCH_PLAIN", if n <= 1e8 { "1" } else { "0" })
                    .output()
                    .expect("the child");
                let text = String::from_utf8_lossy(&o.stdout);
                let line = (text.lines())
                    .find_map(|l| l.strip_prefix("MEASURED "))
                    .unwrap_or_else(|| panic!("the child measured nothing: {}", String::from_utf8_lossy(&o.stderr)));
                line.split_whitespace().map(|w| w.parse().unwrap_or(f64::NAN)).collect()
            })
            .collect();
        let col = |i: usize| runs.iter().map(|r| r[i]).collect::<Vec<_>>();
        println!(
            "{size} | {insns} | {} | {} | {} | {} | {} | {} | {}",
            range(&col(0), 2),
            range(&col(1), 3),
            range(&col(2), 3),
            range(&col(3), 3),
            range(&col(4), 1),
            range(&col(5), 3),
            range(&col(6), 0),
        );
    }
}

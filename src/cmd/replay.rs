//! `rtit replay`: serve a recording to gdb with forward and reverse execution, and by default
//! start gdb connected to it, as `rr replay` does.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use rtit_replay_core::recording::{Recording, RecordingError};
use rtit_replay_core::session::{History, Session};
use rtit_replay_core::timeline::cache::{self, Policy};
use rtit_stub::server::{self, Event};
use rtit_stub::ReplayTarget;

use super::recordings;

mod ending;
mod gdb_files;
mod listen;

/// Arguments of `rtit replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The recording (default: the latest).
    #[arg(value_name = "REC")]
    recording: Option<PathBuf>,
    /// TCP port to serve on; 0 picks a free one. Default: 1234 with `--no-gdb` (for a gdb
    /// of yours: `target remote :1234`), else a free one (the gdb started here is told it).
    #[arg(long)]
    port: Option<u16>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    listen: String,
    /// Only serve (print `listening on ADDR:PORT` on stderr when ready); start no gdb.
    #[arg(long)]
    no_gdb: bool,
    /// The gdb to start.
    #[arg(long, default_value = "gdb")]
    gdb: PathBuf,
    /// Replay what an incomplete recording holds (a trace cut short), with a warning.
    #[arg(long)]
    partial: bool,
    /// Keep the decoded history beside the recording however fast it decoded (by default
    /// only a decode over a second is kept): the tests' way to have a store to interrupt.
    #[arg(long, hide = true)]
    store_history: bool,
    /// Pause this many milliseconds after each MiB a store writes: the tests' way to end a
    /// replay while its store goes on, however fast the machine writes.
    #[arg(long, hide = true, value_name = "MS", default_value_t = 0)]
    store_pace_ms: u64,
    /// Leave the recording's anchors unread: the values come from the passes' chains, as
    /// without anchors (the tests' and benchmarks' way to compare the two).
    #[arg(long, hide = true)]
    ignore_anchors: bool,
    /// Replay REC itself, not the recording of the program its execve ran (by default the
    /// last program of the run is replayed: what a wrapper or a script ends in).
    #[arg(long)]
    no_follow: bool,
}

/// gdb's `remotetimeout` for the gdb started here (gdb's default is 2 s): the stub answers
/// most questions at once, but the first one at a position far from any checkpoint on a
/// huge history can take longer, and gdb drops a connection whose answer is late.
const REMOTE_TIMEOUT: u32 = 60;

/// Seconds the launched gdb's questions may wait for values due soon (a crash at the end of
/// a python3 run: its forward checkpoint there comes after two seconds or so, longer on a
/// busy machine); half its `remotetimeout`.
const PATIENCE: u64 = 30;

/// How long `rtit replay` waits for the history before serving: a decode this short ends
/// first, and its news (decode errors, an incomplete recording) come before gdb's prompt.
const SHORT_DECODE: Duration = Duration::from_millis(300);

/// Runs `rtit replay`.
pub fn run(args: &ReplayArgs) -> Result<()> {
    ending::handle_signals()?;
    // However `run` returns, the history being stored beside the recording goes with it.
    let _abandon = ending::AbandonOnDrop;
    let mut rec = recordings::open(args.recording.as_deref())?;
    if !args.no_follow {
        rec = recordings::last_program(rec)?;
    }
    if args.ignore_anchors {
        rec = rec.ignoring_anchors();
    }

    let quiet = Arc::new(AtomicBool::new(false));
    let stage = Arc::new(Mutex::new(Stage::default()));
    cache::pace_stores(Duration::from_millis(args.store_pace_ms));
    let policy = if args.store_history {
        Policy::Always
    } else {
        Policy::Auto
    };
    let mut session = open(&rec, args.partial, policy, quiet.clone(), stage.clone(), !args.no_gdb)?;
    // A short decode ends before anything is served, its news said first and a refusal an
    // error like any other; a long one goes on while gdb connects (moves wait for it).
    let short = session.wait_ready(SHORT_DECODE);
    {
        let mut stage = stage.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(refusal) = stage.refused.take() {
            return Err(refusal);
        }
        stage.serving = true;
    }
    if !short {
        eprintln!(
            "rtit: reading the history ({} instructions: the trace decoded, or the history stored beside it) in the background; a move to where it has not reached yet may wait for it",
            rec.manifest.instructions
        );
    }
    let port = args.port.unwrap_or(if args.no_gdb { 1234 } else { 0 });
    let listener = listen::bind(&args.listen, port)?;
    let addr: SocketAddr = listener.local_addr()?;
    // Where to connect, for a gdb of the user's; the one started here is told itself.
    if args.no_gdb {
        eprintln!("listening on {addr}");
    }
    // A question waits for values due soon: well within gdb's default timeout for any gdb,
    // longer for the gdb started here (its timeout is raised), not so long that it seems hung.
    session.set_patience(Duration::from_secs(if args.no_gdb { 1 } else { PATIENCE }));
    let target = ReplayTarget::new(session);
    if args.no_gdb {
        server::serve_forever(&listener, target, |e| eprintln!("rtit: {e}"));
        return Ok(());
    }
    // Attaching is the launched gdb's own business; only what goes wrong is said.
    // rtit ends with the gdb it started, so its comings and goings are not news either.
    let log = |e: Event| {
        if !matches!(e, Event::Attached(_) | Event::Detached(..)) {
            eprintln!("rtit: {e}");
        }
    };
    std::thread::spawn(move || server::serve_forever(&listener, target, log));
    // gdb owns the terminal from now on: no more progress lines.
    quiet.store(true, Ordering::Relaxed);
    let files = gdb_files::GdbFiles::write(&rec)?;
    let mut gdb = Command::new(&args.gdb);
    gdb.arg("-q")
        .args(["-iex", &format!("set remotetimeout {REMOTE_TIMEOUT}")])
        .arg("-iex")
        .arg(format!("set sysroot {}", files.sysroot().display()))
        .arg("-ix")
        .arg(files.init());
    if let Some(exe) = files.executable(&rec) {
        gdb.arg(exe);
    }
    gdb.args(["-ex", &format!("target remote {addr}")]);
    gdb.args(["-ex", rtit_stub::monitor::FLUSHES]);
    // Ctrl-C at the terminal reaches rtit too; while gdb runs it is gdb's (`ending`). rtit
    // ends when gdb does.
    let mut gdb = gdb
        .spawn()
        .with_context(|| format!("cannot start {}", args.gdb.display()))?;
    ending::gdb_started(gdb.id());
    let status = gdb.wait().context("cannot wait for gdb")?;
    drop(files);
    ending::gdb_ended();
    if !status.success() {
        eprintln!("rtit: gdb exited with {status}");
    }
    Ok(())
}

/// Where `rtit replay` is when a background decode ends.
#[derive(Default)]
struct Stage {
    /// Serving already: a refusal must be said (and ends rtit without a gdb of ours).
    serving: bool,
    /// A refusal before serving, for `run` to return.
    refused: Option<anyhow::Error>,
}

/// Opens the recording; its trace is decoded into the history on a thread of its own, with
/// a progress line on a terminal (until `quiet`) when that takes over a second, and what the
/// decode found said when it ends. A recording refused then while serving already ends rtit
/// (without `gdb`: nothing else would end it), or the gdb connected to it loses its
/// connection.
fn open(
    rec: &Recording,
    partial: bool,
    policy: Policy,
    quiet: Arc<AtomicBool>,
    stage: Arc<Mutex<Stage>>,
    gdb: bool,
) -> Result<Session> {
    let started = Instant::now();
    let tty = std::io::stderr().is_terminal();
    let total = rec.manifest.instructions;
    let said = Arc::new(AtomicBool::new(false));
    let (said_p, quiet_p) = (said.clone(), quiet.clone());
    let progress = move |done: u64| {
        if tty && !quiet_p.load(Ordering::Relaxed) && started.elapsed() > Duration::from_secs(1) {
            said_p.store(true, Ordering::Relaxed);
            eprint!(
                "\rrtit: reading the history: {}% of {total} instructions   ",
                done * 100 / total.max(1)
            );
            let _ = std::io::stderr().flush();
        }
    };
    let dir = rec.dir.clone();
    let on_done = move |history: Result<&History<'_>, &RecordingError>| {
        if said.load(Ordering::Relaxed) {
            eprintln!(
                "\rrtit: read the history in {:.1} s{:40}",
                started.elapsed().as_secs_f64(),
                ""
            );
        }
        match history {
            Ok(h) => news(h, &dir, quiet.load(Ordering::Relaxed)),
            Err(e) => {
                let refusal = recordings::refusal(e.clone()).context("cannot replay the recording");
                let mut stage = stage.lock().unwrap_or_else(|e| e.into_inner());
                if !stage.serving {
                    // Said by `run`, as any error.
                    stage.refused = Some(refusal);
                    return;
                }
                eprintln!("rtit: error: {refusal:#}");
                if !gdb {
                    ending::exit(1);
                }
            }
        }
    };
    Session::open_background(rec.clone(), partial, policy, Box::new(progress), Box::new(on_done))
        .map_err(recordings::refusal)
        .context("cannot replay the recording")
}

/// What the decode found that the user should know; `quiet` (gdb has the terminal) leaves
/// out what is only news.
fn news(h: &History<'_>, dir: &std::path::Path, quiet: bool) {
    if let Some(e) = h.incomplete() {
        eprintln!("rtit: warning: {e}");
    }
    let errors = h.errors().count();
    if errors > 0 {
        eprintln!("rtit: the trace has {errors} decode errors; `monitor info` and `rtit insns` show them");
    }
    for spin in h.spins().take(3) {
        eprintln!("rtit: note: {spin}");
    }
    if quiet {
        return;
    }
    if h.storing() {
        // Not its size: it is packed as it is written, after this.
        eprintln!(
            "rtit: keeping the history in {} so that the next replay starts at once",
            dir.join(cache::FILE).display()
        );
    }
    // With anchors a stop's values are worked out for it alone: nothing to announce.
    if let Some(progress) = h
        .values_progress()
        .filter(|_| h.len() > rtit_replay_core::state::WAIT_BELOW)
    {
        eprintln!(
            "rtit: working out values over the {} positions in the background (a stop waits for those it shows; `monitor info` says how far)",
            h.len()
        );
        announce_final(progress);
    }
}

/// Says when the values are final, from a thread of its own that looks every half second
/// (a user serving `--no-gdb` otherwise learns it only from `monitor info`).
fn announce_final(progress: rtit_replay_core::state::ValuesProgress) {
    let started = Instant::now();
    std::thread::spawn(move || {
        while !progress.done() {
            std::thread::sleep(Duration::from_millis(500));
        }
        eprintln!(
            "rtit: the values are final everywhere ({:.0} s after the history was there)",
            started.elapsed().as_secs_f64()
        );
    });
}

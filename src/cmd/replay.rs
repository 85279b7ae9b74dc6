//! `rtit replay`: serve a recording to gdb with forward and reverse execution, and by default
//! start gdb connected to it, as `rr replay` does.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use clap::Args;
use rtit_replay_core::session::Session;
use rtit_stub::server::{self, Event};
use rtit_stub::ReplayTarget;

use super::recordings;

/// Arguments of `rtit replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The recording (default: the latest).
    #[arg(value_name = "REC")]
    recording: Option<PathBuf>,
    /// TCP port to serve on; 0 picks a free one.
    #[arg(long, default_value_t = 1234)]
    port: u16,
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
}

/// Runs `rtit replay`.
pub fn run(args: &ReplayArgs) -> Result<()> {
    let rec = recordings::open(args.recording.as_deref())?;
    let exe = rtit_stub::files::executable(&rec).map(|i| rec.dir.join(&i.file));
    let session = Session::open_with(rec.clone(), args.partial).context("cannot replay the recording")?;
    if let Some(e) = session.incomplete() {
        eprintln!("rtit: warning: {e}");
    }
    let errors = session.errors().count();
    if errors > 0 {
        eprintln!("rtit: the trace has {errors} decode errors; `monitor info` and `rtit insns` show them");
    }
    let listener = TcpListener::bind((args.listen.as_str(), args.port))
        .with_context(|| format!("cannot listen on {}:{}", args.listen, args.port))?;
    let addr: SocketAddr = listener.local_addr()?;
    eprintln!("listening on {addr}");
    let target = ReplayTarget::new(session);
    if args.no_gdb {
        server::serve_forever(&listener, target, |e| eprintln!("rtit: {e}"));
        return Ok(());
    }
    // Attaching is the launched gdb's own business; only what goes wrong is said.
    let log = |e: Event| {
        if !matches!(e, Event::Attached(_)) {
            eprintln!("rtit: {e}");
        }
    };
    std::thread::spawn(move || server::serve_forever(&listener, target, log));
    let mut gdb = Command::new(&args.gdb);
    gdb.arg("-q");
    if let Some(exe) = &exe {
        gdb.arg(exe);
    }
    gdb.args(["-ex", &format!("target remote {addr}")]);
    let status = gdb
        .status()
        .with_context(|| format!("cannot start {}", args.gdb.display()))?;
    if !status.success() {
        eprintln!("rtit: gdb exited with {status}");
    }
    Ok(())
}

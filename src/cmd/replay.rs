//! `rtit replay`: serve a recording to gdb with forward and reverse execution, and by default
//! start gdb connected to it, as `rr replay` does.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use clap::Args;
use rtit_replay_core::session::Session;
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
    let mut target = ReplayTarget::new(session);
    if args.no_gdb {
        serve_forever(&listener, &mut target);
        return Ok(());
    }
    let server = std::thread::spawn(move || serve_forever(&listener, &mut target));
    let mut gdb = Command::new(&args.gdb);
    gdb.arg("-q");
    if let Some(exe) = &exe {
        gdb.arg(exe);
    }
    gdb.args(["-ex", &format!("target remote {addr}")]);
    let status = gdb
        .status()
        .with_context(|| format!("cannot start {}", args.gdb.display()))?;
    drop(server);
    if !status.success() {
        eprintln!("rtit: gdb exited with {status}");
    }
    Ok(())
}

/// Serves one gdb at a time, accepting a new one after each disconnects.
fn serve_forever(listener: &TcpListener, target: &mut ReplayTarget) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let _ = conn.set_nodelay(true);
        target.session.set_position(0);
        target.breakpoints.clear();
        match rtit_stub::serve_connection(target, conn) {
            Ok(reason) => eprintln!("rtit: gdb disconnected ({reason:?}); waiting for the next one"),
            Err(e) => eprintln!("rtit: connection ended: {e}"),
        }
    }
}

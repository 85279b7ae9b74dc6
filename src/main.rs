//! `rtit`: record a program's control flow with Intel RTIT and debug the recording in gdb.
//!
//! One module per subcommand under `cmd/`; this file only parses the command line and
//! reports errors.

mod cmd;
mod plugin;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Record-and-replay debugging on Intel Real Time Instruction Trace.
#[derive(Debug, Parser)]
#[command(name = "rtit", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program and record its control flow: `rtit record -- PROGRAM [ARGS]`.
    Record(cmd::record::RecordArgs),
    /// Serve a recording to gdb with reverse execution (and start gdb, as `rr replay` does).
    Replay(cmd::replay::ReplayArgs),
    /// Summarise a recording (default: the latest).
    Info(cmd::info::InfoArgs),
    /// List the recordings.
    Ls(cmd::ls::LsArgs),
    /// Print the packets of a raw RTIT trace, like libipt's ptdump.
    Dump(cmd::dump::DumpArgs),
    /// Print every executed instruction of a trace, like gdb's `record instruction-history`.
    Insns(cmd::insns::InsnsArgs),
    /// Print the function-call history of a trace, like gdb's `record function-call-history`.
    Calls(cmd::calls::CallsArgs),
    /// Compare the replayed register values with those `rtit record --truth` sampled.
    CheckValues(cmd::check_values::CheckValuesArgs),
    /// Build a qemu-x86_64 that can load plugins (QEMU 10 from Debian's source package), for
    /// the qemu backend; prints its path.
    BuildQemu(cmd::build_qemu::BuildQemuArgs),
}

/// A command that prints a listing ends quietly when its reader goes away (`rtit insns | head`),
/// killed by SIGPIPE as `ls` or `grep` are (status 141 in a shell), instead of Rust's default
/// of ignoring SIGPIPE, which turns the next `println!` into a panic. Not for `record` and
/// `replay`, which write to pipes and sockets that may close while they go on.
fn die_quietly_on_a_closed_stdout() {
    #[allow(unsafe_code)]
    // SAFETY: restoring the default action of SIGPIPE at start-up, before any other thread
    // exists; no handler is installed.
    unsafe {
        let _ = nix::sys::signal::signal(nix::sys::signal::Signal::SIGPIPE, nix::sys::signal::SigHandler::SigDfl);
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Record(_) | Command::Replay(_)) {
        die_quietly_on_a_closed_stdout();
    }
    let result = match cli.command {
        Command::Record(args) => match cmd::record::run(&args) {
            Ok(status) => return ExitCode::from(status),
            Err(e) => Err(e),
        },
        Command::Replay(args) => cmd::replay::run(&args),
        Command::Info(args) => cmd::info::run(&args),
        Command::Ls(args) => cmd::ls::run(&args),
        Command::Dump(args) => cmd::dump::run(&args),
        Command::Insns(args) => cmd::insns::run(&args),
        Command::Calls(args) => cmd::calls::run(&args),
        Command::CheckValues(args) => cmd::check_values::run(&args),
        Command::BuildQemu(args) => cmd::build_qemu::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("rtit: error: {}", said_once(&err));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, each said once: an error whose message already
/// quotes its cause (`cannot read F: Is a directory (os error 21)`) is not followed by that
/// cause again, as anyhow's `{:#}` would.
fn said_once(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_quoting_its_cause_is_not_followed_by_it_again() {
        let io = std::io::Error::from(std::io::ErrorKind::IsADirectory);
        let words = io.to_string();
        let quoting = anyhow::Error::new(rtit_replay_core::plain_file::PlainFileError::Io {
            path: "rec/trace.rtit".into(),
            source: std::sync::Arc::new(io),
        });
        assert_eq!(said_once(&quoting), format!("cannot read rec/trace.rtit: {words}"));
        assert_eq!(
            format!("{quoting:#}"),
            format!("cannot read rec/trace.rtit: {words}: {words}")
        );
        // A context that adds words keeps its cause.
        let e = anyhow::anyhow!("inner problem").context("cannot replay the recording");
        assert_eq!(said_once(&e), "cannot replay the recording: inner problem");
    }
}

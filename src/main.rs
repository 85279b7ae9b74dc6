//! `rtit`: record a program's control flow with Intel RTIT and debug the recording in gdb.
//!
//! One module per subcommand under `cmd/`; this file only parses the command line and
//! reports errors.

mod cmd;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("rtit: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

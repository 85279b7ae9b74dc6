//! Running the program to where tracing starts and reading its registers there: a
//! breakpoint at the start point, hit before the instruction runs (QEMU checks breakpoints
//! before it looks up the next translation block, so the plugin has not seen the
//! instruction either), then removed.

use std::path::PathBuf;
use std::time::Duration;

use super::remote::{registers, stop, Received, Remote, Stop};
use super::GdbstubError;
use crate::outcome::RegisterMap;

/// The auxiliary vector's entry for the program's run-time entry point.
const AT_ENTRY: u64 = 9;

/// SIGTRAP in GDB's numbering: what a breakpoint reports.
const GDB_SIGTRAP: u8 = 5;

/// Where tracing starts, as the launcher knows it before the program runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartPoint {
    /// A run-time address.
    Address(u64),
    /// A symbol of the program, relocated by its load bias once it is loaded.
    Symbol {
        /// The program's file.
        program: PathBuf,
        /// The symbol.
        name: String,
    },
}

/// How running to the start point ended.
pub enum Reached {
    /// The registers before the start point's first instruction ran.
    Registers(RegisterMap),
    /// They cannot be read, and why; the program was let go.
    Not(String),
    /// The program ended first.
    Ended,
}

/// Runs the program, stopped at its first instruction, to the first execution of `start`.
/// The program's own signals on the way are passed on as they came; `done` says rtit has
/// stopped waiting.
pub fn run_to(remote: &mut Remote, start: &StartPoint, done: impl Fn() -> bool) -> Result<Reached, GdbstubError> {
    let address = match address(remote, start)? {
        Ok(a) => a,
        Err(why) => return Ok(Reached::Not(why)),
    };
    let breakpoint = format!("{address:x},1");
    let reply = remote.request(&format!("Z0,{breakpoint}"))?;
    if reply != "OK" {
        return Ok(Reached::Not(format!(
            "QEMU's gdbstub refused a breakpoint at {address:#x} ({reply:?})"
        )));
    }
    remote.send("c")?;
    loop {
        let reply = match remote.receive(Some(Duration::from_millis(100)))? {
            Received::Closed => return Ok(Reached::Ended),
            Received::TimedOut if done() => return Ok(Reached::Ended),
            Received::TimedOut => continue,
            Received::Packet(reply) => reply,
        };
        match stop(&reply)? {
            Stop::Ended => return Ok(Reached::Ended),
            Stop::Signal(GDB_SIGTRAP) => {
                let regs = registers(&remote.request("g")?)?;
                if regs.get("rip").map(String::as_str) == Some(&format!("{address:#x}")) {
                    let reply = remote.request(&format!("z0,{breakpoint}"))?;
                    if reply != "OK" {
                        return Err(GdbstubError::Protocol(format!(
                            "the breakpoint at {address:#x} cannot be removed ({reply:?})"
                        )));
                    }
                    return Ok(Reached::Registers(regs));
                }
                // The program's own trap.
                remote.send(&format!("C{GDB_SIGTRAP:02x}"))?;
            }
            Stop::Signal(s) => remote.send(&format!("C{s:02x}"))?,
        }
    }
}

/// The run-time address of `start`, or why it has none: a symbol of a position-independent
/// program is moved by the bias between its linked and its run-time entry point (AT_ENTRY).
fn address(remote: &mut Remote, start: &StartPoint) -> Result<Result<u64, String>, GdbstubError> {
    let (program, name) = match start {
        StartPoint::Address(a) => return Ok(Ok(*a)),
        StartPoint::Symbol { program, name } => (program, name),
    };
    let path = program.display().to_string();
    let bytes = match std::fs::read(program) {
        Ok(b) => b,
        Err(e) => return Ok(Err(format!("cannot read {path}: {e}"))),
    };
    let found = rtit_replay_core::image::defined_symbol(&path, &bytes, name)
        .and_then(|(at, relocated)| Ok((at, relocated, rtit_replay_core::image::entry(&path, &bytes)?)));
    let (at, relocated, linked_entry) = match found {
        Ok(f) => f,
        Err(e) => return Ok(Err(e.to_string())),
    };
    if !relocated {
        return Ok(Ok(at));
    }
    let entry = remote
        .auxv()?
        .into_iter()
        .find(|&(kind, _)| kind == AT_ENTRY)
        .map(|(_, v)| v);
    Ok(match entry {
        Some(entry) => Ok(at.wrapping_add(entry.wrapping_sub(linked_entry))),
        None => Err("QEMU's auxiliary vector has no AT_ENTRY".into()),
    })
}

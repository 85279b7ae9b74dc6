//! `monitor last-write ADDR [LEN]` and `monitor next-write ADDR [LEN]` (issue 41): which
//! instruction last wrote these bytes before the current position, or writes them next after
//! it, and what they held before and after, without moving (WinDbg TTD's memory queries,
//! UndoDB's "last write"). The search is a watchpoint's ([`Values::first_access`]); `monitor
//! goto` then goes there.
//!
//! [`Values::first_access`]: rtit_replay_core::state::Values::first_access

use gdbstub::outputln;
use gdbstub::target::ext::monitor_cmd::ConsoleOutput;
use rtit_replay_core::flow::decode_insn;
use rtit_replay_core::session::Session;
use rtit_replay_core::state::watch::{Found, Watch, WatchKind};

use crate::keep_alive::KeepAlive;
use crate::target::ReplayTarget;

/// The most bytes one question watches, and shows.
const MAX_LEN: u64 = 1 << 20;
const SHOWN: u64 = 32;

/// Answers `monitor last-write` (`next`: `next-write`) for `addr` (hex) and `len` (bytes).
pub(crate) fn find(target: &mut ReplayTarget, next: bool, addr: &str, len: Option<&str>, out: &mut ConsoleOutput<'_>) {
    let cmd = if next { "next-write" } else { "last-write" };
    let Some(address) = u64::from_str_radix(addr.trim_start_matches("0x"), 16).ok() else {
        return outputln!(out, "{cmd}: `{addr}` is not an address (hex: 0x4000a000)");
    };
    let len = match len.map(str::parse::<u64>) {
        None => 1,
        Some(Ok(n)) if (1..=MAX_LEN).contains(&n) => n,
        Some(_) => return outputln!(out, "{cmd}: the length is a count of bytes from 1 to {MAX_LEN}"),
    };
    let s = &mut target.session;
    let here = s.position();
    let watch = [Watch {
        address,
        len,
        kind: WatchKind::Write,
    }];
    let mut alive = KeepAlive::new("looking for the write");
    let found = match s.values() {
        None => return outputln!(out, "{cmd}: there is no history to look in"),
        Some(v) => match next {
            true => v.first_access(here, v.len(), &watch, &mut || alive.tell(out)),
            false => v.last_access(0, here, &watch, &mut || alive.tell(out)),
        },
    };
    alive.end(out);
    let what = format!("{len} byte{} at {address:#x}", if len == 1 { "" } else { "s" });
    match found {
        None => outputln!(out, "{cmd}: interrupted"),
        Some(Found::Nothing) => {
            let side = if next { "after" } else { "before" };
            outputln!(out, "no write of {what} {side} position {here}");
        }
        Some(Found::Unknown { position }) => {
            let at = place(s, position);
            outputln!(
                out,
                "position {position}, {at}, may write {what}: an address it uses is not known there, so the search stops at it"
            );
        }
        Some(Found::Hit { position, .. }) => {
            let at = place(s, position);
            let which = if next { "next" } else { "last" };
            outputln!(out, "{which} write of {what}: position {position}, {at}");
            let shown = len.min(SHOWN);
            let more = if len > SHOWN { " …" } else { "" };
            outputln!(out, "  before: {}{more}", bytes(s, position, address, shown));
            outputln!(out, "  after:  {}{more}", bytes(s, position + 1, address, shown));
            outputln!(
                out,
                "  (`monitor goto {position}` shows the state before it, `monitor goto {}` after it)",
                position + 1
            );
        }
    }
}

/// The instruction at `position`: its address, function, source line and text.
fn place(s: &Session, position: u64) -> String {
    let Some(ip) = s.ip_at(position) else {
        return "an instruction the history does not show".to_string();
    };
    let space = s.space();
    let name = space.locate(ip).map(|l| format!(" {l}")).unwrap_or_default();
    let line = (space.source_line(ip)).map_or_else(String::new, |l| format!(" ({}:{})", l.file, l.line));
    let text = decode_insn(space, ip).map_or_else(|e| e.to_string(), |i| i.to_string());
    format!("{ip:#x}{name}{line}: `{text}`")
}

/// `n` bytes at `address` at `position`, in hex, `??` where unknown.
fn bytes(s: &mut Session, position: u64, address: u64, n: u64) -> String {
    let Some(known) = s.values().and_then(|v| v.at(position)) else {
        return "unknown".to_string();
    };
    (0..n)
        .map(|i| match known.memory(address + i, 1) {
            Ok(Some(b)) => format!("{:02x}", b[0]),
            _ => "??".to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

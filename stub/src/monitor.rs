//! `monitor` commands (gdb's `qRcmd`): where the replay is, moving to any position, what the
//! recording is, the instructions around the position.
//!
//! `monitor goto` moves without a stop reply (gdbstub cannot send one from a monitor
//! command), so gdb keeps the registers and stack memory it cached at the old position and
//! would show frames that mix two positions. The gdb that `rtit replay` starts flushes both
//! caches after every monitor command ([`GDB_INIT`]); any other gdb needs the same two
//! commands, which `goto` says.

use gdbstub::target::ext::monitor_cmd::{ConsoleOutput, MonitorCmd};
use gdbstub::{output, outputln};
use rtit_replay_core::flow::decode_insn;
use rtit_replay_core::timeline::cache::Origin;

use crate::keep_alive::{KeepAlive, HISTORY_WAIT};
use crate::target::ReplayTarget;

/// gdb commands that make gdb re-read registers and memory after a monitor command (quiet
/// in a hook), for the gdb `rtit replay` starts and for users' own `.gdbinit`.
pub const GDB_INIT: &str = "\
define hookpost-monitor
  maintenance flush register-cache
  maintenance flush dcache
end
";

/// What a gdb with [`GDB_INIT`] says once connected, so `goto` stops telling it to flush.
pub const FLUSHES: &str = "monitor flushes-caches";

/// Most instructions `monitor insns` shows on each side: every line is a packet to gdb.
const MAX_INSNS: u64 = 1000;

/// How long a monitor command waits for the history at most.
const HISTORY_PATIENCE: std::time::Duration = std::time::Duration::from_secs(600);

const MONITOR_HELP: &str = "\
rtit monitor commands:
  monitor when        the current position and the history's positions (0..LAST)
  monitor goto N      move to position N (a gdb not started by `rtit replay` must then run
                      `maint flush register-cache` and `maint flush dcache`)
  monitor info        a summary of the recording
  monitor wait        wait until the values are final everywhere (a stop already waits for
                      its own; without anchors the rest come in the background): for scripts
  monitor insns [N]   the instructions around the current position (N each side, default 5)
  monitor last-write ADDR [LEN]
  monitor next-write ADDR [LEN]
                      the previous (next) write of LEN bytes (default 1) at a hex address:
                      its position, instruction and source line, the bytes before and after;
                      without moving (`monitor goto` goes there)
  monitor why-unknown REG|ADDR
                      why a register (rax, rsp, xmm0 …) or the byte at an address (0x…) is unknown here:
                      what lost it, and at which position (for `monitor goto`)
  monitor help        this list";

impl MonitorCmd for ReplayTarget {
    fn handle_monitor_cmd(&mut self, cmd: &[u8], mut out: ConsoleOutput<'_>) -> Result<(), Self::Error> {
        let cmd = String::from_utf8_lossy(cmd);
        let mut words = cmd.split_whitespace();
        let (first, second) = (words.next(), words.next());
        let third = cmd.split_whitespace().nth(2);
        if first == Some("when") && second.is_none() && !self.session.ready() {
            // Where gdb is needs no history (the start, the beginning, the end): only how
            // long it is does.
            outputln!(
                out,
                "position {} (the history of {} instructions is still being read; a move to where it has not reached yet may wait for it)",
                self.session.position(),
                self.session.recording().manifest.instructions
            );
            return Ok(());
        }
        // What the recording is needs no history; what the history holds is said once it is
        // decoded (a script's `monitor wait` waits for it).
        if first == Some("info") && second.is_none() && !self.session.ready() {
            about(self, &mut out);
            outputln!(
                out,
                "history   {} instructions, being read in the background (stops at the beginning, at the end and between anchors answer meanwhile; `monitor info` says more once it is done)",
                self.session.recording().manifest.instructions
            );
            // A user asking whether what gdb shows now will change: it will not.
            if self.session.answers_early() {
                outputln!(
                    out,
                    "values    final at every stop: each worked out from the whole states the recording holds (start, anchors, end) when it is shown"
                );
            }
            return Ok(());
        }
        // A position the beginning or a window answers needs no whole history.
        if let (Some("goto"), Some(n), None) = (first, second.and_then(|n| n.parse::<u64>().ok()), words.next()) {
            if self.session.goto_early(n) {
                moved(self, n, &mut out);
                return Ok(());
            }
        }
        let needs_history = !matches!(first, Some("flushes-caches" | "help") | None);
        // The history may still be decoded in the background: wait for it, telling gdb so
        // every half second (see `HISTORY_WAIT`).
        if needs_history && !self.session.wait_ready(HISTORY_WAIT) {
            let n = self.session.recording().manifest.instructions;
            output!(out, "waiting for the history ({n} instructions) to be decoded");
            out.flush();
            let since = std::time::Instant::now();
            while !self.session.wait_ready(HISTORY_WAIT) {
                if since.elapsed() >= HISTORY_PATIENCE {
                    outputln!(out, "\nthe history is still being decoded; try again in a moment");
                    return Ok(());
                }
                output!(out, ".");
                out.flush();
            }
            outputln!(out, "");
        }
        match (first, second) {
            (Some("when"), None) => {
                let s = &self.session;
                outputln!(out, "position {} of {}", s.position(), span(s.len()));
            }
            (Some("goto"), Some(n)) => goto(self, n, &mut out),
            (Some("flushes-caches"), None) => self.gdb_flushes = true,
            (Some("info"), None) => info(self, &mut out),
            (Some("wait"), None) => wait_values(self, &mut out),
            (Some("insns"), n) => insns(self, n, &mut out),
            (Some("why-unknown"), Some(what)) => why_unknown(self, what, &mut out),
            (Some(cmd @ ("last-write" | "next-write")), Some(addr)) => {
                crate::writes::find(self, cmd == "next-write", addr, third, &mut out)
            }
            (Some(cmd @ ("last-write" | "next-write")), None) => {
                outputln!(out, "{cmd} needs an address: `monitor {cmd} 0x4000a000 8`")
            }
            (Some("help"), None) | (None, _) => outputln!(out, "{MONITOR_HELP}"),
            (Some("why-unknown"), None) => outputln!(
                out,
                "why-unknown needs a register or an address: `monitor why-unknown rax`, `monitor why-unknown 0x4000a000`"
            ),
            (Some("goto"), None) => outputln!(out, "goto needs a position: `monitor goto 1000`"),
            (Some(cmd), _) => outputln!(
                out,
                "`{}` is not a monitor command rtit knows in this form\n{MONITOR_HELP}",
                cmd.to_owned() + &second.map(|a| format!(" {a}")).unwrap_or_default()
            ),
        }
        Ok(())
    }
}

fn goto(target: &mut ReplayTarget, n: &str, out: &mut ConsoleOutput<'_>) {
    let s = &mut target.session;
    match n.parse::<u64>() {
        Ok(n) if n <= s.last() => {
            s.set_position(n);
            moved(target, n, out);
        }
        _ => outputln!(out, "goto: `{n}` is not a position of {}", span(s.len())),
    }
}

/// What `goto` says once it moved to `n`, its values worked out.
fn moved(target: &mut ReplayTarget, n: u64, out: &mut ConsoleOutput<'_>) {
    let s = &mut target.session;
    settle(s, out);
    outputln!(out, "position {n}, rip {:#x}", s.pc());
    if let Some(tid) = running_thread(target) {
        // gdb keeps the thread it had selected (a monitor command cannot tell it of a stop):
        // its registers are that thread's, as it waits here.
        outputln!(
            out,
            "thread 1.{tid} runs here; gdb shows the thread it has selected (`thread find 1.{tid}` names this one's number for `thread N`)"
        );
    }
    if !target.gdb_flushes {
        outputln!(
            out,
            "(a gdb not started by `rtit replay`: run `maint flush register-cache` and `maint flush dcache` now)"
        );
    }
}

/// Works out the values at the position `goto` moved to before it answers, so that what gdb
/// reads there next is final (see [`KeepAlive`]).
fn settle(s: &mut rtit_replay_core::session::Session, out: &mut ConsoleOutput<'_>) {
    let mut alive = KeepAlive::new("working out the values here");
    s.settle(&mut || alive.tell(out));
    alive.end(out);
}

/// The positions of a history of `len`, as every monitor reply names them: `0..LAST`, both
/// ends included, so that no count (one more than the last position) reads as a position.
fn span(len: u64) -> String {
    match len {
        0 => "an empty history".to_string(),
        n => format!("0..{}", n - 1),
    }
}

/// `monitor why-unknown REG|ADDR`: the cause each pass gives for an unknown value.
fn why_unknown(target: &mut ReplayTarget, what: &str, out: &mut ConsoleOutput<'_>) {
    let name = what.trim_start_matches('$');
    if !target.avx512 && is_avx512_only(name) {
        return outputln!(
            out,
            "why-unknown: `{what}` is not a register of this recording's CPU (no AVX-512)"
        );
    }
    let s = &mut target.session;
    let (label, known, why) = if let Some(hex) = name.strip_prefix("0x") {
        let Ok(addr) = u64::from_str_radix(hex, 16) else {
            return outputln!(out, "why-unknown: `{what}` is not a hex address");
        };
        let known = s.read_memory(addr, 1).map(|b| u64::from(b[0]));
        (format!("the byte at {addr:#x}"), known, s.why_memory(addr))
    } else if let Some(bytes) = s.vector_by_name(name) {
        match bytes {
            // Lowest byte first, as the register sits in memory (gdb's `p $xmm0` shows lanes).
            Some(bytes) => {
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                return outputln!(out, "{name} is known here: {hex} (bytes in memory order)");
            }
            None => (name.to_string(), None, s.why_register(name)),
        }
    } else {
        let known = s.register(name);
        match s.why_register(name) {
            Some(why) => (name.to_string(), known, Some(why)),
            None => {
                return outputln!(
                    out,
                    "why-unknown: `{what}` is not a register rtit tracks the causes of (general and vector registers), nor a 0x address"
                )
            }
        }
    };
    let Some((forward, backward)) = why else {
        return outputln!(out, "{label} is unknown: the history is empty");
    };
    if let Some(v) = known {
        // Known from one pass at least; say which pass lost it (a store through an address
        // only the other pass knows forgets memory in the first).
        outputln!(out, "{label} is known here: {v:#x}{}", whose(target, &label));
        for (pass, w, backwards) in [("forward", forward, false), ("backward", backward, true)] {
            if let Some(w) = w {
                let cause = because(w, backwards);
                outputln!(
                    out,
                    "  (the {pass} pass alone would not know it: {cause}; the other pass does)"
                );
            }
        }
        return;
    }
    let describe = |w: Option<rtit_replay_core::state::Why>, backwards: bool| match w {
        Some(w) => because(w, backwards),
        None => "known, but the other pass disagrees (a model error; please report it)".to_string(),
    };
    outputln!(
        out,
        "{label} is unknown here (position {}{})",
        target.session.position(),
        whose(target, &label)
    );
    let s = &mut target.session;
    let (done, total) = s.values_walked();
    if done < total && s.exact_states().is_none() {
        // The passes below are the partial ones: the answer may come once they are done.
        outputln!(
            out,
            "  the values are still being worked out ({}%): ask again once `monitor info` says final",
            done * 100 / total
        );
    }
    outputln!(out, "  going forwards:  {}", describe(forward, false));
    outputln!(out, "  going backwards: {}", describe(backward, true));
}

/// The Linux thread id of the thread that runs at the current position, in a recording of
/// several (gdb names it "Thread 1.TID"); `why-unknown` answers for it, whichever thread gdb
/// has selected.
fn running_thread(target: &ReplayTarget) -> Option<i64> {
    let s = target.schedule.as_ref()?;
    (s.threads().len() > 1).then(|| s.running(target.session.position()))
}

/// Which thread's register `why-unknown` answers for, where there are several (memory is
/// every thread's).
fn whose(target: &ReplayTarget, label: &str) -> String {
    match running_thread(target) {
        Some(tid) if !label.starts_with("the byte at") => {
            format!(", in thread 1.{tid}, the one running here")
        }
        _ => String::new(),
    }
}

/// Whether `name` is a register only AVX-512 has: zmm0-31, and xmm/ymm 16-31.
fn is_avx512_only(name: &str) -> bool {
    let number = |prefix: &str| name.strip_prefix(prefix).and_then(|n| n.parse::<u32>().ok());
    number("zmm").is_some() || number("xmm").or(number("ymm")).is_some_and(|n| (16..32).contains(&n))
}

/// What lost a value, and where: the backward pass starts from the end state, so what it
/// never knew was not in that state.
fn because(w: rtit_replay_core::state::Why, backwards: bool) -> String {
    match w.cause {
        rtit_replay_core::state::Cause::NotRecorded if backwards => "not in the end state".to_string(),
        cause => format!("{cause} at position {}", w.position),
    }
}

/// `monitor wait`: waits until the values are final, a dot every half second (each console packet
/// restarts gdb's wait for the answer, as for the history), as long as it takes.
/// A gdb not started by `rtit replay` keeps the registers it read before: it must flush them.
fn wait_values(target: &mut ReplayTarget, out: &mut ConsoleOutput<'_>) {
    let s = &mut target.session;
    if s.wait_values(HISTORY_WAIT) {
        // Final already: what gdb read before is what it would read now.
        return outputln!(out, "values final");
    }
    let (done, total) = s.values_walked();
    output!(
        out,
        "waiting for the values ({}% worked out)",
        done * 100 / total.max(1)
    );
    out.flush();
    // As long as it takes: the chains end on any history this machine can hold.
    while !s.wait_values(HISTORY_WAIT) {
        output!(out, ".");
        out.flush();
    }
    outputln!(out, "\nvalues final");
    if !target.gdb_flushes {
        outputln!(
            out,
            "(a gdb not started by `rtit replay`: run `maint flush register-cache` and `maint flush dcache` now, for what it read before)"
        );
    }
}

/// The first lines of `monitor info`: what the recording is, and its threads here.
fn about(target: &ReplayTarget, out: &mut ConsoleOutput<'_>) {
    let s = &target.session;
    let rec = s.recording();
    let m = &rec.manifest;
    outputln!(out, "recording {}", rec.dir.display());
    outputln!(out, "command   {}", m.command.join(" "));
    outputln!(
        out,
        "backend   {}, {} instructions, {} bytes of trace",
        m.backend,
        m.instructions,
        m.trace_bytes
    );
    outputln!(out, "ended     {}", m.end);
    if let Some(t) = &target.schedule {
        let here = t.running(s.position());
        outputln!(
            out,
            "threads   {}, one at a time ({} switches); here thread {here} runs, {} exist",
            t.threads().len(),
            t.switches(),
            t.alive(s.position()).len()
        );
    }
    for image in &m.images {
        if let Some(cmd) = image.add_symbol_file_command(&rec.dir) {
            outputln!(out, "module    {}: to debug it with symbols, run in gdb:", image.path);
            outputln!(out, "  {cmd}");
        }
    }
}

fn info(target: &ReplayTarget, out: &mut ConsoleOutput<'_>) {
    about(target, out);
    let s = &target.session;
    let rec = s.recording();
    let m = &rec.manifest;
    if let Some(e) = s.failure() {
        return outputln!(out, "history   none: {e}");
    }
    if let Some(e) = s.incomplete() {
        outputln!(out, "warning   {e}");
    }
    let faulted = s.incomplete().is_none()
        && matches!(
            &m.end,
            rtit_replay_core::recording::EndState::Signaled { ip: Some(_), .. }
        );
    let last = if faulted {
        " (the last at the faulting instruction, which did not retire)"
    } else {
        ""
    };
    outputln!(out, "history   {} positions, {}{last}", s.len(), span(s.len()));
    let t = s.timeline();
    let (runs, blocks) = t.counts();
    outputln!(
        out,
        "          {runs} runs of {blocks} distinct blocks, {:.2} MiB ({:.2} bytes a position)",
        t.heap_bytes() as f64 / f64::from(1 << 20),
        t.heap_bytes() as f64 / s.len().max(1) as f64
    );
    match s.origin() {
        None => {}
        Some(Origin::Read(path)) => outputln!(out, "          read back from {}", path.display()),
        Some(Origin::Decoded { took, set_aside }) => {
            outputln!(out, "          decoded in {:.2} s", took.as_secs_f64());
            if let Some(why) = set_aside {
                outputln!(out, "          (the stored timeline was not used: {why})");
            }
        }
    }
    let v = s.values_stats();
    match v.walked {
        (done, total) if s.exact_states().is_some() => outputln!(
            out,
            "values    final at every stop: from the {} whole states the recording holds (start, anchors, end) on either side; states kept along the history for fast stops: {}%",
            s.exact_states().unwrap_or(0),
            done * 100 / total.max(1)
        ),
        (done, total) if done < total => outputln!(
            out,
            "values    being worked out in the background: {}% (a stop waits for those it shows)",
            done * 100 / total
        ),
        _ => outputln!(
            out,
            "values    final; checkpoints every {} positions, {} held",
            v.interval,
            v.checkpoints
        ),
    }
    if let Some((bytes, done, all)) = s.write_index_size() {
        outputln!(
            out,
            "watch     index of written addresses: {done} of {all} stretches, {:.2} MiB ({:.3} bytes a position)",
            bytes as f64 / f64::from(1 << 20),
            bytes as f64 / s.len().max(1) as f64
        );
    }
    if let Some(text) = m.kernel_text {
        outputln!(out, "kernel    _text at {text:#x} (kallsyms)");
    }
    outputln!(out, "decode errors {}", s.errors().count());
    for spin in s.spins().take(3) {
        outputln!(out, "note      {spin}");
    }
    if !m.gaps.is_empty() {
        let lost: u64 = m.gaps.iter().filter_map(|g| g.lost_bytes).sum();
        outputln!(
            out,
            "gaps      {} (trace lost where the output region wrapped; {lost} bytes known lost)",
            m.gaps.len()
        );
    }
}

fn insns(target: &ReplayTarget, n: Option<&str>, out: &mut ConsoleOutput<'_>) {
    let s = &target.session;
    let n = match n.map(str::parse::<u64>) {
        None => 5,
        Some(Ok(n)) if n <= MAX_INSNS => n,
        Some(_) => return outputln!(out, "insns: `N` is a count from 0 to {MAX_INSNS}"),
    };
    let here = s.position();
    for p in here.saturating_sub(n)..=here.saturating_add(n).min(s.last()) {
        let Some(ip) = s.ip_at(p) else { continue };
        let text = decode_insn(s.space(), ip).map_or_else(|e| e.to_string(), |i| i.to_string());
        let name = s.space().locate(ip).map(|l| l.to_string()).unwrap_or_default();
        let mark = if p == here { "=>" } else { "  " };
        outputln!(out, "{mark} {p:>8}  {ip:#014x}  {name:<28} {text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_named_by_their_range_both_ends_included() {
        assert_eq!(span(12491), "0..12490");
        assert_eq!(span(1), "0..0");
        assert_eq!(span(0), "an empty history");
        assert!(MONITOR_HELP.contains("(0..LAST)"), "{MONITOR_HELP}");
    }

    #[test]
    fn the_help_starts_with_its_title_and_the_init_script_defines_the_hook() {
        assert!(MONITOR_HELP.starts_with("rtit monitor commands:\n"), "{MONITOR_HELP}");
        assert!(GDB_INIT.starts_with("define hookpost-monitor\n") && GDB_INIT.ends_with("end\n"));
    }
}

//! The blocking event loop: carries out gdb's resume requests on the session and reports why
//! it stopped. Long continues poll the connection, so Ctrl-C interrupts them.

use gdbstub::common::Signal;
use gdbstub::conn::{Connection, ConnectionExt};
use gdbstub::stub::run_blocking::{BlockingEventLoop, Event, WaitForStopReasonError};
use gdbstub::stub::MultiThreadStopReason;
use gdbstub::target::ext::base::reverse_exec::ReplayLogPosition;
use gdbstub::target::ext::catch_syscalls::CatchSyscallPosition;
use gdbstub::target::Target;
use rtit_replay_core::session::Stop;
use rtit_replay_core::state::watch::WatchKind;

use crate::conn::{Conn, PACKET_SIZE};
use crate::target::{gdb_tid, Action, ReplayTarget, ONE};
use crate::thread_moves::{reverse_target, step_target};

/// The event loop of [`ReplayTarget`] over a [`Conn`].
pub enum ReplayEventLoop {}

type StopReason = MultiThreadStopReason<u64>;

impl BlockingEventLoop for ReplayEventLoop {
    type Target = ReplayTarget;
    type Connection = Conn;
    type StopReason = StopReason;

    #[allow(clippy::type_complexity)]
    fn wait_for_stop_reason(
        target: &mut ReplayTarget,
        conn: &mut Self::Connection,
    ) -> Result<
        Event<StopReason>,
        WaitForStopReasonError<<ReplayTarget as Target>::Error, <Self::Connection as Connection>::Error>,
    > {
        let mut incoming = || conn.peek().map(|b| b.is_some()).unwrap_or(true);
        let (breakpoints, catch, watches) = (&target.breakpoints, &target.catch, &target.watches);
        let schedule = target.schedule.as_ref();
        let session = &mut target.session;
        // A step of one thread of several that is not the next (previous) position: there.
        let to = |session: &mut rtit_replay_core::session::Session, at: Option<u64>, none: Stop| match at {
            Some(p) => {
                session.set_position(p);
                Stop::Step
            }
            None => none,
        };
        let stop = match target.pending.take() {
            Some(Action::Continue) => session.continue_forward_watching(breakpoints, catch, watches, &mut incoming),
            Some(Action::ReverseContinue) => {
                session.continue_backward_watching(breakpoints, catch, watches, &mut incoming)
            }
            Some(Action::Step(tid)) => {
                match schedule.and_then(|s| step_target(s, tid.get() as i64, session.position())) {
                    Some(at) => to(session, at, Stop::End),
                    None => session.step_forward_watching(watches),
                }
            }
            Some(Action::ReverseStep(tid)) => {
                match schedule.and_then(|s| reverse_target(s, tid.get() as i64, session.position())) {
                    Some(at) => to(session, at, Stop::Begin),
                    None => session.step_backward_watching(watches),
                }
            }
            None => Stop::Step,
        };
        // The thread that runs where it stopped: the one gdb is told of.
        let tid = schedule.map_or(ONE, |s| gdb_tid(s.running(session.position())));
        target.selected = tid;
        let threads = schedule.is_some();
        // The stop's values first: what gdb reads at the stop is final when it hears of it
        // (gdb waits for a stop reply as long as it takes; a read after it would time out).
        let settled = matches!(stop, Stop::Interrupted | Stop::NoHistory) || session.settle(&mut incoming);
        let stop = if settled { stop } else { Stop::Interrupted };
        let reason = match stop {
            Stop::Interrupted => {
                let byte = conn.read().map_err(WaitForStopReasonError::Connection)?;
                return Ok(Event::IncomingData(byte));
            }
            Stop::Step if threads => StopReason::SignalWithThread {
                tid,
                signal: Signal::SIGTRAP,
            },
            Stop::Step => StopReason::DoneStep,
            Stop::Watch { kind, address, .. } => StopReason::Watch {
                tid,
                kind: match kind {
                    WatchKind::Write => gdbstub::target::ext::breakpoints::WatchKind::Write,
                    WatchKind::Read => gdbstub::target::ext::breakpoints::WatchKind::Read,
                    WatchKind::Access => gdbstub::target::ext::breakpoints::WatchKind::ReadWrite,
                },
                addr: address,
            },
            Stop::UnknownAccess { position } => {
                let ip = session.ip_at(position).unwrap_or(0);
                let insn = rtit_replay_core::flow::decode_insn(session.space(), ip)
                    .map_or_else(|e| e.to_string(), |i| i.to_string());
                let text = format!(
                    "rtit: the instruction at position {position} ({ip:#x}: `{insn}`) may touch watched memory: the address it uses is not known there, so the search stops at it\n"
                );
                conn.console(&text).map_err(WaitForStopReasonError::Connection)?;
                StopReason::Signal(Signal::SIGTRAP)
            }
            Stop::Breakpoint => StopReason::SwBreak(tid),
            Stop::Begin => StopReason::ReplayLog {
                tid: threads.then_some(tid),
                pos: ReplayLogPosition::Begin,
            },
            Stop::End => StopReason::ReplayLog {
                tid: threads.then_some(tid),
                pos: ReplayLogPosition::End,
            },
            Stop::Signal(s) if threads => StopReason::SignalWithThread {
                tid,
                signal: Signal(s as u8),
            },
            Stop::Signal(s) => StopReason::Signal(Signal(s as u8)),
            Stop::Syscall { nr, entry } => StopReason::CatchSyscall {
                tid: threads.then_some(tid),
                number: nr,
                position: match entry {
                    true => CatchSyscallPosition::Entry,
                    false => CatchSyscallPosition::Return,
                },
            },
            // Nothing to replay: end the connection (the server says why).
            Stop::NoHistory => {
                return Err(WaitForStopReasonError::Target(
                    "the history could not be decoded (`rtit replay` said why)",
                ))
            }
        };
        Ok(Event::TargetStopped(reason))
    }

    fn on_interrupt(_target: &mut ReplayTarget) -> Result<Option<StopReason>, <ReplayTarget as Target>::Error> {
        Ok(Some(StopReason::Signal(Signal::SIGINT)))
    }
}

/// Serves one gdb connection until it disconnects.
pub fn serve_connection(
    target: &mut ReplayTarget,
    conn: std::net::TcpStream,
) -> Result<gdbstub::stub::DisconnectReason, String> {
    let stub = gdbstub::stub::GdbStubBuilder::new(Conn::new(conn))
        .packet_buffer_size(PACKET_SIZE)
        .build()
        .map_err(|e| e.to_string())?;
    stub.run_blocking::<ReplayEventLoop>(target).map_err(|e| e.to_string())
}

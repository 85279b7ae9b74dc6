//! Accepting gdb connections: one debugging client at a time, never blocked by anyone.
//!
//! Each connection gets a thread that waits (at most [`FIRST_PACKET_TIMEOUT`]) for its first
//! byte, then tries to take the replay: if no one has it, the connection is served until it
//! ends; if a gdb is debugging, the newcomer gets an error packet saying so ([`BUSY`]) and is
//! closed. A connection that says nothing is dropped when its time is up and holds nothing
//! meanwhile, so it cannot delay a gdb that connects after it; nor can a crowd of them lock
//! one out: when [`MAX_WAITING`] are waiting and another connects, the one silent
//! longest is dropped to make room (`waiting`). Once attached, a gdb may sit at its prompt
//! for as long as it likes. The server keeps listening after every client.
//!
//! The busy reply is the one packet written here rather than by gdbstub, which has no way to
//! refuse a connection.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use gdbstub::stub::DisconnectReason;

use crate::event_loop::serve_connection;
use crate::target::ReplayTarget;

mod waiting;

use waiting::Waiting;
pub use waiting::MAX_WAITING;

/// How long a new connection may take to send its first byte. gdb sends its first packet at
/// once; 10 s leaves room for a loaded machine and a slow network, and bounds how long a port
/// scanner or a stuck client keeps a thread.
pub const FIRST_PACKET_TIMEOUT: Duration = Duration::from_secs(10);

/// The reply to a client that connects while a gdb is debugging (gdb prints it as a
/// "Remote failure reply").
pub const BUSY: &str = "E.rtit: another gdb is debugging this recording";

/// How long a refused client may take to close after the busy reply before it is cut off.
const LINGER: Duration = Duration::from_secs(1);

/// How long a newcomer waits for the replay before it is refused: a gdb that detaches gets
/// its last answer a moment before its connection's thread lets go of the replay, and a gdb
/// reconnecting at once must not be turned away for that moment.
const GRACE: Duration = Duration::from_millis(500);

/// What happened to a connection, for the server's log.
#[derive(Debug)]
pub enum Event {
    /// A gdb attached.
    Attached(SocketAddr),
    /// The gdb detached or killed the program.
    Detached(SocketAddr, DisconnectReason),
    /// The connection ended otherwise (gdb went away, a protocol error).
    Ended(SocketAddr, String),
    /// A client connected while a gdb was debugging and was told so.
    Busy(SocketAddr),
    /// A client sent nothing within [`FIRST_PACKET_TIMEOUT`] and was dropped.
    Silent(SocketAddr),
    /// [`MAX_WAITING`] connections were waiting for their first byte when `newcomer`
    /// connected; `dropped`, the one silent longest (`silent_for`), was closed for it.
    Crowded {
        /// The connection closed.
        dropped: SocketAddr,
        /// How long it had sent nothing.
        silent_for: Duration,
        /// The connection it made room for.
        newcomer: SocketAddr,
    },
    /// The connection could not be served at all (out of file descriptors or threads); why.
    Unserved(SocketAddr, String),
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Attached(a) => write!(f, "gdb attached from {a}"),
            Self::Detached(a, DisconnectReason::Kill) => {
                write!(f, "gdb at {a} killed the program (`kill`); waiting for the next gdb")
            }
            Self::Detached(a, _) => write!(f, "gdb at {a} detached; waiting for the next one"),
            Self::Ended(a, why) => write!(f, "connection from {a} ended: {why}; waiting for the next gdb"),
            Self::Busy(a) => write!(f, "refused {a}: another gdb is debugging this recording"),
            Self::Silent(a) => write!(
                f,
                "dropped {a}: it sent nothing in {} s",
                FIRST_PACKET_TIMEOUT.as_secs()
            ),
            Self::Crowded {
                dropped,
                silent_for,
                newcomer,
            } => write!(
                f,
                "dropped {dropped}: it had sent nothing in {:.1} s, the longest of the {MAX_WAITING} connections waiting to say something, and {newcomer} connected",
                silent_for.as_secs_f64()
            ),
            Self::Unserved(a, why) => write!(f, "closed {a} at once: {why}"),
        }
    }
}

/// Serves `target` to every connection `listener` accepts, forever, one debugging client at
/// a time; `log` hears what happens to each connection (from the connection's thread).
pub fn serve_forever(listener: &TcpListener, target: ReplayTarget, log: impl Fn(Event) + Send + Sync + 'static) {
    let target = Arc::new(Mutex::new(target));
    let log = Arc::new(log);
    let waiting = Arc::new(Waiting::default());
    for conn in listener.incoming() {
        let conn = match conn {
            Ok(conn) => conn,
            // Out of file descriptors and the like: wait for some to be freed.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let Ok(peer) = conn.peer_addr() else { continue };
        let handle = match conn.try_clone() {
            Ok(handle) => handle,
            Err(e) => {
                log(Event::Unserved(peer, format!("no handle to drop it by: {e}")));
                continue;
            }
        };
        let (id, dropped) = waiting.enter(peer, handle);
        if let Some(dropped) = dropped {
            log(Event::Crowded {
                dropped: dropped.peer,
                silent_for: dropped.silent_for,
                newcomer: peer,
            });
        }
        let (target, their_log, their_waiting) = (target.clone(), log.clone(), waiting.clone());
        let spawned = std::thread::Builder::new().name(format!("gdb {peer}")).spawn(move || {
            let log = &*their_log;
            let spoke = first_byte(&conn);
            // Dropped for a newcomer meanwhile: said when it was.
            if !their_waiting.leave(id) {
                return;
            }
            match spoke {
                Ok(true) => attach(conn, peer, &target, log),
                Ok(false) => {}
                Err(e) if is_timeout(&e) => log(Event::Silent(peer)),
                Err(_) => {}
            }
        });
        if let Err(e) = spawned {
            waiting.leave(id);
            log(Event::Unserved(peer, format!("no thread to serve it: {e}")));
        }
    }
}

/// Waits up to [`FIRST_PACKET_TIMEOUT`] for a byte: `Ok(false)` if the client closed first.
fn first_byte(conn: &TcpStream) -> io::Result<bool> {
    conn.set_read_timeout(Some(FIRST_PACKET_TIMEOUT))?;
    let spoke = conn.peek(&mut [0u8; 1])? > 0;
    conn.set_read_timeout(None)?;
    Ok(spoke)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// Serves the connection if no one else is debugging, else tells it so.
fn attach(conn: TcpStream, peer: SocketAddr, target: &Mutex<ReplayTarget>, log: &dyn Fn(Event)) {
    let Some(mut target) = take(target) else {
        refuse(conn);
        return log(Event::Busy(peer));
    };
    target.reset();
    log(Event::Attached(peer));
    let ended = serve_connection(&mut target, conn);
    drop(target);
    match ended {
        Ok(reason) => log(Event::Detached(peer, reason)),
        Err(e) => log(Event::Ended(peer, e)),
    }
}

/// The replay, if no one else has it within [`GRACE`].
fn take(target: &Mutex<ReplayTarget>) -> Option<MutexGuard<'_, ReplayTarget>> {
    let deadline = Instant::now() + GRACE;
    loop {
        match target.try_lock() {
            Ok(guard) => return Some(guard),
            // A panic while serving someone else: the replay itself is intact, start afresh.
            Err(TryLockError::Poisoned(poisoned)) => return Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Err(TryLockError::WouldBlock) => return None,
        }
    }
}

/// Acknowledges the client's first packet and answers it with [`BUSY`], then closes. The
/// client's own bytes are read until it closes (at most [`LINGER`]): closing with unread
/// input would reset the connection and could destroy the reply before gdb reads it.
fn refuse(mut conn: TcpStream) {
    let reply = format!("+${BUSY}#{:02x}", BUSY.bytes().fold(0u8, |a, b| a.wrapping_add(b)));
    if conn.write_all(reply.as_bytes()).is_err() || conn.shutdown(Shutdown::Write).is_err() {
        return;
    }
    let _ = conn.set_read_timeout(Some(LINGER));
    let deadline = Instant::now() + LINGER;
    let mut sink = [0u8; 4096];
    while Instant::now() < deadline {
        match conn.read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
}

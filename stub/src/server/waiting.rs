//! The connections waiting for their first byte, oldest first. Each waits on a thread of its
//! own; at most [`MAX_WAITING`] wait at once, so a crowd of silent connections cannot exhaust
//! threads. When one more connects, the one that has waited longest is dropped (its socket
//! shut down, which wakes its thread), not the newcomer: a crowd that stays silent then only
//! ever holds places a gdb that speaks takes from it, and a gdb sends its first packet at
//! once, so it is never the oldest of them.

use std::collections::VecDeque;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Connections waiting for their first byte at most; one more drops the oldest.
pub const MAX_WAITING: usize = 64;

/// Threads still waiting for a first byte at most, counting those of dropped connections
/// (they end as soon as they see the shutdown): a flood of connections then waits for them
/// rather than piling up threads.
const MAX_THREADS: usize = 2 * MAX_WAITING;

/// The waiting connections and their threads.
#[derive(Default)]
pub struct Waiting {
    state: Mutex<State>,
    thread_ended: Condvar,
}

#[derive(Default)]
struct State {
    /// Oldest first.
    queue: VecDeque<Waiter>,
    /// Threads that have not yet seen their first byte, a timeout or the shutdown.
    threads: usize,
    next_id: u64,
}

struct Waiter {
    id: u64,
    peer: SocketAddr,
    since: Instant,
    /// A handle on the connection (`try_clone`) to shut it down with.
    handle: TcpStream,
}

/// A connection that was dropped to make room for a newcomer.
#[derive(Debug)]
pub struct Dropped {
    /// Who it was.
    pub peer: SocketAddr,
    /// How long it had waited without a byte.
    pub silent_for: Duration,
}

impl Waiting {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere leaves the queue whole: go on with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Enters a new connection (`handle` a clone of it) whose thread is about to wait;
    /// returns its number for [`Self::leave`], and the connection dropped for it, if any.
    pub fn enter(&self, peer: SocketAddr, handle: TcpStream) -> (u64, Option<Dropped>) {
        let mut state = self.state();
        while state.threads >= MAX_THREADS {
            state = self.thread_ended.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        let dropped = if state.queue.len() >= MAX_WAITING {
            state.queue.pop_front().map(|oldest| {
                // Wakes its thread, whose wait for a byte then ends at once.
                let _ = oldest.handle.shutdown(Shutdown::Both);
                Dropped {
                    peer: oldest.peer,
                    silent_for: oldest.since.elapsed(),
                }
            })
        } else {
            None
        };
        let id = state.next_id;
        state.next_id += 1;
        state.threads += 1;
        state.queue.push_back(Waiter {
            id,
            peer,
            since: Instant::now(),
            handle,
        });
        (id, dropped)
    }

    /// The thread of connection `id` is done waiting (a byte, a timeout, or its connection
    /// was shut down); false if the connection was dropped for a newcomer meanwhile (it must
    /// not be served then: its socket is shut down).
    pub fn leave(&self, id: u64) -> bool {
        let mut state = self.state();
        state.threads -= 1;
        self.thread_ended.notify_all();
        match state.queue.iter().position(|w| w.id == id) {
            Some(at) => {
                state.queue.remove(at);
                true
            }
            None => false,
        }
    }
}

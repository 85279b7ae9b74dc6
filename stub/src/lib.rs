//! The gdbstub target of rtit: serves a replay session of `rtit-replay-core` to a stock gdb
//! over the GDB remote serial protocol, with reverse execution. gdbstub's extensions carry the
//! protocol; the only protocol code here is where gdbstub falls short: capping memory reads
//! (`conn`) and refusing a second client (`server`).
//!
//! - `arch`: the x86-64 register set, able to say "unavailable";
//! - `target`: the gdbstub `Target` over a `Session` (registers, memory, resume, reverse,
//!   breakpoints);
//! - `monitor`: monitor commands, and the gdb hook `monitor goto` needs;
//! - `files`, `file_ops`: exec-file, host I/O, auxv and the SVR4 library list, so gdb finds
//!   the code; `proc_files`: the `/proc` files gdb reads of the process (maps, cmdline);
//! - `event_loop`: carrying out resume requests and reporting stops;
//! - `conn`: the connection gdbstub reads and writes (buffered; `m` requests capped);
//! - `server`: accepting connections, one debugging gdb at a time.

pub mod arch;
pub mod conn;
pub mod event_loop;
mod file_ops;
pub mod files;
mod keep_alive;
pub mod monitor;
mod proc_files;
pub mod server;
pub mod target;
mod thread_moves;
mod writes;

pub use event_loop::serve_connection;
pub use target::ReplayTarget;

//! The replay engine of rtit: from the raw RTIT packet bytes of a recording back to every
//! executed instruction, and the queries reverse execution needs.
//!
//! Layered as libipt is, each layer usable and testable on its own (docs/design.md):
//! - [`packet`]: the RTIT packets of chapter 4 of the RTIT reference, a decoder and an encoder;
//! - [`ip`]: the LAST_LIP compression of the IPs those packets carry (§4.2.3.1);
//! - [`regs`]: the RTIT MSRs, RTIT_CTL bits and event IDs (chapter 3);
//! - [`cofi`]: how an instruction changes the flow as RTIT sees it (table 2), by iced-x86;
//! - [`image`]: the address space: ELF images at their addresses, symbols, source lines;
//! - [`flow`]: the reconstruction of every executed instruction from packets and images;
//! - [`timeline`]: that history indexed by position, a block number a run;
//! - [`recording`]: the recording format and its reader ([`hex`]: addresses as hex strings;
//!   [`plain_file`]: how its files are read);
//! - [`state`]: registers and memory at a position, known or unknown (forward and backward
//!   semantics from the snapshots, checkpoints);
//! - [`syscall`]: what system calls do to user state, and the recorders' log of them;
//! - [`session`]: a replay session: positions, moves, values where known;
//! - [`threads`]: which thread runs at each position, and a waiting thread's registers.
//!
//!
//! The crate does no I/O beyond
//! reading a recording, and never panics on bad input: errors are values that say where.

pub mod cofi;
pub mod flow;
pub mod hex;
pub mod image;
pub mod ip;
pub mod packet;
pub mod plain_file;
pub mod recording;
pub mod regs;
pub mod session;
pub mod state;
pub mod syscall;
#[cfg(test)]
mod test_rng;
pub mod threads;
pub mod timeline;

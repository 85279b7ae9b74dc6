//! The recorder of rtit: the RTIT unit model (what the hardware would write for a sequence of
//! retired instructions), the recording writer and the trace backends (step, qemu, msr).
//!
//! - [`model`]: the RTIT unit model, programmed through its MSRs;
//! - [`script`]: a scripted CPU that walks real code and drives the model, for traces with
//!   known truth (tests, benchmarks);
//! - [`step`]: the step backend, ptrace single-stepping a real program into the model;
//! - [`qemu`]: the qemu backend's shared half: the retirement engine the QEMU plugin drives,
//!   the guest memory map, and launching `qemu-x86_64` with the plugin;
//! - [`outcome`], [`sideband`], [`writer`], [`complete`]: what any backend produced, writing
//!   it, and finding by decoding what the hardware backend could not count;
//! - [`probe`]: what this CPU does where the SDM leaves a result undefined;
//! - [`interrupt`]: a signal's request to stop recording, shared with the backends;
//! - [`tether`]: the processes rtit starts die with it, even of SIGKILL;
//! - [`unfollowed`]: what the backends stop the recording before (threads, execve).

pub mod complete;
pub mod exec;
pub mod interrupt;
pub mod leftovers;
pub mod model;
pub mod msr;
pub mod outcome;
pub mod probe;
pub mod qemu;
pub mod script;
pub mod sideband;
pub mod step;
pub mod tether;
pub mod trace_bytes;
pub mod unfollowed;
pub mod writer;
pub mod xstate;

//! The recorder of rtit: the RTIT unit model (what the hardware would write for a sequence of
//! retired instructions), the recording writer and the trace backends (step, qemu, msr).
//!
//! It is built up by the issues that follow the foundation, on the packet encoder of
//! `rtit-replay-core`.

pub mod model;

//! The gdbstub target of rtit: serves a replay session of `rtit-replay-core` to a stock gdb
//! over the GDB remote serial protocol, with reverse execution. It holds no protocol code of
//! its own; gdbstub's extensions carry the protocol features.
//!
//! The target itself arrives with the replay issue; until then the crate only builds.

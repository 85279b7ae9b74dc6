//! The subcommands of `rtit`, one module each.

pub mod build_qemu;
pub mod calls;
pub mod check_values;
mod decode_check;
pub mod dump;
mod history;
pub mod info;
pub mod insns;
pub mod ls;
mod progress;
pub mod record;
mod recordings;
pub mod replay;

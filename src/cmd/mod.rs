//! The subcommands of `rtit`, one module each.

pub mod calls;
pub mod dump;
mod history;
pub mod info;
pub mod insns;
pub mod ls;
pub mod record;
mod recordings;
pub mod replay;

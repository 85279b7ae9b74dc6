//! The subcommands of `rtit`, one module each.

pub mod calls;
pub mod dump;
mod history;
pub mod insns;

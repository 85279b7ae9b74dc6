//! The subcommands of `rtit`, one module each.

pub mod dump;

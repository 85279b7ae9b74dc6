//! The qemu backend: a QEMU user-mode plugin (crate `rtit-qemu-plugin`) drives the unit model
//! from the translation blocks the emulated CPU executes; `rtit record --backend qemu` runs
//! `qemu-x86_64 -plugin …` and turns what the plugin leaves into a recording.
//!
//! The plugin holds no logic of its own beyond QEMU's API: the retirement rules are in
//! [`engine`], block classification in [`block`], the guest's memory map in [`guest_maps`]
//! and [`initial`], the plugin's arguments and report in [`report`], the launching side in
//! [`launch`], its scratch directory in [`scratch`], asking the plugin to stop on a signal in
//! [`stop`], and reading registers through QEMU's gdbstub (where tracing starts, and samples
//! for `--truth`) in [`gdbstub`].

pub mod block;
pub mod capture;
pub mod cpuid;
pub mod engine;
pub mod error;
pub mod find;
pub mod gdbstub;
pub mod guest_maps;
pub mod hex;
pub mod initial;
pub mod launch;
mod part;
pub mod relaunch;
pub mod report;
pub mod scratch;
pub mod stop;
pub mod timestamps;
pub mod translations;
pub mod written;

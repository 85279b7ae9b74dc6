//! The msr backend: RTIT programmed through the MSRs of a Silvermont/Airmont core, the trace
//! written by the hardware into physically contiguous memory.
//!
//! The backend is written against two small traits ([`device::Msrs`],
//! [`device::OutputRegion`]) and a [`session::Target`]; on Linux they are the MSR device, a
//! huge page and a ptrace'd process (`linux`, `target`), in tests the simulated device of
//! [`sim`], built on the unit model. Files: `detect` (is this an RTIT machine, §1.2, §3.1),
//! `program` (the one checked MSR write and the sequences of chapter 3 and appendix B),
//! `collect` (copying out of the circular region, wrap detection, gaps), `cr3` (finding the
//! target's CR3), `session` (one recording), `module` (kernel modules and their sections), `kernel`
//! (kallsyms and vmlinux).

pub mod collect;
pub mod cr3;
pub mod detect;
pub mod device;
pub mod kernel;
pub mod linux;
pub mod module;
pub mod program;
pub mod record;
pub mod session;
pub mod sim;
pub mod target;

#[cfg(test)]
mod tests;

//! What the msr backend needs from the machine, as two small traits: access to the RTIT MSRs
//! of one logical processor, and the physically contiguous output region the unit writes.
//! On Linux they are the MSR device and a huge page (`linux`); in tests, the simulated device
//! built on the unit model (`sim`).

use rtit_replay_core::regs::msr;

use crate::model::ModelError;

/// A failed MSR access or a refusal to make one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MsrError {
    /// The MSR device failed (the kernel turns a #GP into EIO).
    #[error("{op} {} ({addr:#x}) on CPU {cpu}: {message}", name(*addr))]
    Device {
        /// `rdmsr` or `wrmsr`.
        op: &'static str,
        /// The MSR.
        addr: u32,
        /// The logical processor.
        cpu: usize,
        /// What the device said.
        message: String,
    },
    /// The write breaks a rule of chapter 3; rtit refuses it before it reaches the hardware.
    #[error("refused: {0}")]
    Refused(ModelError),
    /// The simulated device faulted (#GP) or saw an undefined access.
    #[error("simulated RTIT unit: {0}")]
    Simulated(ModelError),
}

fn name(addr: u32) -> &'static str {
    msr::name(addr).unwrap_or("MSR")
}

/// The RTIT MSRs of one logical processor (§3.3.1: they are per logical processor).
pub trait Msrs {
    /// RDMSR.
    fn read(&mut self, addr: u32) -> Result<u64, MsrError>;
    /// WRMSR. Backend code never calls this directly: every write goes through
    /// [`super::program::Unit::write`], which checks it first.
    fn write(&mut self, addr: u32, value: u64) -> Result<(), MsrError>;
}

/// The output region: physically contiguous memory that the unit writes at
/// `base + (offset & mask)` (§2.3) and that rtit can read.
pub trait OutputRegion {
    /// Its physical address (for RTIT_BASE_ADDR).
    fn physical_base(&self) -> u64;
    /// Its size in bytes: a power of two from 128 bytes to 4 MiB (§3.3.11).
    fn size(&self) -> usize;
    /// Copies `out.len()` bytes from `offset` (within the region).
    fn read(&self, offset: usize, out: &mut [u8]);
    /// Sets `len` bytes from `offset` to `byte`.
    fn fill(&mut self, offset: usize, len: usize, byte: u8);
}

//! Errors of the unit model: what the hardware would answer with #GP, and what it leaves
//! undefined (the model refuses those, so a backend that does them is caught in tests).

use rtit_replay_core::regs::msr;

/// An MSR access the hardware would fault on, or one whose effect is undefined.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// Any RTIT MSR access but a read of RTIT_CTL before RTIT_CTL was read (§3.3.1).
    #[error("#GP: {} ({msr:#x}) accessed before RTIT_CTL was read (§3.3.1)", name(*msr))]
    CtlNotRead {
        /// The MSR accessed.
        msr: u32,
    },
    /// A write that sets (or, for bits reserved as 1, clears) reserved bits.
    #[error("#GP: writing {value:#x} to {} ({msr:#x}) changes reserved bits {bits:#x}", name(*msr))]
    ReservedBits {
        /// The MSR written.
        msr: u32,
        /// The value.
        value: u64,
        /// The reserved bits it changes.
        bits: u64,
    },
    /// RTIT_TNT_BUFF written with 0 (§3.3.13).
    #[error("#GP: RTIT_TNT_BUFF ({:#x}) must never be written with 0 (§3.3.13)", msr::TNT_BUFF)]
    ZeroTntBuff,
    /// Not an RTIT MSR.
    #[error("{0:#x} is not an RTIT MSR")]
    UnknownMsr(u32),
    /// A write whose effect the spec leaves undefined.
    #[error("undefined behaviour: {0}")]
    Undefined(&'static str),
}

impl ModelError {
    /// Whether the hardware raises #GP for this access.
    pub fn is_gp(&self) -> bool {
        matches!(
            self,
            Self::CtlNotRead { .. } | Self::ReservedBits { .. } | Self::ZeroTntBuff
        )
    }
}

fn name(addr: u32) -> &'static str {
    msr::name(addr).unwrap_or("?")
}

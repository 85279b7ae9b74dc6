//! Finding the target's CR3. RTIT leaves this to the OS (§2.4.2); rtit asks the unit: it
//! traces every context (CR3En=0) in both rings (OS=1, User=1) while the target, stopped
//! until then, executes its first user instruction, and takes the CR3 of the last PIP
//! (§4.2.10: sent on every MOV to CR3) before the packet that enters the target's code at
//! that instruction: the TIP of the kernel's return to user mode, or a FUP.PGE.

use rtit_replay_core::packet::{DecoderConfig, FupEvent, Packet, PacketDecoder};

/// Why no CR3 was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Cr3Error {
    /// The target's first IP never appears in the discovery trace.
    #[error("the {bytes} bytes traced while the target took its first step never enter it at {ip:#x}")]
    NoEntry {
        /// The target's first instruction.
        ip: u64,
        /// Trace size.
        bytes: usize,
    },
    /// It appears, but no PIP came before it.
    #[error("the trace enters the target at {ip:#x} (trace offset {offset:#x}) with no PIP before it")]
    NoPip {
        /// The target's first instruction.
        ip: u64,
        /// Where.
        offset: usize,
    },
}

/// The CR3 in force when `trace` (written with RTIT_CTL `ctl`) first enters user code at `ip`.
pub fn cr3_entering(trace: &[u8], ctl: u64, ip: u64) -> Result<u64, Cr3Error> {
    let mut cr3 = None;
    let mut decoder = PacketDecoder::new(trace, DecoderConfig::from_rtit_ctl(ctl));
    // A decode error resumes at the next PSB; keep looking.
    for d in decoder.by_ref().flatten() {
        match d.packet {
            Packet::Pip(pip) => cr3 = Some(pip.cr3),
            Packet::Tip(_) | Packet::Fup(FupEvent::PacketGenEnable, _) if d.ip == Some(ip) => {
                return cr3.ok_or(Cr3Error::NoPip { ip, offset: d.offset });
            }
            _ => {}
        }
    }
    Err(Cr3Error::NoEntry { ip, bytes: trace.len() })
}

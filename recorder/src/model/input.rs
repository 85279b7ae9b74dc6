//! What the unit model is fed: retired instructions and the events between them.

use rtit_replay_core::cofi::Cofi;

/// One retired instruction, as a backend observed it.
///
/// The model keeps the CPU state (IP, CPL, CR3) itself; a record says what the instruction
/// changed. The model does not require `ip` to equal the IP it expects next: code that is not
/// observed (the kernel, under user-only tracing) leaves gaps, and a far transfer out of such
/// a gap, such as the SYSRET back to user mode, may carry any `ip` since no packet reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retired {
    /// Linear address of the instruction (CLIP).
    pub ip: u64,
    /// Length in bytes: `ip + len` is the NLIP.
    pub len: u8,
    /// Its class (table 2).
    pub cofi: Cofi,
    /// For a conditional branch: whether it was taken.
    pub taken: bool,
    /// Address of the next instruction executed: the branch target (BLIP) or the NLIP.
    pub next_ip: u64,
    /// CPL after the instruction, if it changed it (far transfers).
    pub next_cpl: Option<u8>,
}

impl Retired {
    /// An instruction of class `cofi` that continues at `next_ip`. A conditional branch counts
    /// as taken when `next_ip` differs from its NLIP; use [`Retired::taken`] otherwise.
    pub const fn new(ip: u64, len: u8, cofi: Cofi, next_ip: u64) -> Self {
        Self {
            ip,
            len,
            cofi,
            taken: next_ip != ip.wrapping_add(len as u64),
            next_ip,
            next_cpl: None,
        }
    }

    /// A non-branch instruction.
    pub const fn plain(ip: u64, len: u8) -> Self {
        Self::new(ip, len, Cofi::None, ip.wrapping_add(len as u64))
    }

    /// Sets whether a conditional branch was taken (for a branch to its own NLIP).
    pub const fn taken(mut self, taken: bool) -> Self {
        self.taken = taken;
        self
    }

    /// Sets the CPL after the instruction.
    pub const fn to_cpl(mut self, cpl: u8) -> Self {
        self.next_cpl = Some(cpl);
        self
    }

    /// The next linear instruction pointer: the first byte after this instruction.
    pub const fn nlip(&self) -> u64 {
        self.ip.wrapping_add(self.len as u64)
    }
}

/// An input to the model: a retired instruction or an event at an instruction boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// An instruction retired.
    Retire(Retired),
    /// An external interrupt, NMI or trap-like event before the next instruction: a far
    /// transfer whose FUP carries that next instruction's address (table 1).
    Interrupt {
        /// The handler's address (the TIP).
        handler: u64,
        /// CPL of the handler.
        cpl: u8,
    },
    /// The next instruction faults and does not retire: a far transfer whose FUP carries the
    /// faulting instruction's own address, the CLIP (table 1).
    Fault {
        /// The handler's address.
        handler: u64,
        /// CPL of the handler.
        cpl: u8,
    },
    /// CR3 is written (MOV to CR3 whose NLIP is the next instruction): table 19 rows 39–44.
    Cr3Change {
        /// The new CR3.
        cr3: u64,
    },
    /// An SMI or VM-exit: ContextEn goes to 0; the FUP.PGD carries the next instruction's
    /// address, as saved in SMRAM or the VMCS (rows 36–37).
    ExitToHost,
    /// An RSM or VM-entry resuming at `ip` (row 38).
    EnterFromHost {
        /// Where execution resumes (BLIP).
        ip: u64,
        /// CPL there.
        cpl: u8,
    },
    /// The internal buffer overflows (§4.2.5): the packets of the next `instructions`
    /// instructions are lost, and so are those of the instruction after them (the first that
    /// starts with TriggerEn and ContextEn set), which clears the overflow and sends
    /// FUP.BuffOvf with its next IP.
    Overflow {
        /// Instructions whose packets are lost before the clearing one.
        instructions: u64,
    },
    /// A core frequency change or wake-up: an STS packet when STS packets are enabled
    /// (§4.2.13).
    TimeSync,
}

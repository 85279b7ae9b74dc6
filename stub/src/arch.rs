//! The register set served to gdb: x86-64 in the layout of gdb's `i386:x86-64` target
//! description (as gdbstub_arch's `X86_64_SSE` declares it), but every register but `rip` may
//! be unknown and is then sent as unavailable (`xx`). gdbstub_arch's `X86_64CoreRegs` has no
//! way to say "unknown", and a made-up zero would be a wrong value.

use gdbstub::arch::{Arch, Registers};

/// The general-purpose registers in gdb's order.
pub const GPR_NAMES: [&str; 16] = [
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
];
/// The segment registers in gdb's order.
pub const SEGMENT_NAMES: [&str; 6] = ["cs", "ss", "ds", "es", "fs", "gs"];

/// Registers at one position; `None` is unknown.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReplayRegs {
    /// rax … r15.
    pub gprs: [Option<u64>; 16],
    /// The program counter, always known.
    pub rip: u64,
    /// eflags.
    pub eflags: Option<u32>,
    /// cs, ss, ds, es, fs, gs.
    pub segments: [Option<u32>; 6],
}

/// Bytes after the segment registers that are never known here: st0–7 (8 × 10), the x87
/// control registers (8 × 4), xmm0–15 (16 × 16) and mxcsr (4).
const UNKNOWN_TAIL: usize = 8 * 10 + 8 * 4 + 16 * 16 + 4;

impl Registers for ReplayRegs {
    type ProgramCounter = u64;

    fn pc(&self) -> u64 {
        self.rip
    }

    fn gdb_serialize(&self, mut write_byte: impl FnMut(Option<u8>)) {
        let mut value = |v: Option<u64>, bytes: usize| match v {
            Some(v) => v.to_le_bytes()[..bytes].iter().for_each(|b| write_byte(Some(*b))),
            None => (0..bytes).for_each(|_| write_byte(None)),
        };
        for r in self.gprs {
            value(r, 8);
        }
        value(Some(self.rip), 8);
        value(self.eflags.map(u64::from), 4);
        for s in self.segments {
            value(s.map(u64::from), 4);
        }
        for _ in 0..UNKNOWN_TAIL {
            write_byte(None);
        }
    }

    /// Writing registers is not possible in a replay.
    fn gdb_deserialize(&mut self, _bytes: &[u8]) -> Result<(), ()> {
        Err(())
    }
}

/// x86-64 with [`ReplayRegs`].
pub enum X86_64Replay {}

impl Arch for X86_64Replay {
    type Usize = u64;
    type Registers = ReplayRegs;
    type BreakpointKind = usize;
    type RegId = ();

    fn target_description_xml() -> Option<&'static str> {
        <gdbstub_arch::x86::X86_64_SSE as Arch>::target_description_xml()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_registers_are_sent_as_unavailable_and_the_layout_matches_gdb() {
        let mut regs = ReplayRegs {
            rip: 0x40_1000,
            ..ReplayRegs::default()
        };
        regs.gprs[7] = Some(0x7fff_ffff_e000); // rsp
        let mut bytes = Vec::new();
        regs.gdb_serialize(|b| bytes.push(b));
        assert_eq!(bytes.len(), 0x218, "gdbstub_arch's X86_64CoreRegs size");
        assert_eq!(bytes[0], None, "rax unknown");
        assert_eq!(bytes[7 * 8], Some(0x00), "rsp low byte");
        assert_eq!(bytes[7 * 8 + 1], Some(0xe0));
        assert_eq!(bytes[16 * 8..16 * 8 + 3], [Some(0x00), Some(0x10), Some(0x40)], "rip");
        assert!(bytes[16 * 8 + 8..].iter().all(Option::is_none));
        assert!(ReplayRegs::default().gdb_deserialize(&[0; 0x218]).is_err());
    }
}

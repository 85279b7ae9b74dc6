//! The register set served to gdb: x86-64 GNU/Linux with SSE and AVX in the names and layout
//! of gdb's `i386:x86-64` features core, sse, linux, segments and avx (`target.xml`), and
//! avx512 (`avx512.xml`) for a recording made where XCR0 enabled it, where every register but
//! `rip` may be unknown and is then sent as unavailable (`xx`). gdbstub_arch's
//! `X86_64CoreRegs` has no way to say "unknown", and a made-up zero would be a wrong value;
//! nor has it ymm or zmm.

use gdbstub::arch::{Arch, Registers};

/// The general-purpose registers in gdb's order.
pub const GPR_NAMES: [&str; 16] = [
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
];
/// The segment registers in gdb's order.
pub const SEGMENT_NAMES: [&str; 6] = ["cs", "ss", "ds", "es", "fs", "gs"];

/// Registers at one position; `None` is unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayRegs {
    /// rax … r15.
    pub gprs: [Option<u64>; 16],
    /// The program counter: always known for the thread that runs at a position; unknown for
    /// a thread nothing tells of there.
    pub rip: Option<u64>,
    /// eflags.
    pub eflags: Option<u32>,
    /// cs, ss, ds, es, fs, gs.
    pub segments: [Option<u32>; 6],
    /// zmm0–31 byte by byte (the low 32 bytes are ymm, the low 16 xmm).
    pub vectors: [[Option<u8>; 64]; 32],
    /// k0–7.
    pub opmasks: [Option<u64>; 8],
    /// Whether the avx512 registers are served (xmm16–31, ymm16h–31h, k0–7, zmm0h–31h).
    pub avx512: bool,
    /// MXCSR.
    pub mxcsr: Option<u32>,
    /// The fs and gs segment bases.
    pub bases: [Option<u64>; 2],
}

impl Default for ReplayRegs {
    fn default() -> Self {
        Self {
            gprs: [None; 16],
            rip: None,
            eflags: None,
            segments: [None; 6],
            vectors: [[None; 64]; 32],
            opmasks: [None; 8],
            avx512: false,
            mxcsr: None,
            bases: [None; 2],
        }
    }
}

/// Bytes after the segment registers that are never known here: st0–7 (8 × 10) and the x87
/// control registers (8 × 4).
const X87: usize = 8 * 10 + 8 * 4;

impl Registers for ReplayRegs {
    type ProgramCounter = u64;

    fn pc(&self) -> u64 {
        self.rip.unwrap_or(0)
    }

    fn gdb_serialize(&self, mut write_byte: impl FnMut(Option<u8>)) {
        let mut bytes: Vec<Option<u8>> = Vec::with_capacity(0x218 + 16 * 16);
        let value = |v: Option<u64>, n: usize, bytes: &mut Vec<Option<u8>>| match v {
            Some(v) => bytes.extend(v.to_le_bytes()[..n].iter().map(|b| Some(*b))),
            None => bytes.extend(std::iter::repeat(None).take(n)),
        };
        for r in self.gprs {
            value(r, 8, &mut bytes);
        }
        value(self.rip, 8, &mut bytes);
        value(self.eflags.map(u64::from), 4, &mut bytes);
        for s in self.segments {
            value(s.map(u64::from), 4, &mut bytes);
        }
        bytes.extend(std::iter::repeat(None).take(X87));
        for v in &self.vectors[..16] {
            bytes.extend_from_slice(&v[..16]);
        }
        value(self.mxcsr.map(u64::from), 4, &mut bytes);
        // orig_rax: the system call a stop interrupted, which a replay has no use for.
        value(None, 8, &mut bytes);
        for base in self.bases {
            value(base, 8, &mut bytes);
        }
        for v in &self.vectors[..16] {
            bytes.extend_from_slice(&v[16..32]);
        }
        if self.avx512 {
            for v in &self.vectors[16..] {
                bytes.extend_from_slice(&v[..16]);
            }
            for v in &self.vectors[16..] {
                bytes.extend_from_slice(&v[16..32]);
            }
            for k in self.opmasks {
                value(k, 8, &mut bytes);
            }
            for v in &self.vectors {
                bytes.extend_from_slice(&v[32..]);
            }
        }
        bytes.into_iter().for_each(&mut write_byte);
    }

    /// Writing registers is not possible in a replay.
    fn gdb_deserialize(&mut self, _bytes: &[u8]) -> Result<(), ()> {
        Err(())
    }
}

/// The target description: `target.xml`, with the avx512 feature when `avx512`.
pub fn description(avx512: bool) -> String {
    let base = include_str!("target.xml");
    if !avx512 {
        return base.to_string();
    }
    let end = base.rfind("</target>").unwrap_or(base.len());
    format!("{}{}{}", &base[..end], include_str!("avx512.xml"), &base[end..])
}

/// x86-64 with [`ReplayRegs`].
pub enum X86_64Replay {}

impl Arch for X86_64Replay {
    type Usize = u64;
    type Registers = ReplayRegs;
    type BreakpointKind = usize;
    type RegId = ();

    fn target_description_xml() -> Option<&'static str> {
        Some(include_str!("target.xml"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_registers_are_sent_as_unavailable_and_the_layout_matches_gdb() {
        let mut regs = ReplayRegs {
            rip: Some(0x40_1000),
            ..ReplayRegs::default()
        };
        regs.gprs[7] = Some(0x7fff_ffff_e000); // rsp
        let mut bytes = Vec::new();
        regs.gdb_serialize(|b| bytes.push(b));
        assert_eq!(
            bytes.len(),
            0x218 + 8 + 16 + 16 * 16,
            "core, sse, orig_rax, fs/gs_base, ymm0h–15h"
        );
        assert_eq!(bytes[0], None, "rax unknown");
        let mut nothing = Vec::new();
        ReplayRegs::default().gdb_serialize(|b| nothing.push(b));
        assert_eq!(
            &nothing[16 * 8..17 * 8],
            [None; 8],
            "a thread nothing tells of: rip unknown, never 0"
        );
        assert_eq!(bytes[7 * 8], Some(0x00), "rsp low byte");
        assert_eq!(bytes[7 * 8 + 1], Some(0xe0));
        assert_eq!(bytes[16 * 8..16 * 8 + 3], [Some(0x00), Some(0x10), Some(0x40)], "rip");
        assert!(bytes[16 * 8 + 8..].iter().all(Option::is_none));
        regs.vectors[1][0] = Some(0xab); // xmm1's lowest byte
        regs.vectors[15][31] = Some(0xcd); // ymm15's highest
        regs.mxcsr = Some(0x1f80);
        regs.bases[0] = Some(0x7fff_f7d8_a740);
        let mut bytes = Vec::new();
        regs.gdb_serialize(|b| bytes.push(b));
        let xmm = 16 * 8 + 8 + 4 + 6 * 4 + 8 * 10 + 8 * 4;
        assert_eq!(bytes[xmm + 16], Some(0xab));
        assert_eq!(
            bytes[xmm + 256..xmm + 260],
            [Some(0x80), Some(0x1f), Some(0), Some(0)],
            "mxcsr"
        );
        assert_eq!(bytes.last(), Some(&Some(0xcd)), "ymm15h's last byte ends the packet");
        assert_eq!(bytes[xmm + 260..xmm + 268], [None; 8], "orig_rax");
        assert_eq!(bytes[xmm + 268], Some(0x40), "fs_base");
        assert_eq!(
            bytes.iter().filter(|b| b.is_some()).count(),
            8 + 8 + 1 + 1 + 4 + 8,
            "rsp, rip, xmm1, ymm15, mxcsr, fs_base"
        );
        // The description names each register once, in that order.
        let xml = X86_64Replay::target_description_xml().expect("a description");
        let names: Vec<&str> = xml
            .split("<reg name=\"")
            .skip(1)
            .filter_map(|r| r.split('"').next())
            .collect();
        assert_eq!(names.len(), 16 + 1 + 1 + 6 + 8 + 8 + 16 + 1 + 1 + 2 + 16);
        assert_eq!(names[40], "xmm0");
        assert_eq!(names[56], "mxcsr");
        assert_eq!(names[57], "orig_rax");
        assert_eq!(names[58], "fs_base");
        assert_eq!(names[60], "ymm0h");
        assert!(ReplayRegs::default().gdb_deserialize(&[0; 0x218]).is_err());
    }

    #[test]
    fn avx512_registers_follow_ymm15h_in_the_order_the_description_names_them() {
        let mut regs = ReplayRegs {
            avx512: true,
            ..ReplayRegs::default()
        };
        regs.vectors[16][0] = Some(0x16); // xmm16's low byte
        regs.vectors[31][31] = Some(0x31); // ymm31h's last byte
        regs.opmasks[2] = Some(0x0102_0304);
        regs.vectors[0][32] = Some(0xa0); // zmm0h's first byte
        regs.vectors[31][63] = Some(0xff); // zmm31h's last byte
        let mut bytes = Vec::new();
        regs.gdb_serialize(|b| bytes.push(b));
        let base = 0x218 + 8 + 16 + 16 * 16;
        assert_eq!(bytes.len(), base + 16 * 16 + 16 * 16 + 8 * 8 + 32 * 32);
        assert_eq!(bytes[base], Some(0x16));
        assert_eq!(bytes[base + 512 - 1], Some(0x31));
        assert_eq!(
            bytes[base + 512 + 16..base + 512 + 20],
            [Some(4), Some(3), Some(2), Some(1)],
            "k2"
        );
        assert_eq!(bytes[base + 512 + 64], Some(0xa0));
        assert_eq!(bytes.last(), Some(&Some(0xff)));
        let xml = description(true);
        let names: Vec<&str> = xml
            .split("<reg name=\"")
            .skip(1)
            .filter_map(|r| r.split('"').next())
            .collect();
        assert_eq!(names.len(), 76 + 16 + 16 + 8 + 32);
        assert_eq!(names[76], "xmm16");
        assert_eq!(names[92], "ymm16h");
        assert_eq!(names[108], "k0");
        assert_eq!(names[116], "zmm0h");
        assert!(xml.trim_end().ends_with("</target>"));
        assert_eq!(description(false), include_str!("target.xml"));
    }
}

//! Instructions whose results neither the trace nor any semantics can give: RDTSC and RDTSCP
//! (the time stamp counter) and RDPID. QEMU 9.0 and later let a plugin's callback read the
//! registers, so the plugin reads what such an instruction wrote before the next instruction
//! of its block runs, and logs it as the step backend does (`results.jsonl`); replay takes a
//! logged result only where the history has that instruction at that position.

use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};

/// The 64-bit registers by number, as QEMU's gdbstub (and the plugin API) names them.
pub const GPRS: [&str; 16] = [
    "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
];

/// The registers that `bytes` (one instruction's) writes and only the CPU knows, if it is
/// RDTSC, RDTSCP or RDPID.
pub fn unknowable_outputs(bytes: &[u8]) -> Option<Vec<&'static str>> {
    // Each is 0F-escaped: most instructions are passed over without decoding.
    if !bytes.contains(&0x0f) {
        return None;
    }
    let insn = Decoder::new(64, bytes, DecoderOptions::NONE).decode();
    if insn.is_invalid() || insn.len() != bytes.len() {
        return None;
    }
    match insn.mnemonic() {
        Mnemonic::Rdtsc => Some(vec!["rax", "rdx"]),
        Mnemonic::Rdtscp => Some(vec!["rax", "rdx", "rcx"]),
        Mnemonic::Rdpid if insn.op0_kind() == OpKind::Register => {
            let full = insn.op0_register().full_register();
            let n = full.number().checked_sub(Register::RAX.number())?;
            GPRS.get(n).map(|name| vec![*name])
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_stamp_reads_and_rdpid_are_told_with_what_they_write() {
        assert_eq!(unknowable_outputs(&[0x0f, 0x31]), Some(vec!["rax", "rdx"]));
        assert_eq!(unknowable_outputs(&[0x0f, 0x01, 0xf9]), Some(vec!["rax", "rdx", "rcx"]));
        // rdpid rax; rdpid r13 (REX.B)
        assert_eq!(unknowable_outputs(&[0xf3, 0x0f, 0xc7, 0xf8]), Some(vec!["rax"]));
        assert_eq!(unknowable_outputs(&[0xf3, 0x41, 0x0f, 0xc7, 0xfd]), Some(vec!["r13"]));
        // cpuid (the CPUID table answers it), a nop, and a truncated rdtscp.
        assert_eq!(unknowable_outputs(&[0x0f, 0xa2]), None);
        assert_eq!(unknowable_outputs(&[0x90]), None);
        assert_eq!(unknowable_outputs(&[0x0f, 0x01]), None);
    }
}

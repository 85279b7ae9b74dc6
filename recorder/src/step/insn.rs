//! An instruction as the step backend needs it, decoded once per address.

use std::collections::HashMap;

use iced_x86::{Decoder, DecoderOptions};
use rtit_replay_core::cofi::{classify, Cofi};

use super::tracee::Tracee;

/// An instruction as the backend needs it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Insn {
    pub(super) len: u8,
    pub(super) cofi: Cofi,
    pub(super) rep: bool,
    /// The registers it writes that the trace cannot tell (cpuid, rdtsc …), to log.
    pub(super) result: &'static [&'static str],
    /// An XSAVEC, whose header (which components the CPU had in use) is logged.
    pub(super) xsavec: bool,
}

/// What an instruction writes that no semantics can compute: logged in `results.jsonl`.
fn result_registers(insn: &iced_x86::Instruction) -> &'static [&'static str] {
    use iced_x86::Mnemonic as M;
    match insn.mnemonic() {
        M::Cpuid => &["rax", "rbx", "rcx", "rdx"],
        M::Rdtsc | M::Xgetbv => &["rax", "rdx"],
        M::Rdtscp => &["rax", "rcx", "rdx"],
        _ => &[],
    }
}

pub(super) fn decode(tracee: &Tracee, cache: &mut HashMap<u64, Insn>, ip: u64) -> Insn {
    *cache.entry(ip).or_insert_with(|| {
        let mut bytes = [0u8; 16];
        let n = tracee.read(ip, &mut bytes);
        let insn = Decoder::with_ip(64, &bytes[..n], ip, DecoderOptions::NONE).decode();
        Insn {
            len: insn.len() as u8,
            cofi: if insn.is_invalid() {
                Cofi::Exception
            } else {
                classify(&insn)
            },
            rep: insn.has_rep_prefix() || insn.has_repe_prefix() || insn.has_repne_prefix(),
            result: result_registers(&insn),
            xsavec: matches!(
                insn.mnemonic(),
                iced_x86::Mnemonic::Xsavec | iced_x86::Mnemonic::Xsavec64
            ),
        }
    })
}

//! Whether EFLAGS.DF can be set anywhere in the program, for the registers a callback reads
//! inside QEMU's execution loop (`registers::state_in_loop`): there QEMU keeps DF apart from
//! the `eflags` word the plugin API reads, and a walk that starts from an unknown DF knows no
//! string instruction's addresses (`rep movs` and `rep stos` then forget all memory).
//!
//! A process starts with DF clear (the x86-64 ABI; Linux and QEMU set it so at `execve`), and
//! only `std`, `popf`, `iret` and `rt_sigreturn` (the context it restores) set it. So while no
//! block QEMU translated holds one of those instructions and no `rt_sigreturn` restored a
//! context with DF set, DF is clear wherever the program is. Translated is not executed:
//! the answer errs towards "unknown", never towards a wrong value.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set once DF may have been set somewhere.
static MAY_BE_SET: AtomicBool = AtomicBool::new(false);

/// EFLAGS.DF.
const DF: u64 = 1 << 10;

/// Where `rt_sigreturn` finds the saved EFLAGS, from the stack pointer at the call (the
/// `ucontext` there, as the handler's `ret` into the restorer left it): `uc_mcontext` at 40
/// (after `uc_flags`, `uc_link` and the 24-byte `stack_t`), and `eflags` the eighteenth word
/// of the `sigcontext` (r8–r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, eflags).
pub const SIGRETURN_EFLAGS: u64 = 40 + 17 * 8;

/// Whether DF is clear wherever the program is now.
pub fn clear() -> bool {
    !MAY_BE_SET.load(Ordering::Relaxed)
}

/// A block QEMU translated: notes an instruction in it that can set DF.
pub fn translated(insns: &[(u64, &[u8])]) {
    if clear() && insns.iter().any(|(_, bytes)| sets_df(bytes)) {
        MAY_BE_SET.store(true, Ordering::Relaxed);
    }
}

/// An `rt_sigreturn` restores `eflags` (`None`: it could not be read).
pub fn sigreturn(eflags: Option<u64>) {
    if eflags.map_or(true, |e| e & DF != 0) {
        MAY_BE_SET.store(true, Ordering::Relaxed);
    }
}

/// Whether the instruction `bytes` is `std`, `popf` or `iret` (in any operand size): its
/// opcode after the legacy and REX prefixes is FD, 9D or CF.
fn sets_df(bytes: &[u8]) -> bool {
    let opcode = bytes.iter().find(|&&b| {
        !matches!(
            b,
            0xf0 | 0xf2 | 0xf3 | 0x2e | 0x36 | 0x3e | 0x26 | 0x64 | 0x65 | 0x66 | 0x67 | 0x40..=0x4f
        )
    });
    matches!(opcode, Some(0xfd | 0x9d | 0xcf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_instructions_that_load_df_count() {
        for bytes in [&[0xfd][..], &[0x9d], &[0x48, 0xcf], &[0x66, 0x9d], &[0xcf]] {
            assert!(sets_df(bytes), "{bytes:x?}");
        }
        // cld, pushf, a two-byte opcode whose second byte is FD, a REX-prefixed mov.
        for bytes in [
            &[0xfc][..],
            &[0x9c],
            &[0x0f, 0xfd, 0xc1],
            &[0x48, 0x89, 0xfd],
            &[0xc5, 0xfd, 0x6f, 0x06],
        ] {
            assert!(!sets_df(bytes), "{bytes:x?}");
        }
    }
}

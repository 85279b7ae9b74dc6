//! The running block's count where it was cut short (issue 20): the plugin counts a block at
//! once before its last instruction, so a block stopped earlier (a fault, a store into it)
//! counts 0 (`rtit_recorder::qemu::engine`'s `cut` module). Where the program stopped in it
//! says how many of its instructions retired: those before it (the one there started and did
//! not: it faulted, or QEMU runs it again).

use iced_x86::{Decoder, DecoderOptions};

/// Bytes a block spans at most here: QEMU 7.2 ends a translation block within two pages.
pub(super) const SPAN: u64 = 8192;

/// How many instructions of the block whose code from `start` is `code` retired when the
/// program stopped at `ip` inside it: its instructions before `ip`. `None` if `ip` is not
/// where one of them starts within `code`.
pub(super) fn retired_before(code: &[u8], start: u64, ip: u64) -> Option<u64> {
    let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    let mut n = 0;
    while decoder.ip() < ip && decoder.can_decode() {
        if decoder.decode().is_invalid() {
            return None;
        }
        n += 1;
    }
    (decoder.ip() == ip).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_instructions_before_the_stop() {
        // nop; mov [rax], ecx; nop
        let code = [0x90, 0x89, 0x08, 0x90];
        assert_eq!(retired_before(&code, 0x1000, 0x1000), Some(0));
        assert_eq!(retired_before(&code, 0x1000, 0x1001), Some(1));
        assert_eq!(retired_before(&code, 0x1000, 0x1003), Some(2));
        // Inside an instruction, or beyond what was read: not a stop in this block.
        assert_eq!(retired_before(&code, 0x1000, 0x1002), None);
        assert_eq!(retired_before(&code, 0x1000, 0x1010), None);
    }
}

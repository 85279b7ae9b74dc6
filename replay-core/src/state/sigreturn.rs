//! `rt_sigreturn`: the kernel (or QEMU) restores the context the signal interrupted from the
//! frame at the stack pointer (Linux's x86-64 ABI, `struct rt_sigframe`: the `ucontext` at
//! the stack pointer when `__restore_rt` makes the call, its `sigcontext` 40 bytes in).
//! What the frame holds, where the state knows it, is what the registers become: the step
//! backend logs them, but under QEMU (whose plugin reads no register) and for the vector
//! state they come from here. Whatever the frame does not tell is unknown; the vector state
//! in particular is never left as the handler had it.

use super::flags;
use super::reg::{Reg, RSP};
use super::State;
use crate::image::AddressSpace;

/// The general-purpose registers in `struct sigcontext` order (r8 first), each 8 bytes.
const SIGCONTEXT: [u8; 16] = [8, 9, 10, 11, 12, 13, 14, 15, 7, 6, 5, 3, 2, 0, 1, 4];
/// Offsets in `struct sigcontext`.
const EFLAGS: u64 = 136;
const CS: u64 = 144;
const SS: u64 = 150;
const FPSTATE: u64 = 184;
/// The `ucontext`'s `uc_mcontext`.
const MCONTEXT: u64 = 40;
/// The flags a signal return takes from the frame (Linux's FIX_EFLAGS, less TF and RF,
/// which a debugger owns; QEMU restores at least these).
const RESTORED_FLAGS: u64 = flags::STATUS | flags::DF;

/// What `rt_sigreturn` leaves as it was: on x86-64 neither Linux (`restore_sigcontext` sets
/// CS and SS alone) nor QEMU user mode (the same, its 32-bit-only segment loads aside)
/// restores the segment bases or DS, ES, FS and GS. Forgetting them made every TLS access
/// after a handler's return unknown (python3 with a signal handler: `errno`'s address,
/// then the stack through a store to it, then `bt` and the buffers `write` was given).
const KEPT: [Reg; 6] = [
    Reg::FsBase,
    Reg::GsBase,
    Reg::Segment(0),
    Reg::Segment(3),
    Reg::Segment(4),
    Reg::Segment(5),
];

/// Forgets every register but those `rt_sigreturn` leaves as they were ([`KEPT`]).
fn forget_all_but_kept(st: &mut State) {
    let kept = KEPT.map(|r| (r, st.regs.get(r)));
    st.regs.forget_all();
    for (r, v) in kept {
        st.regs.set(r, v);
    }
}

/// The registers before `rt_sigreturn` from those after it (`st`), going backwards: what the
/// handler left, unknown but for what the call does not change ([`KEPT`]).
pub fn unrestore(st: &mut State) {
    forget_all_but_kept(st);
}

/// The state after `rt_sigreturn` from the state before it (`st`).
pub fn restore(st: &mut State, space: &AddressSpace) {
    let frame = st.regs.get(RSP).map(|rsp| rsp.wrapping_add(MCONTEXT));
    let word = |st: &State, at: u64, n: u32| frame.and_then(|sc| st.mem.read_u64(sc + at, n, space));
    let regs: Vec<(Reg, Option<u64>)> = SIGCONTEXT
        .iter()
        .enumerate()
        .map(|(i, &g)| (Reg::Gpr(g), word(st, 8 * i as u64, 8)))
        .collect();
    let eflags = word(st, EFLAGS, 8);
    let (cs, ss) = (word(st, CS, 2), word(st, SS, 2));
    let fpstate = word(st, FPSTATE, 8);
    forget_all_but_kept(st);
    for (r, v) in regs {
        st.regs.set(r, v);
    }
    st.regs.set(Reg::Segment(1), cs);
    st.regs.set(Reg::Segment(2), ss);
    st.flags.forget(flags::ALL);
    if let Some(f) = eflags {
        st.flags.put(RESTORED_FLAGS, f & RESTORED_FLAGS);
    }
    super::xsave::restore_frame(st, fpstate, space);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::reg::RAX;

    /// A handler's state about to return: its stack pointer at a frame whose sigcontext
    /// holds 0x100 + i in general register slot i, CS 0x33, SS 0x2b, no FP state.
    fn in_handler() -> State {
        let mut st = State::unknown();
        let rsp = 0x7000;
        st.regs.set(RSP, Some(rsp));
        for i in 0..16u64 {
            st.mem.write(rsp + MCONTEXT + 8 * i, &(0x100 + i).to_le_bytes());
        }
        st.mem.write(rsp + MCONTEXT + EFLAGS, &0x246u64.to_le_bytes());
        st.mem.write(rsp + MCONTEXT + CS, &0x33u16.to_le_bytes());
        st.mem.write(rsp + MCONTEXT + SS, &0x2bu16.to_le_bytes());
        st.mem.write(rsp + MCONTEXT + FPSTATE, &0u64.to_le_bytes());
        st.regs.set(Reg::FsBase, Some(0x40_0dea_d000));
        st.regs.set(Reg::GsBase, Some(0));
        for s in [0, 3, 4, 5] {
            st.regs.set(Reg::Segment(s), Some(0x2b));
        }
        st.regs.set(Reg::Gpr(1), Some(5));
        st
    }

    /// The general registers, CS and SS come from the frame; the segment bases and DS, ES,
    /// FS, GS stay what the handler had, both ways.
    #[test]
    fn a_signal_return_restores_the_frame_and_keeps_the_segment_bases() {
        let mut st = in_handler();
        restore(&mut st, &AddressSpace::new());
        assert_eq!(st.regs.get(RAX), Some(0x100 + 13), "rax is sigcontext's 14th word");
        assert_eq!(st.regs.get(Reg::Gpr(1)), Some(0x100 + 14), "rcx from the frame");
        assert_eq!(st.regs.get(RSP), Some(0x100 + 15));
        assert_eq!(st.regs.get(Reg::Segment(1)), Some(0x33));
        assert_eq!(st.regs.get(Reg::FsBase), Some(0x40_0dea_d000));
        assert_eq!(st.regs.get(Reg::GsBase), Some(0));
        assert_eq!(st.regs.get(Reg::Segment(3)), Some(0x2b));
        let mut back = in_handler();
        unrestore(&mut back);
        assert_eq!((back.regs.get(RAX), back.regs.get(RSP)), (None, None));
        assert_eq!(back.regs.get(Reg::FsBase), Some(0x40_0dea_d000));
        assert_eq!(back.regs.get(Reg::Segment(4)), Some(0x2b));
    }
}

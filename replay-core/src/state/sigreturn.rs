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
    st.regs.forget_all();
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

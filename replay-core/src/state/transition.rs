//! From one position to the next, forwards and backwards: an instruction's semantics, a system
//! call (with its log record if the recorder wrote one), or everything unknown when something
//! the trace does not show came between.

use iced_x86::{Instruction, InstructionInfoFactory, Mnemonic};

use super::reg::{Reg, R10, R11, R8, R9, RAX, RCX, RDI, RDX, RSI};
use super::why::{self, Cause};
use super::writes::Written;
use super::{backward, flags, forward, State};
use crate::image::AddressSpace;
use crate::syscall::{effect, nr, Effect, SyscallRecord};

/// What lies between position `p` and `p + 1`.
#[derive(Debug, Clone, Copy)]
pub enum Between<'a> {
    /// The instruction at `p` ran and `next` ran after it (`None`: the history does not say).
    Insn {
        /// The instruction.
        insn: &'a Instruction,
        /// The address at `p + 1`.
        next: Option<u64>,
        /// What it writes, if summarised ([`Written`]).
        written: Option<Written>,
    },
    /// A `syscall` at `p`, and its log record if any.
    Syscall(Option<&'a SyscallRecord>),
    /// A `syscall` at `p` that the kernel (or QEMU) interrupted and will restart: it ran
    /// again at `p + 1` with nothing done, and its log record if any.
    Restart(Option<&'a SyscallRecord>),
    /// Something the trace does not show (an interrupt, a gap, untraced code, an
    /// undecodable instruction).
    Unknown,
}

fn parse(v: &str) -> Option<u64> {
    u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()
}

/// Sets registers from a name → value map: general-purpose, segment and base registers,
/// `eflags` (only the bits of `eflags_known`, where the map has it), `mxcsr`, and the vector and opmask registers by the names of
/// [`vector::named`](super::vector::named) (`xmm0` sets 16 bytes; the rest of zmm0 stays as it
/// was).
pub fn set_named(st: &mut State, map: &std::collections::BTreeMap<String, String>) {
    use super::vector::named::Named;
    for (name, value) in map {
        if let Some(n) = Named::parse(name) {
            let Some(bytes) = n.value(value) else { continue };
            match n {
                Named::Vector { index, .. } => {
                    for (at, chunk) in bytes.chunks(8).enumerate() {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(chunk);
                        st.vec.set_lane(index, 8 * at, 8, Some(u64::from_le_bytes(b)));
                    }
                }
                Named::Opmask(i) => {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&bytes);
                    st.vec.k.set(i, u64::from_le_bytes(b), u64::MAX);
                }
            }
            continue;
        }
        let Some(v) = parse(value) else { continue };
        if name == "eflags" {
            st.flags = flags::Flags::known(v);
            if let Some(known) = map.get(flags::KNOWN_NAME).and_then(|k| parse(k)) {
                st.flags.forget(flags::ALL & !known);
            }
        } else if name == "mxcsr" {
            st.mxcsr = u32::try_from(v).map_or_else(|_| Default::default(), super::mxcsr::Mxcsr::known);
        } else if let Some(r) = Reg::from_name(name) {
            st.regs.set(r, Some(v));
        }
    }
}

fn args(st: &State) -> [Option<u64>; 6] {
    [RDI, RSI, RDX, R10, R8, R9].map(|r| st.regs.get(r))
}

/// Forgets the memory a call may have written: where its log says it wrote when the log
/// tells (the bytes it holds, and the ranges it could not hold them of); else the ranges its
/// effect gives (those it reads from memory, as `st` knows it), or all memory.
fn forget_written(st: &mut State, e: &Effect, record: Option<&SyscallRecord>, space: &AddressSpace) {
    if let Some(r) = record {
        if !r.ranges_known() {
            return st.mem.forget_all();
        }
        for w in &r.writes {
            st.mem.forget(w.address, w.data().map_or(u64::MAX, |b| b.len() as u64));
        }
        for u in &r.unlogged {
            st.mem.forget(u.address, u.len);
        }
        return;
    }
    let ranges = {
        let mem = &st.mem;
        e.ranges(&|a, width| mem.read_u64(a, width, space))
    };
    match ranges {
        Some(ranges) => ranges.iter().for_each(|&(a, n)| st.mem.forget(a, n)),
        None => st.mem.forget_all(),
    }
}

/// What every system call leaves unknown: `rax` (the result), `rcx` and `r11` (which
/// SYSCALL and the kernel's return path overwrite) and RFLAGS unless the recording's CPU
/// model keeps them (QEMU), and the segment bases when the call is one that can set them
/// (or is not known; `rt_sigreturn` does not, see `sigreturn`).
fn clobber(st: &mut State, nr: Option<u64>) {
    st.regs.set(RAX, None);
    clobber_return(st);
    if nr.map_or(true, |n| n == nr::ARCH_PRCTL) {
        st.regs.set(Reg::FsBase, None);
        st.regs.set(Reg::GsBase, None);
    }
}

/// What the return to the program writes, whatever the call did: `rcx`, `r11` and RFLAGS
/// unless the recording's CPU model keeps them.
fn clobber_return(st: &mut State) {
    if !st.cpu.syscall_keeps_registers {
        st.regs.set(RCX, None);
        st.regs.set(R11, None);
        st.flags.forget(flags::ALL);
    }
}

/// `rax` when an interrupted call returns to itself to be restarted, from its logged result:
/// -ERESTARTSYS, -ERESTARTNOINTR and -ERESTARTNOHAND give the call's number back,
/// -ERESTART_RESTARTBLOCK gives `restart_syscall` (Linux, arch/x86/kernel/signal.c; QEMU
/// user mode uses -ERESTARTSYS alone and leaves rax as it was, the number).
fn restarted_rax(record: &SyscallRecord) -> Option<u64> {
    let ret = record.after.get("rax").and_then(|v| parse(v))?;
    match 0u64.wrapping_sub(ret) {
        512..=514 => Some(record.nr),
        516 => Some(nr::RESTART_SYSCALL),
        _ => None,
    }
}

/// Whether system call `nr` replaces the whole user context when it returns (a new program,
/// or a restored signal context), so its next instruction is not the one after it.
pub fn changes_context(nr: u64) -> bool {
    matches!(nr, nr::RT_SIGRETURN | nr::EXECVE | nr::EXECVEAT)
}

/// The cause of what a system call loses: its number, if known, saturated to fit.
fn syscall_cause(nr: Option<u64>, complete: bool) -> Cause {
    let n = nr.map_or(u16::MAX, |n| u16::try_from(n).unwrap_or(u16::MAX));
    if complete {
        Cause::Syscall(n)
    } else {
        Cause::SyscallIncomplete(n)
    }
}

/// Forwards over what lies between `p` and `p + 1`.
pub fn forward(st: &mut State, between: Between<'_>, space: &AddressSpace, f: &mut InstructionInfoFactory) {
    match between {
        Between::Insn { insn, .. } if space.may_rewrite(insn.ip()) => rewritable(st),
        Between::Insn { insn, next, .. } => forward::step(st, insn, next, space, f),
        Between::Unknown => st.forget_all(),
        Between::Restart(record) => {
            if let Some(r) = record {
                set_named(st, &r.before);
            }
            let nr = record.map(|r| r.nr).or(st.regs.get(RAX));
            why::insist(syscall_cause(nr, true));
            clobber_return(st);
            st.regs.set(RAX, record.and_then(restarted_rax));
        }
        Between::Syscall(record) => {
            // The registers the recorder saw at the call (the qemu backend's arguments) are
            // facts at this position.
            if let Some(r) = record {
                set_named(st, &r.before);
            }
            let nr = record.map(|r| r.nr).or(st.regs.get(RAX));
            why::insist(syscall_cause(nr, record.map_or(true, |r| r.complete)));
            let ret = record.and_then(|r| r.after.get("rax")).and_then(|v| parse(v));
            let e = nr.map_or(Effect::Anywhere, |nr| effect(nr, &args(st), ret));
            // rt_sigreturn restores the context from the frame, read before anything changes.
            let mut restored = None;
            if e == Effect::Restores {
                let mut after = st.clone();
                super::sigreturn::restore(&mut after, space);
                restored = Some(after);
            }
            // What the kernel may have written and the record does not hold is unknown; then
            // what it holds.
            forget_written(st, &e, record, space);
            for w in record.map_or(&[][..], |r| &r.writes) {
                match w.data() {
                    Some(bytes) => st.mem.write(w.address, &bytes),
                    None => st.mem.forget_all(),
                }
            }
            let bases = (st.regs.get(Reg::FsBase), st.regs.get(Reg::GsBase));
            let restores = e == Effect::Restores;
            clobber(st, nr);
            match (e, restored) {
                (Effect::Restores, Some(after)) => {
                    st.regs = after.regs;
                    st.flags = after.flags;
                    st.vec = after.vec;
                    st.mxcsr = after.mxcsr;
                }
                // ARCH_SET_FS or ARCH_SET_GS: the other base stays.
                (Effect::SetsBase { fs, value }, _) => {
                    st.regs.set(Reg::FsBase, if fs { value } else { bases.0 });
                    st.regs.set(Reg::GsBase, if fs { bases.1 } else { value });
                }
                _ => {}
            }
            if let Some(r) = record {
                match restores {
                    true => set_unrestored(st, &r.after),
                    false => set_named(st, &r.after),
                }
            }
        }
    }
}

/// QEMU 7.2's -QEMU_ESIGRETURN, which rtit's plugin logged as `rt_sigreturn`'s result before
/// it knew better; never a value the program sees (the kernel restarts or fails a call that
/// would return its -ERESTARTSYS kin).
const QEMU_ESIGRETURN: u64 = 513u64.wrapping_neg();

/// After `rt_sigreturn`, the registers its record holds where the frame left them unknown:
/// the frame is the authority on the context it restores (the step backend's record agrees
/// with it), and an old qemu recording's `rax` is QEMU's own return code, not the program's.
fn set_unrestored(st: &mut State, after: &std::collections::BTreeMap<String, String>) {
    let mut fill = after.clone();
    fill.retain(|name, value| {
        let known = Reg::from_name(name).is_some_and(|r| st.regs.get(r).is_some());
        let bogus = name == "rax" && parse(value) == Some(QEMU_ESIGRETURN);
        !known && !bogus
    });
    set_named(st, &fill);
}

/// Backwards over what lies between `p` and `p + 1`: `st` goes from the state at `p + 1` to
/// the state at `p`.
pub fn backward(st: &mut State, between: Between<'_>, space: &AddressSpace, f: &mut InstructionInfoFactory) {
    match between {
        Between::Insn { insn, .. } if space.may_rewrite(insn.ip()) => rewritable(st),
        Between::Insn { insn, next, written } => backward::step(st, insn, next, space, f, written),
        Between::Unknown => st.forget_all(),
        Between::Restart(record) => {
            why::insist(syscall_cause(record.map(|r| r.nr), true));
            clobber_return(st);
            // rax held the number before; after, the number again or restart_syscall's.
            st.regs.set(RAX, record.map(|r| r.nr));
            if let Some(r) = record {
                set_named(st, &r.before);
            }
        }
        Between::Syscall(record) => {
            let nr = record.map(|r| r.nr);
            why::insist(syscall_cause(nr, record.map_or(true, |r| r.complete)));
            let ret = record
                .and_then(|r| r.after.get("rax"))
                .and_then(|v| parse(v))
                .or(st.regs.get(RAX));
            let e = match nr {
                Some(nr) => effect(nr, &args(st), ret),
                None => Effect::Anywhere,
            };
            forget_written(st, &e, record, space);
            clobber(st, nr);
            if e == Effect::Restores {
                // Before the return: what the handler left, which nothing here tells.
                super::sigreturn::unrestore(st);
                st.flags.forget(flags::ALL);
                st.vec.forget_all();
                st.mxcsr = Default::default();
            }
            if let Some(r) = record {
                st.regs.set(RAX, Some(r.nr));
                set_named(st, &r.before);
            }
        }
    }
}

/// Whether an instruction is a system call the history shows as one position.
pub fn is_syscall(insn: &Instruction) -> bool {
    insn.mnemonic() == Mnemonic::Syscall
}

/// An instruction in image pages the program made writable: what ran there may not be what
/// the image (and so the decoded instruction) says, and what it read or wrote is not known
/// either way, so nothing is known across it, in either direction; never a value the
/// image's version of the code would give.
fn rewritable(st: &mut State) {
    why::insist(Cause::Rewritable);
    st.forget_all();
}

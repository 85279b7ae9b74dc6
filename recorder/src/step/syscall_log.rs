//! The system call log of the step backend (`syscalls.jsonl`): after each call, the registers
//! the kernel set and the user memory it wrote, as rr logs them, so the replay knows values a
//! control-flow trace cannot tell. Which memory a call writes comes from
//! `rtit_replay_core::syscall::effect`, the same table the replay uses when there is no log.

use rtit_replay_core::syscall::{effect, logged_writes, MemoryWrite, SyscallRecord};

use super::tracee::{regs_map, Regs, Tracee};

/// What a successful `mmap` of a file that is not an ELF image mapped (see
/// [`crate::sideband::mapped_file`]).
fn mapped_file(tracee: &Tracee, before: &Regs, after: &Regs) -> Option<MemoryWrite> {
    let fd = before.r8 as i64;
    if fd < 0 {
        return None;
    }
    let path = std::fs::read_link(format!("/proc/{}/fd/{fd}", tracee.pid)).ok()?;
    crate::sideband::mapped_file(&path, after.rax, before.rsi, before.r10, |a, b| tracee.read(a, b))
}

/// The record of call `nr` at `position` (`ip`), from the registers before and after it.
pub fn record(tracee: &Tracee, position: u64, ip: u64, nr: u64, before: &Regs, after: &Regs) -> SyscallRecord {
    let args = [before.rdi, before.rsi, before.rdx, before.r10, before.r8, before.r9].map(Some);
    let all = regs_map(after);
    let kept: &[&str] = if nr == rtit_replay_core::syscall::nr::RT_SIGRETURN {
        // Every register comes back from the signal frame.
        &[
            "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
            "r15", "eflags", "fs_base", "gs_base",
        ]
    } else {
        &["rax", "rcx", "r11", "eflags", "fs_base", "gs_base"]
    };
    let after_map = all.into_iter().filter(|(k, _)| kept.contains(&k.as_str())).collect();
    let logged = logged_writes(&effect(nr, &args, Some(after.rax)), &|a, b| tracee.read(a, b));
    let mut writes = logged.writes;
    if nr == 9 {
        writes.extend(mapped_file(tracee, before, after));
    }
    SyscallRecord {
        position,
        ip,
        nr,
        before: Default::default(),
        after: after_map,
        writes,
        complete: logged.complete,
        unlogged: logged.unlogged,
    }
}

//! The registers at the program's first instruction as the plugin knows them without QEMU's
//! gdbstub: what QEMU's linux-user loader and CPU reset give (as Linux does at execve), and
//! the stack pointer the plugin found.

use rtit_recorder::outcome::RegisterMap;

/// The registers at `entry`, the stack pointer `rsp` if the plugin found it.
pub(super) fn registers(entry: u64, rsp: Option<u64>) -> RegisterMap {
    let mut regs: RegisterMap = [
        "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
    ]
    .iter()
    .map(|r| (r.to_string(), "0x0".to_string()))
    .collect();
    regs.insert("rip".into(), format!("{entry:#x}"));
    // Linux starts a process with only IF (and the reserved bit 1) set.
    regs.insert("eflags".into(), "0x202".into());
    // QEMU's linux-user loads the selectors Linux gives a 64-bit process: __USER_CS and
    // __USER_DS (as ss), the others null (target_cpu_copy_regs).
    for (seg, v) in [
        ("cs", "0x33"),
        ("ss", "0x2b"),
        ("ds", "0x0"),
        ("es", "0x0"),
        ("fs", "0x0"),
        ("gs", "0x0"),
    ] {
        regs.insert(seg.into(), v.into());
    }
    // No segment base is set before the program sets one.
    regs.insert("fs_base".into(), "0x0".into());
    regs.insert("gs_base".into(), "0x0".into());
    // QEMU, like Linux at execve, starts SSE with MXCSR's default: all exceptions
    // masked, round to nearest, no DAZ or FTZ.
    regs.insert("mxcsr".into(), "0x1f80".into());
    // QEMU's CPU reset zeroes the vector registers, as Linux's execve does.
    for i in 0..16 {
        regs.insert(format!("ymm{i}"), "0x0".into());
    }
    if let Some(rsp) = rsp {
        regs.insert("rsp".into(), format!("{rsp:#x}"));
    }
    regs
}

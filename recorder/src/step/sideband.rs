//! Sideband of a step recording read through ptrace: the vDSO's bytes, memory snapshots and
//! symbol addresses for `--start`.

use rtit_replay_core::recording::Mapping;

use super::tracee::Tracee;
use super::StepError;
use crate::sideband::{snapshot_with, Images, Snapshot};

/// The images of the map at the start, with the vDSO read from memory.
pub fn images_from_maps(tracee: &Tracee, maps: &[Mapping]) -> Images {
    let mut images = Images::default();
    images.note(maps);
    if let Some(m) = maps.iter().find(|m| m.path.as_deref() == Some("[vdso]")) {
        let mut bytes = vec![0u8; (m.end - m.start) as usize];
        let n = tracee.read(m.start, &mut bytes);
        bytes.truncate(n);
        images.set_vdso(m.start, bytes);
    }
    images
}

/// The writable memory of the tracee (see [`snapshot_with`]).
pub fn snapshot(tracee: &Tracee, maps: &[Mapping]) -> Snapshot {
    snapshot_with(maps, |addr, buf| tracee.read(addr, buf))
}

/// The XSTATE_BV an XSAVEC at `ip` wrote (read after it ran, `regs` being the registers
/// before): which components the CPU had in use, which only the CPU knows and which decides
/// what the instruction wrote and what the XRSTOR of its area loads.
pub fn xsavec_header(tracee: &Tracee, ip: u64, regs: &super::tracee::Regs) -> Option<u64> {
    use iced_x86::{Decoder, DecoderOptions, Register as R};
    let mut bytes = [0u8; 16];
    let n = tracee.read(ip, &mut bytes);
    let insn = Decoder::with_ip(64, &bytes[..n], ip, DecoderOptions::NONE).decode();
    let area = insn.virtual_address(0, 0, |r, _, _| {
        Some(match r {
            R::RAX => regs.rax,
            R::RBX => regs.rbx,
            R::RCX => regs.rcx,
            R::RDX => regs.rdx,
            R::RSI => regs.rsi,
            R::RDI => regs.rdi,
            R::RBP => regs.rbp,
            R::RSP => regs.rsp,
            R::R8 => regs.r8,
            R::R9 => regs.r9,
            R::R10 => regs.r10,
            R::R11 => regs.r11,
            R::R12 => regs.r12,
            R::R13 => regs.r13,
            R::R14 => regs.r14,
            R::R15 => regs.r15,
            R::ES | R::CS | R::SS | R::DS => 0,
            _ => return None,
        })
    })?;
    let mut header = [0u8; 8];
    (tracee.read(area + 512, &mut header) == 8).then(|| u64::from_le_bytes(header))
}

/// The run-time address of a symbol of the traced executable.
pub fn symbol_address(tracee: &Tracee, name: &str) -> Result<u64, StepError> {
    let problem = |problem: String| StepError::Start {
        at: name.to_string(),
        problem,
    };
    let exe = std::fs::read_link(format!("/proc/{}/exe", tracee.pid))
        .map_err(|e| problem(format!("cannot find the executable: {e}")))?;
    let bytes = std::fs::read(&exe).map_err(|e| problem(format!("cannot read {}: {e}", exe.display())))?;
    let exe_name = exe.display().to_string();
    let (address, relocated) =
        rtit_replay_core::image::defined_symbol(&exe_name, &bytes, name).map_err(|e| problem(e.to_string()))?;
    let bias = if relocated {
        let load = tracee
            .maps()?
            .iter()
            .filter(|m| m.path.as_deref() == Some(&exe_name) && m.offset == 0)
            .map(|m| m.start)
            .min()
            .ok_or_else(|| problem(format!("{exe_name} is not mapped")))?;
        load - rtit_replay_core::image::lowest_vaddr(&exe_name, &bytes).map_err(|e| problem(e.to_string()))?
    } else {
        0
    };
    Ok(address + bias)
}

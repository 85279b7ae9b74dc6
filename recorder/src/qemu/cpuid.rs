//! The CPUID table of QEMU's CPU model (`cpuid.json`): the plugin API cannot read what a
//! `cpuid` returned, but QEMU's answer is a fixed function of its version and `-cpu`, so
//! `rtit record` runs a probe program under the same `qemu-x86_64` once and asks every leaf
//! and subleaf. The dynamic loader sizes its lazy-binding save area from CPUID leaf 0xd;
//! without it the stack pointer is lost at the first call through the PLT.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::JoinHandle;

use rtit_replay_core::recording::cpuid::{from_probe, CpuidLeaf, SUBLEAVES};

/// Where the probe loads: a static executable with one segment.
const BASE: u64 = 0x40_0000;
/// ELF header and one program header.
const HEADERS: u64 = 64 + 56;

/// Leaves probed in each range, from its first.
const LEAVES: u32 = 0x40;

/// The probe's code for the leaves of `ranges` (`first..=last` each): for each leaf and
/// subleaf `0..SUBLEAVES`, `cpuid` with eax, ebx, ecx, edx (16 bytes) kept on the stack in
/// order; then one write of them all to stdout (a write each took thousands of system calls
/// through QEMU, a third of a short recording's time) and exit(0). One program for all the
/// ranges: each run of QEMU costs some 25 ms to start.
fn code(ranges: &[(u32, u32)]) -> Vec<u8> {
    let size: u32 = ranges
        .iter()
        .map(|&(first, last)| (last - first + 1) * SUBLEAVES * 16)
        .sum();
    let mut c = vec![0x48, 0x81, 0xec]; // sub rsp, size
    c.extend(size.to_le_bytes());
    c.extend([0x49, 0x89, 0xe6]); // mov r14, rsp
    for &(first, last) in ranges {
        c.extend([0x41, 0xbc]); // mov r12d, first
        c.extend(first.to_le_bytes());
        let outer = c.len();
        c.extend([0x45, 0x31, 0xed]); // xor r13d, r13d
        let inner = c.len();
        c.extend([
            0x44, 0x89, 0xe0, // mov eax, r12d
            0x44, 0x89, 0xe9, // mov ecx, r13d
            0x0f, 0xa2, // cpuid
            0x41, 0x89, 0x06, // mov [r14], eax
            0x41, 0x89, 0x5e, 0x04, // mov [r14+4], ebx
            0x41, 0x89, 0x4e, 0x08, // mov [r14+8], ecx
            0x41, 0x89, 0x56, 0x0c, // mov [r14+12], edx
            0x49, 0x83, 0xc6, 0x10, // add r14, 16
            0x41, 0xff, 0xc5, // inc r13d
            0x41, 0x83, 0xfd, // cmp r13d, SUBLEAVES
        ]);
        c.push(SUBLEAVES as u8);
        c.push(0x72); // jb inner
        c.push((inner as i64 - (c.len() as i64 + 1)) as u8);
        c.extend([0x41, 0xff, 0xc4, 0x41, 0x81, 0xfc]); // inc r12d; cmp r12d, last
        c.extend(last.to_le_bytes());
        c.push(0x76); // jbe outer
        c.push((outer as i64 - (c.len() as i64 + 1)) as u8);
    }
    // XCR0, where CPUID.1:ECX.OSXSAVE[bit 27] says XGETBV runs (else it faults): 8 more
    // bytes, edx:eax. glibc's loader reads it to choose its string functions and its
    // lazy-binding save area.
    c.extend([
        0xb8, 0x01, 0x00, 0x00, 0x00, // mov eax, 1
        0x0f, 0xa2, // cpuid
        0x0f, 0xba, 0xe1, 0x1b, // bt ecx, 27
        0x73, 0x10, // jnc +16 (past the next five)
        0x31, 0xc9, // xor ecx, ecx
        0x0f, 0x01, 0xd0, // xgetbv
        0x41, 0x89, 0x06, // mov [r14], eax
        0x41, 0x89, 0x56, 0x04, // mov [r14+4], edx
        0x49, 0x83, 0xc6, 0x08, // add r14, 8
    ]);
    c.extend([
        0xb8, 0x01, 0x00, 0x00, 0x00, // mov eax, 1 (write)
        0xbf, 0x01, 0x00, 0x00, 0x00, // mov edi, 1
        0x48, 0x89, 0xe6, // mov rsi, rsp
        0x4c, 0x89, 0xf2, // mov rdx, r14
        0x48, 0x29, 0xe2, // sub rdx, rsp
        0x0f, 0x05, // syscall
    ]);
    c.extend([0xb8, 0x3c, 0x00, 0x00, 0x00, 0x31, 0xff, 0x0f, 0x05]); // exit(0)
    c
}

/// A static x86-64 ELF executable of `code`, loaded at [`BASE`] and entered at its start.
fn elf(code: &[u8]) -> Vec<u8> {
    let size = HEADERS + code.len() as u64;
    let mut e = Vec::with_capacity(size as usize);
    e.extend(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0");
    e.extend(2u16.to_le_bytes()); // ET_EXEC
    e.extend(0x3eu16.to_le_bytes()); // EM_X86_64
    e.extend(1u32.to_le_bytes());
    e.extend((BASE + HEADERS).to_le_bytes()); // entry
    e.extend(64u64.to_le_bytes()); // phoff
    e.extend(0u64.to_le_bytes()); // shoff
    e.extend(0u32.to_le_bytes()); // flags
    for v in [64u16, 56, 1, 64, 0, 0] {
        e.extend(v.to_le_bytes()); // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
    }
    e.extend(1u32.to_le_bytes()); // PT_LOAD
    e.extend(5u32.to_le_bytes()); // R + X
    e.extend(0u64.to_le_bytes()); // offset
    e.extend(BASE.to_le_bytes()); // vaddr
    e.extend(BASE.to_le_bytes()); // paddr
    e.extend(size.to_le_bytes()); // filesz
    e.extend(size.to_le_bytes()); // memsz
    e.extend(0x1000u64.to_le_bytes()); // align
    e.extend(code);
    e
}

/// The probe, run on a thread of its own beside the recording (a run of QEMU of its own,
/// ~25 ms, was a tenth of a short recording after it). Dropping it waits for the probe, which
/// writes into the scratch directory: a file written there while the directory is removed
/// makes the removal fail, and the directory stay.
pub struct Probe(Option<JoinHandle<Result<Vec<CpuidLeaf>, String>>>);

impl Probe {
    /// Starts [`probe`] on a thread.
    pub fn start(qemu: &Path, dir: &Path) -> Self {
        let (qemu, dir) = (qemu.to_path_buf(), dir.to_path_buf());
        Self(Some(std::thread::spawn(move || probe(&qemu, &dir))))
    }

    /// The table, once the probe is done.
    pub fn table(mut self) -> Result<Vec<CpuidLeaf>, String> {
        match self.0.take().map(JoinHandle::join) {
            Some(Ok(table)) => table,
            Some(Err(_)) => Err("the CPUID probe's thread panicked".into()),
            None => Err("the CPUID probe was not started".into()),
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if let Some(thread) = self.0.take() {
            let _ = thread.join();
        }
    }
}

/// Runs the probe under `qemu` (in directory `dir`) for the basic leaves and the extended
/// ones (each range up to its maximum, as leaf 0 and 0x80000000 say) and builds the table.
/// A failure leaves the table empty: replay then leaves CPUID's results unknown.
pub fn probe(qemu: &Path, dir: &Path) -> Result<Vec<CpuidLeaf>, String> {
    let ranges = [0u32, 0x8000_0000].map(|first| (first, first + LEAVES - 1));
    let (out, xcr0) = run(qemu, dir, &ranges)?;
    let mut results = Vec::new();
    for (first, _) in ranges {
        // Leaf `first` says the range's highest leaf: the others are out of range, where a
        // CPU answers with some other leaf's data.
        let max = out.iter().find(|r| r.0 == first).map_or(first, |r| r.2[0]);
        results.extend(out.iter().filter(|r| r.0 >= first && r.0 <= max));
    }
    let mut table = from_probe(&results);
    table.extend(xcr0.map(|x| CpuidLeaf::xcr(0, x)));
    Ok(table)
}

/// The probe's answers: `(leaf, subleaf, regs)`, and XCR0 where XGETBV runs.
type Answers = (Vec<(u32, u32, [u32; 4])>, Option<u64>);

fn run(qemu: &Path, dir: &Path, ranges: &[(u32, u32)]) -> Result<Answers, String> {
    let exe = dir.join("cpuid-probe");
    std::fs::write(&exe, elf(&code(ranges))).map_err(|e| format!("{}: {e}", exe.display()))?;
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", exe.display()))?;
    // Tied to this thread, which waits for it: a killed rtit leaves no probe running.
    let out = crate::tether::die_with_this_thread(&mut Command::new(qemu))
        .arg(&exe)
        .process_group(0)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", qemu.display()))?;
    let _ = std::fs::remove_file(&exe);
    let leaves = ranges.iter().flat_map(|&(first, last)| first..=last);
    let expected = leaves.clone().count() * SUBLEAVES as usize * 16;
    let xcr0 = match out.stdout.len().checked_sub(expected) {
        Some(8) => Some(u64::from_le_bytes(
            out.stdout[expected..].try_into().unwrap_or_default(),
        )),
        _ => None,
    };
    if !out.status.success() || !matches!(out.stdout.len() - expected.min(out.stdout.len()), 0 | 8) {
        return Err(format!(
            "the CPUID probe under {} ended with {} after {} of {expected} bytes",
            qemu.display(),
            out.status,
            out.stdout.len()
        ));
    }
    let word = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let leaves = leaves
        .flat_map(|leaf| (0..SUBLEAVES).map(move |sub| (leaf, sub)))
        .zip(out.stdout[..expected].chunks_exact(16))
        .map(|((leaf, sub), r)| (leaf, sub, [word(&r[0..]), word(&r[4..]), word(&r[8..]), word(&r[12..])]))
        .collect();
    Ok((leaves, xcr0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions, Mnemonic};

    #[test]
    fn the_probe_code_decodes_as_written_and_its_loops_close() {
        let code = code(&[(0, 2), (0x8000_0000, 0x8000_0003)]);
        let mut d = Decoder::with_ip(64, &code, BASE + HEADERS, DecoderOptions::NONE);
        let insns: Vec<_> = d.iter().collect();
        assert!(insns.iter().all(|i| !i.is_invalid()));
        let m: Vec<Mnemonic> = insns.iter().map(|i| i.mnemonic()).collect();
        assert_eq!(
            m.iter().filter(|&&x| x == Mnemonic::Cpuid).count(),
            3,
            "a loop a range, and OSXSAVE"
        );
        let jnc = insns.iter().find(|i| i.mnemonic() == Mnemonic::Jae).expect("jnc");
        let write = insns
            .iter()
            .find(|i| i.mnemonic() == Mnemonic::Mov && i.immediate32() == 1 && i.ip() > jnc.ip());
        assert_eq!(
            Some(jnc.near_branch_target()),
            write.map(|i| i.ip()),
            "no OSXSAVE: straight to the write"
        );
        assert_eq!(m.iter().filter(|&&x| x == Mnemonic::Xgetbv).count(), 1);
        assert_eq!(m.iter().filter(|&&x| x == Mnemonic::Syscall).count(), 2);
        let jb = insns.iter().find(|i| i.mnemonic() == Mnemonic::Jb).expect("jb");
        let inner = insns[4].ip(); // after sub rsp, mov r14, mov r12d and xor r13d
        assert_eq!(jb.near_branch_target(), inner);
        let jbe = insns.iter().find(|i| i.mnemonic() == Mnemonic::Jbe).expect("jbe");
        assert_eq!(jbe.near_branch_target(), insns[3].ip());
        assert_eq!(insns[0].immediate32(), (3 + 4) * SUBLEAVES * 16, "room for both ranges");
        assert_eq!(insns[2].immediate32(), 0);
        let second = insns
            .iter()
            .skip(3)
            .find(|i| i.mnemonic() == Mnemonic::Mov && i.immediate32() == 0x8000_0000);
        assert!(second.is_some(), "the second range starts at 0x80000000");
    }

    #[test]
    fn qemu_answers_the_probe() {
        let Ok(qemu) = crate::qemu::find::find_qemu(None) else {
            eprintln!("skipped: no qemu-x86_64");
            return;
        };
        let dir = std::env::temp_dir().join(format!("rtit-cpuid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let table = probe(&qemu, &dir).expect("the probe runs");
        let _ = std::fs::remove_dir_all(&dir);
        let vendor = rtit_replay_core::recording::cpuid::lookup(&table, 0, 0).expect("leaf 0");
        // "GenuineIntel" or "AuthenticAMD": ebx, edx, ecx spell it.
        let name: Vec<u8> = [vendor[1], vendor[3], vendor[2]]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        assert!(name.iter().all(u8::is_ascii_alphanumeric), "{name:?}");
        assert!(rtit_replay_core::recording::cpuid::lookup(&table, 0x8000_0000, 0).is_some());
        // Where CPUID says XGETBV runs (OSXSAVE), XCR0 is in the table and enables x87 and SSE.
        let osxsave = rtit_replay_core::recording::cpuid::lookup(&table, 1, 0).expect("leaf 1")[2] & 1 << 27 != 0;
        let xcr0 = rtit_replay_core::recording::cpuid::xgetbv(&table, 0);
        assert_eq!(xcr0.is_some(), osxsave, "{xcr0:?}");
        assert!(xcr0.map_or(true, |x| x & 3 == 3), "{xcr0:x?}");
    }
}

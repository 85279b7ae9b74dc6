//! A stopped process's vector state through ptrace's XSAVE register set (NT_X86_XSTATE): MXCSR,
//! xmm/ymm/zmm 0–31 and the opmasks as far as its XCR0 enables them, and XCR0 itself, which
//! Linux puts in the first software-reserved bytes (464–471) of the legacy region
//! (`asm/user.h`: "the OS enabled xstate mask, the same as XGETBV's XCR0"). The state layer
//! needs XCR0 exactly: it decides what XSAVE writes and where XSAVEC's compacted components lie.
//!
//! The layout is XSAVE's standard format (SDM vol. 1, 13.4) with this CPU's offsets, as Linux
//! copies it out (`copy_xstate_to_uabi_buf`): MXCSR at 24, xmm0–15 at 160, XSTATE_BV at 512,
//! ymm0–15's upper halves at 576, then k0–7, zmm0–15's upper halves and zmm16–31 where CPUID
//! leaf 0DH puts them (1088, 1152, 1664 on Intel's processors; 832, 896, 1408 on AMD's Zen 4,
//! which has no MPX: reading Intel's offsets there took zmm21 for zmm17). A component whose
//! XSTATE_BV bit is clear is in its initial state, all zeros, whatever the buffer holds.

use std::sync::OnceLock;

use nix::unistd::Pid;
use rtit_replay_core::recording::XsaveLayout;
use rtit_replay_core::state::vector::named::hex;

use crate::outcome::RegisterMap;

/// Bytes read: up to the end of zmm16–31 and PKRU (what the state layer tracks) on any CPU.
const SIZE: usize = 2752;

/// This CPU's XSAVE layout (CPUID leaf 0DH), which a recording made here keeps.
pub fn host_layout() -> XsaveLayout {
    static HOST: OnceLock<XsaveLayout> = OnceLock::new();
    *HOST.get_or_init(|| {
        XsaveLayout::from_cpuid(|c| {
            let r = cpuid(0xd, c);
            Some((r.eax, r.ebx))
        })
    })
}

/// CPUID, which every x86-64 processor has.
#[allow(unused_unsafe, unsafe_code)]
fn cpuid(leaf: u32, subleaf: u32) -> std::arch::x86_64::CpuidResult {
    // SAFETY: CPUID is an unprivileged instruction every x86-64 processor implements; the
    // intrinsic is unsafe only on toolchains older than the one that made it safe.
    unsafe { std::arch::x86_64::__cpuid_count(leaf, subleaf) }
}
/// `NT_X86_XSTATE`, the regset's note type.
const NT_X86_XSTATE: nix::libc::c_int = 0x202;

/// The vector state of a stopped thread, as the kernel gave it.
#[derive(Debug, Clone)]
pub struct XState {
    area: Vec<u8>,
    layout: XsaveLayout,
}

impl XState {
    /// Reads it (PTRACE_GETREGSET).
    pub fn read(pid: Pid) -> Result<XState, String> {
        let mut area = vec![0u8; SIZE];
        let mut iov = nix::libc::iovec {
            iov_base: area.as_mut_ptr().cast(),
            iov_len: area.len(),
        };
        // SAFETY: PTRACE_GETREGSET writes at most `iov_len` bytes into the buffer `iov`
        // points to, which lives until the call returns; it reads nothing else of ours.
        #[allow(unsafe_code)]
        let r = unsafe {
            nix::libc::ptrace(
                nix::libc::PTRACE_GETREGSET,
                pid.as_raw(),
                NT_X86_XSTATE as usize as *mut nix::libc::c_void,
                std::ptr::addr_of_mut!(iov).cast::<nix::libc::c_void>(),
            )
        };
        if r < 0 {
            return Err(format!(
                "PTRACE_GETREGSET NT_X86_XSTATE: {}",
                std::io::Error::last_os_error()
            ));
        }
        area.truncate(iov.iov_len);
        Ok(Self::from_area(area, host_layout()))
    }

    /// From an XSAVE area in the standard format with `layout`'s offsets (the kernel's copy,
    /// or a test's).
    pub fn from_area(area: Vec<u8>, layout: XsaveLayout) -> XState {
        XState { area, layout }
    }

    fn u64_at(&self, at: usize) -> u64 {
        self.area
            .get(at..at + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    /// XCR0, as Linux reports it at byte 464; `None` if the area is too short to say.
    pub fn xcr0(&self) -> Option<u64> {
        (self.area.len() >= 472)
            .then(|| self.u64_at(464))
            .filter(|&x| x & 0b11 == 0b11)
    }

    /// `len` bytes of component `c` at `at`, or zeros if XSTATE_BV says it is initial; `None`
    /// if the area does not hold them.
    fn part(&self, c: u32, at: usize, len: usize) -> Option<Vec<u8>> {
        let start = match c {
            1 => 0,
            _ => usize::try_from(self.layout.offset(c)?).ok()?,
        };
        let at = start + at;
        let bytes = self.area.get(at..at + len)?;
        Some(if self.u64_at(512) & 1 << c == 0 {
            vec![0; len]
        } else {
            bytes.to_vec()
        })
    }

    /// MXCSR and every vector and opmask register XCR0 enables, by the names a recording's
    /// register maps use: `zmm0`–`zmm31` and `k0`–`k7` with AVX-512, else `ymm0`–`ymm15` with
    /// AVX, else `xmm0`–`xmm15`.
    pub fn registers(&self) -> RegisterMap {
        let mut map = RegisterMap::new();
        let Some(xcr0) = self.xcr0() else {
            return map;
        };
        if let Some(m) = self.area.get(24..28) {
            let m = u32::from_le_bytes(m.try_into().unwrap_or([0; 4]));
            map.insert("mxcsr".to_string(), format!("{m:#x}"));
        }
        let avx = xcr0 & 1 << 2 != 0;
        let avx512 = xcr0 & 0b111 << 5 == 0b111 << 5;
        let count = if avx512 { 32 } else { 16 };
        for i in 0..count {
            let mut v = Vec::with_capacity(64);
            let parts: Vec<Option<Vec<u8>>> = if i < 16 {
                vec![
                    self.part(1, 160 + 16 * i, 16),
                    avx.then(|| self.part(2, 16 * i, 16)).flatten(),
                    avx512.then(|| self.part(6, 32 * i, 32)).flatten(),
                ]
            } else {
                vec![self.part(7, 64 * (i - 16), 64)]
            };
            for p in parts.into_iter().map_while(|p| p) {
                v.extend(p);
            }
            let name = match v.len() {
                16 => "xmm",
                32 => "ymm",
                64 => "zmm",
                _ => continue,
            };
            map.insert(format!("{name}{i}"), hex(&v));
        }
        if avx512 {
            for i in 0..8 {
                if let Some(k) = self.part(5, 8 * i, 8) {
                    map.insert(format!("k{i}"), hex(&k));
                }
            }
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_in_their_initial_state_read_as_zero_and_xcr0_decides_the_names() {
        let mut area = vec![0u8; SIZE];
        area[464..472].copy_from_slice(&0xe7u64.to_le_bytes()); // x87, SSE, AVX, AVX-512
        area[24..28].copy_from_slice(&0x1f80u32.to_le_bytes());
        area[160] = 0x11; // xmm0's low byte
        area[576] = 0x22; // ymm0's byte 16
        area[1152 + 31] = 0x33; // zmm0's last byte
        area[1088] = 0x44; // k0
        area[1664 + 64] = 0x55; // zmm17's low byte
                                // SSE, AVX and ZMM_Hi256 in use; opmask and Hi16_ZMM initial.
        area[512] = 0b0100_0110;
        let x = XState::from_area(area.clone(), XsaveLayout::intel());
        assert_eq!(x.xcr0(), Some(0xe7));
        let r = x.registers();
        assert_eq!(r["mxcsr"], "0x1f80");
        assert_eq!(r["zmm0"], format!("0x33{}22{}11", "0".repeat(92), "0".repeat(30)));
        assert_eq!(r["k0"], "0x0", "initial: the buffer's byte does not count");
        assert_eq!(r["zmm17"], "0x0");
        assert_eq!(r.len(), 1 + 32 + 8);
        // Without AVX-512: ymm0–15 only.
        area[464..472].copy_from_slice(&0x7u64.to_le_bytes());
        let r = XState::from_area(area, XsaveLayout::intel()).registers();
        assert_eq!(r["ymm0"], format!("0x22{}11", "0".repeat(30)));
        assert!(!r.contains_key("zmm0") && !r.contains_key("k0") && !r.contains_key("ymm16"));
    }

    #[test]
    fn the_avx512_registers_are_read_where_the_cpu_puts_them() {
        // AMD's Zen 4 (no MPX): k0-7 at 832, zmm0-15's upper halves at 896, zmm16-31 at 1408.
        let zen4 = XsaveLayout::from_cpuid(|c| match c {
            2 => Some((256, 576)),
            5 => Some((64, 832)),
            6 => Some((512, 896)),
            7 => Some((1024, 1408)),
            _ => Some((0, 0)),
        });
        let mut area = vec![0u8; SIZE];
        area[464..472].copy_from_slice(&0xe7u64.to_le_bytes());
        area[512] = 0b1110_0110;
        area[832 + 8] = 0x44; // k1
        area[896] = 0x33; // zmm0's byte 32
        area[1408 + 64] = 0x55; // zmm17's low byte
        area[1664 + 64] = 0x66; // where Intel's zmm17 would be: zmm21's here
        let r = XState::from_area(area, zen4).registers();
        assert_eq!(r["k1"], "0x44");
        assert_eq!(r["zmm0"], format!("0x33{}", "0".repeat(64)));
        assert_eq!(r["zmm17"], "0x55");
        assert_eq!(r["zmm21"], "0x66");
    }

    #[test]
    fn this_cpus_layout_is_what_cpuid_says() {
        let l = host_layout();
        // AVX is right after the header on every processor that has it.
        assert!(l.offset(2).map_or(true, |o| o == 576));
        // Every component lies past the header and inside what this file reads, or the
        // state layer's copies of it would be cut short.
        for (c, offset, size) in l.components().filter(|&(c, ..)| c <= 9) {
            assert!(
                offset >= 576 && offset + size <= SIZE as u64,
                "component {c} at {offset}+{size}"
            );
        }
    }
}

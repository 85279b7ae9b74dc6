//! Is this an RTIT machine? RTIT is not enumerated (§3.1): the family/model/stepping must be
//! one of §1.2, and then a try-accept: RDMSR of RTIT_CTL must not fault. rtit also needs root
//! and the Linux MSR device. Each check that fails gives one line naming what is missing.

use std::path::Path;

use rtit_replay_core::recording::CpuInfo;
use rtit_replay_core::regs::msr;

use super::device::Msrs;
use super::linux::{msr_device, LinuxMsrs};

/// The cores with RTIT (§1.2): family, model, stepping, microarchitecture.
pub const RTIT_CPUS: [(u32, u32, u32, &str); 7] = [
    (0x6, 0x37, 0x8, "Silvermont"),
    (0x6, 0x5d, 0x0, "Silvermont"),
    (0x6, 0x5d, 0x1, "Silvermont"),
    (0x6, 0x4a, 0x8, "Silvermont"),
    (0x6, 0x4d, 0x8, "Silvermont"),
    (0x6, 0x5a, 0x0, "Silvermont"),
    (0x6, 0x4c, 0x3, "Airmont"),
];

/// The microarchitecture if `cpu` is one of §1.2, else the one line saying it is not.
pub fn check_cpu(cpu: &CpuInfo) -> Result<&'static str, String> {
    RTIT_CPUS
        .iter()
        .find(|&&(f, m, s, _)| (f, m, s) == (cpu.family, cpu.model, cpu.stepping))
        .map(|&(.., arch)| arch)
        .ok_or_else(|| {
            let name = if cpu.model_name.is_empty() {
                &cpu.vendor
            } else {
                &cpu.model_name
            };
            format!(
                "RTIT needs an Atom Silvermont/Airmont CPU (§1.2 of the RTIT reference); this is {name} \
                 (family {:#x}, model {:#x}, stepping {})",
                cpu.family, cpu.model, cpu.stepping
            )
        })
}

/// Checks everything the msr backend needs on logical processor `cpu`, in order: the CPU
/// model, root, the MSR device (loading the `msr` module if it is missing), and a read of
/// RTIT_CTL. Returns the opened device, or the one line naming the first thing missing.
pub fn detect(cpu: usize) -> Result<LinuxMsrs, String> {
    let info = crate::writer::cpu_info();
    let arch = check_cpu(&info)?;
    if !nix::unistd::geteuid().is_root() {
        return Err(format!(
            "RTIT is programmed through {}, which only root can use; run rtit record as root",
            msr_device(cpu)
        ));
    }
    let device = msr_device(cpu);
    if !Path::new(&device).exists() {
        let loaded = crate::tether::die_with_this_thread(std::process::Command::new("modprobe").arg("msr")).status();
        if !Path::new(&device).exists() {
            let why = match loaded {
                Ok(s) if s.success() => "it did not appear".to_string(),
                Ok(s) => format!("it failed ({s})"),
                Err(e) => format!("it could not run ({e})"),
            };
            return Err(format!("{device} is missing and `modprobe msr` did not help: {why}"));
        }
    }
    let mut msrs = LinuxMsrs::open(cpu).map_err(|e| format!("cannot open {device}: {e}"))?;
    msrs.read(msr::CTL).map_err(|e| {
        format!(
            "this {arch} core ({}) refuses RDMSR of RTIT_CTL (§3.1 try-accept): {e}",
            info.model_name
        )
    })?;
    Ok(msrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(family: u32, model: u32, stepping: u32, name: &str) -> CpuInfo {
        CpuInfo {
            vendor: "GenuineIntel".into(),
            model_name: name.into(),
            family,
            model,
            stepping,
            xcr0: None,
            syscall_keeps_registers: false,
            xsave_all_in_use: false,
            xsave_layout: None,
            lzcnt: None,
            bmi1: None,
            logic_clears_af: None,
        }
    }

    #[test]
    fn only_the_cores_of_section_1_2_qualify() {
        assert_eq!(check_cpu(&cpu(6, 0x4c, 3, "Atom x5-Z8300")), Ok("Airmont"));
        assert_eq!(check_cpu(&cpu(6, 0x37, 8, "Atom E3845")), Ok("Silvermont"));
        // The right model at another stepping is not listed.
        assert!(check_cpu(&cpu(6, 0x37, 9, "Atom E3845")).is_err());
        let epyc = check_cpu(&cpu(0x17, 0x31, 0, "AMD EPYC 7B12")).expect_err("not RTIT");
        assert!(epyc.starts_with("RTIT needs an Atom Silvermont/Airmont CPU"), "{epyc}");
        assert!(
            epyc.contains("this is AMD EPYC 7B12 (family 0x17, model 0x31, stepping 0)"),
            "{epyc}"
        );
    }

    #[test]
    fn this_machine_is_refused_in_one_line_unless_it_has_rtit() {
        let info = crate::writer::cpu_info();
        if check_cpu(&info).is_ok() {
            return; // An RTIT machine: detection depends on root and the device.
        }
        let line = detect(0).map(|_| ()).expect_err("no RTIT here");
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains(&info.model_name), "{line}");
    }
}

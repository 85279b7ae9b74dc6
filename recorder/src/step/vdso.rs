//! Keeps a traced program off the vDSO: at its first instruction, the auxiliary vector's
//! AT_SYSINFO_EHDR entry becomes AT_IGNORE, so the C library finds no vDSO and makes
//! `clock_gettime`, `gettimeofday`, `time` and `getcpu` real system calls, whose results the
//! recorder logs. In the vDSO they read the kernel's vvar page and the TSC, which no trace
//! shows, so what they return could never be known (rr patches the vDSO into system calls
//! for the same reason; QEMU 7.2 gives its programs no vDSO at all). The page stays mapped.

use super::StepError;

/// AT_NULL: the end of the auxiliary vector.
const AT_NULL: u64 = 0;
/// AT_IGNORE: an entry to skip.
const AT_IGNORE: u64 = 1;
/// AT_SYSINFO_EHDR: the vDSO's ELF header.
const AT_SYSINFO_EHDR: u64 = 33;
/// Words walked at most: argc, argv, envp and auxv of any real process fit.
const MOST: u64 = 1 << 22;

/// The stopped program's memory, as the tracer reaches it.
pub trait Memory {
    /// Reads into `buf` from `at`; the bytes read.
    fn read(&self, at: u64, buf: &mut [u8]) -> usize;
    /// Writes `bytes` at `at`.
    fn write(&self, at: u64, bytes: &[u8]) -> Result<(), StepError>;
}

/// Hides the vDSO from a program stopped at its first instruction (rsp at `argc`); the
/// address of the entry changed, or `None` if its auxiliary vector has none.
pub fn hide(tracee: &impl Memory, rsp: u64) -> Result<Option<u64>, StepError> {
    let word = |at: u64| -> Result<u64, StepError> {
        let mut b = [0u8; 8];
        if tracee.read(at, &mut b) != 8 {
            return Err(StepError::Ptrace(format!(
                "cannot read the initial stack at {at:#x} (finding the auxiliary vector)"
            )));
        }
        Ok(u64::from_le_bytes(b))
    };
    let argc = word(rsp)?;
    // argv's pointers and their NULL, then the environment's up to its NULL.
    let mut at = rsp + 8 * (argc.min(MOST) + 2);
    let end = rsp + 8 * MOST;
    while word(at)? != 0 {
        at += 8;
        if at >= end {
            return Ok(None);
        }
    }
    at += 8;
    while at < end {
        match word(at)? {
            AT_NULL => return Ok(None),
            AT_SYSINFO_EHDR => {
                tracee.write(at, &AT_IGNORE.to_le_bytes())?;
                return Ok(Some(at));
            }
            _ => at += 16,
        }
    }
    Ok(None)
}

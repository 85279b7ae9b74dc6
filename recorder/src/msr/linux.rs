//! The Linux side of the msr backend: the MSR device (`/dev/cpu/N/msr`, read and written at
//! the MSR's address as file offset), the output region in a 2 MiB huge page whose physical
//! address `/proc/self/pagemap` gives (root only), pinning to one logical processor, and the
//! lock that keeps a second rtit off a CPU being traced.
//!
//! Limits: one huge page, so the region is at most 2 MiB (RTIT allows 4 MiB, §3.3.11, which
//! would need two physically adjacent huge pages); the kernel must have a huge page free
//! (`echo 1 > /proc/sys/vm/nr_hugepages`).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use nix::fcntl::{Flock, FlockArg};
use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;

use super::device::{MsrError, Msrs, OutputRegion};

/// The MSR device of logical processor `cpu`.
pub fn msr_device(cpu: usize) -> String {
    format!("/dev/cpu/{cpu}/msr")
}

/// The MSR device of one logical processor.
pub struct LinuxMsrs {
    cpu: usize,
    file: File,
}

impl LinuxMsrs {
    /// Opens `/dev/cpu/CPU/msr` for reading and writing.
    pub fn open(cpu: usize) -> std::io::Result<Self> {
        let file = File::options().read(true).write(true).open(msr_device(cpu))?;
        Ok(Self { cpu, file })
    }

    fn error(&self, op: &'static str, addr: u32, e: &std::io::Error) -> MsrError {
        MsrError::Device {
            op,
            addr,
            cpu: self.cpu,
            message: e.to_string(),
        }
    }
}

impl Msrs for LinuxMsrs {
    fn read(&mut self, addr: u32) -> Result<u64, MsrError> {
        let mut buf = [0u8; 8];
        self.file
            .read_exact_at(&mut buf, u64::from(addr))
            .map_err(|e| self.error("rdmsr", addr, &e))?;
        Ok(u64::from_le_bytes(buf))
    }

    fn write(&mut self, addr: u32, value: u64) -> Result<(), MsrError> {
        self.file
            .write_all_at(&value.to_le_bytes(), u64::from(addr))
            .map_err(|e| self.error("wrmsr", addr, &e))
    }
}

/// The size of the huge page the region lives in.
pub const HUGE_PAGE: usize = 2 << 20;

/// A 2 MiB huge page, locked in memory, as the output region.
pub struct HugePage {
    ptr: *mut u8,
    size: usize,
    physical: u64,
}

impl HugePage {
    /// Maps, populates and locks a huge page and finds its physical address.
    pub fn new() -> Result<Self, String> {
        use nix::libc;
        // SAFETY: an anonymous private mapping at an address the kernel chooses aliases no
        // Rust object; the pointer is only used within `size` bytes until `Drop` unmaps it.
        #[allow(unsafe_code)]
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                HUGE_PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | libc::MAP_POPULATE | libc::MAP_LOCKED,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!(
                "no 2 MiB huge page for the output region ({}); reserve one with \
                 `echo 1 > /proc/sys/vm/nr_hugepages`",
                std::io::Error::last_os_error()
            ));
        }
        let ptr = ptr.cast::<u8>();
        let mut page = Self {
            ptr,
            size: HUGE_PAGE,
            physical: 0,
        };
        page.physical = physical_address(ptr as u64)?;
        if page.physical % HUGE_PAGE as u64 != 0 {
            return Err(format!(
                "the huge page at physical {:#x} is not 2 MiB aligned",
                page.physical
            ));
        }
        Ok(page)
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `size` readable bytes for the life of `self`; the RTIT unit writes
        // them behind the compiler's back only while tracing, and rtit reads them after a
        // drain (§3.3.12), when no write is in flight.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.ptr, self.size)
        }
    }
}

impl OutputRegion for HugePage {
    fn physical_base(&self) -> u64 {
        self.physical
    }

    fn size(&self) -> usize {
        self.size
    }

    fn read(&self, offset: usize, out: &mut [u8]) {
        out.copy_from_slice(&self.bytes()[offset..offset + out.len()]);
    }

    fn fill(&mut self, offset: usize, len: usize, byte: u8) {
        assert!(offset + len <= self.size, "fill outside the region");
        // SAFETY: in bounds (checked above) of the mapping `self` owns.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::write_bytes(self.ptr.add(offset), byte, len);
        }
    }
}

impl Drop for HugePage {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, which nothing refers to any more.
        #[allow(unsafe_code)]
        unsafe {
            nix::libc::munmap(self.ptr.cast(), self.size);
        }
    }
}

/// The physical address of the resident page at virtual address `addr` of this process, from
/// `/proc/self/pagemap` (bits 54:0 the page frame number, bit 63 present; root sees the PFN).
pub fn physical_address(addr: u64) -> Result<u64, String> {
    let page = 4096u64;
    let path = "/proc/self/pagemap";
    let file = File::open(path).map_err(|e| format!("cannot open {path}: {e}"))?;
    let mut entry = [0u8; 8];
    file.read_exact_at(&mut entry, addr / page * 8)
        .map_err(|e| format!("cannot read {path} at {:#x}: {e}", addr / page * 8))?;
    let entry = u64::from_le_bytes(entry);
    let pfn = entry & ((1 << 55) - 1);
    if entry & 1 << 63 == 0 {
        return Err(format!("{path}: the page at {addr:#x} is not resident"));
    }
    if pfn == 0 {
        return Err(format!("{path} hides physical addresses (it needs root)"));
    }
    Ok(pfn * page + addr % page)
}

/// Pins process (or thread) `pid` (0: the caller) to logical processor `cpu`.
pub fn pin(pid: Pid, cpu: usize) -> Result<(), String> {
    let mut set = CpuSet::new();
    set.set(cpu).map_err(|e| format!("CPU {cpu}: {e}"))?;
    sched_setaffinity(pid, &set).map_err(|e| format!("cannot pin to CPU {cpu}: {e}"))
}

/// Lets process `pid` run on every CPU again (after [`pin`]).
pub fn unpin(pid: Pid) -> Result<(), String> {
    let mut set = CpuSet::new();
    for cpu in 0..CpuSet::count() {
        let _ = set.set(cpu);
    }
    sched_setaffinity(pid, &set).map_err(|e| format!("cannot unpin: {e}"))
}

/// The lock one rtit holds on a CPU it traces (a second rtit on that CPU is refused).
pub struct CpuLock {
    _lock: Flock<File>,
    /// The lock file.
    pub path: PathBuf,
}

impl CpuLock {
    /// Takes the lock of `cpu` under `dir` (normally `/run`), or says who holds it.
    pub fn take(dir: &std::path::Path, cpu: usize) -> Result<Self, String> {
        let path = dir.join(format!("rtit-cpu{cpu}.lock"));
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|_| {
            format!(
                "another rtit is tracing on CPU {cpu} (it holds {}); RTIT has one unit per CPU",
                path.display()
            )
        })?;
        Ok(Self { _lock: lock, path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_cpu_is_refused() {
        let dir = std::env::temp_dir().join(format!("rtit-lock-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let first = CpuLock::take(&dir, 3).expect("first");
        let second = CpuLock::take(&dir, 3).err().expect("second refused");
        assert!(second.contains("another rtit is tracing on CPU 3"), "{second}");
        assert!(CpuLock::take(&dir, 4).is_ok(), "another CPU is free");
        drop(first);
        assert!(CpuLock::take(&dir, 3).is_ok(), "free again");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pagemap_gives_a_physical_address_to_root() {
        let data = vec![7u8; 8192];
        let at = data.as_ptr() as u64;
        match physical_address(at) {
            Ok(phys) => assert_eq!(phys % 4096, at % 4096, "same offset in the page"),
            Err(e) => assert!(!nix::unistd::geteuid().is_root() && e.contains("root"), "{e}"),
        }
    }
}

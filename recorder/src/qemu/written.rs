//! The pages of the program's memory written since `rtit record` last looked, from outside
//! QEMU's process: the plugin registers the program's private mappings for asynchronous
//! write-protection (`rtit-qemu-plugin`'s `written`), a first write to a page clears its
//! protection, and the pagemap's PAGEMAP_SCAN (Linux 6.7) lists the pages written since and
//! protects them again in the same call. QEMU user mode keeps the program's memory at the
//! program's addresses, so these are the program's pages. Only pages of registered mappings
//! are listed (category `PAGE_IS_WPALLOWED`): QEMU's own memory never is.

use std::fs::File;
use std::os::fd::AsRawFd;

use nix::unistd::Pid;

/// `struct pm_scan_arg` (12 u64 fields).
#[repr(C)]
#[derive(Default)]
struct ScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 = 3 << 30 | (size_of::<ScanArg>() as u64) << 16 | (b'f' as u64) << 8 | 16;
/// Protect again what matched.
const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
/// On a mapping registered for asynchronous write-protection.
const PAGE_IS_WPALLOWED: u64 = 1 << 0;
/// Written since last protected.
const PAGE_IS_WRITTEN: u64 = 1 << 1;
/// The top of the user address space (4-level paging; the scan's end must not pass it, and
/// QEMU maps nothing above it without 5-level paging asked for).
const USER_END: u64 = (1 << 47) - 4096;
/// Page size.
pub const PAGE: u64 = 4096;

/// QEMU's pagemap, open for scans.
pub struct Pagemap {
    file: File,
    pid: Pid,
}

impl Pagemap {
    /// Opens the pagemap of QEMU's process `pid`.
    pub fn open(pid: Pid) -> std::io::Result<Self> {
        let file = File::open(format!("/proc/{pid}/pagemap"))?;
        Ok(Self { file, pid })
    }

    /// The ranges of pages written since the last call (or since the plugin protected
    /// them), in address order, each protected again.
    pub fn take_written(&self) -> std::io::Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        let mut regions = vec![PageRegion::default(); 4096];
        let mut start = 0;
        while start < USER_END {
            let mut arg = ScanArg {
                size: size_of::<ScanArg>() as u64,
                flags: PM_SCAN_WP_MATCHING,
                start,
                end: USER_END,
                vec: regions.as_mut_ptr() as u64,
                vec_len: regions.len() as u64,
                category_mask: PAGE_IS_WPALLOWED | PAGE_IS_WRITTEN,
                return_mask: PAGE_IS_WRITTEN,
                ..ScanArg::default()
            };
            // SAFETY: `arg` is the kernel's `struct pm_scan_arg`, and `vec` points at
            // `vec_len` writable `struct page_region`s; both live for the call.
            #[allow(unsafe_code)]
            let n = unsafe { nix::libc::ioctl(self.file.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            out.extend(regions[..n as usize].iter().map(|r| (r.start, r.end)));
            // The vector filled up before the walk's end: go on from where it stopped.
            if (n as u64) < arg.vec_len || arg.walk_end <= start {
                break;
            }
            start = arg.walk_end;
        }
        Ok(out)
    }

    /// The bytes of written `ranges`, page by page: (address, its 4096 bytes, or `None`
    /// for a page that could not be read: unknown, not unchanged).
    pub fn read(&self, ranges: &[(u64, u64)]) -> Vec<(u64, Option<Vec<u8>>)> {
        let mut pages = Vec::new();
        for &(start, end) in ranges {
            let bytes = super::gdbstub::guest::read(self.pid, start, (end - start) as usize);
            let mut at = start;
            for page in bytes.chunks_exact(PAGE as usize) {
                pages.push((at, Some(page.to_vec())));
                at += PAGE;
            }
            // What could not be read, page by page (one read stops at the first failure).
            while at < end {
                let page = super::gdbstub::guest::read(self.pid, at, PAGE as usize);
                pages.push((at, (page.len() == PAGE as usize).then_some(page)));
                at += PAGE;
            }
        }
        pages
    }
}

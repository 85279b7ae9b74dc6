//! gdbstub's file extensions for [`ReplayTarget`]: exec-file, auxv, the SVR4 library list and
//! host I/O, each answered by the target's [`crate::files::Files`].

use gdbstub::common::Pid;
use gdbstub::target::ext::auxv::Auxv;
use gdbstub::target::ext::exec_file::ExecFile;
use gdbstub::target::ext::host_io::{
    FsKind, HostIo, HostIoClose, HostIoCloseOps, HostIoErrno, HostIoError, HostIoFstat, HostIoFstatOps, HostIoOpen,
    HostIoOpenFlags, HostIoOpenMode, HostIoOpenOps, HostIoPread, HostIoPreadOps, HostIoReadlink, HostIoReadlinkOps,
    HostIoResult, HostIoSetfs, HostIoSetfsOps, HostIoStat,
};
use gdbstub::target::ext::libraries::LibrariesSvr4;
use gdbstub::target::TargetResult;

use crate::files::copy_out;
use crate::target::ReplayTarget;

impl ExecFile for ReplayTarget {
    fn get_exec_file(
        &self,
        _pid: Option<Pid>,
        offset: u64,
        length: usize,
        buf: &mut [u8],
    ) -> TargetResult<usize, Self> {
        Ok(copy_out(self.files.exec_path().as_bytes(), offset, length, buf))
    }
}

impl Auxv for ReplayTarget {
    fn get_auxv(&self, offset: u64, length: usize, buf: &mut [u8]) -> TargetResult<usize, Self> {
        Ok(copy_out(self.files.auxv(), offset, length, buf))
    }
}

impl LibrariesSvr4 for ReplayTarget {
    fn get_libraries_svr4(&self, offset: u64, length: usize, buf: &mut [u8]) -> TargetResult<usize, Self> {
        Ok(copy_out(self.files.svr4().as_bytes(), offset, length, buf))
    }
}

impl HostIo for ReplayTarget {
    fn support_open(&mut self) -> Option<HostIoOpenOps<'_, Self>> {
        Some(self)
    }
    fn support_close(&mut self) -> Option<HostIoCloseOps<'_, Self>> {
        Some(self)
    }
    fn support_pread(&mut self) -> Option<HostIoPreadOps<'_, Self>> {
        Some(self)
    }
    fn support_fstat(&mut self) -> Option<HostIoFstatOps<'_, Self>> {
        Some(self)
    }
    fn support_setfs(&mut self) -> Option<HostIoSetfsOps<'_, Self>> {
        Some(self)
    }
    fn support_readlink(&mut self) -> Option<HostIoReadlinkOps<'_, Self>> {
        Some(self)
    }
}

impl HostIoReadlink for ReplayTarget {
    fn readlink(&mut self, filename: &[u8], buf: &mut [u8]) -> HostIoResult<usize, Self> {
        let target = self.files.readlink(filename)?;
        let bytes = target.as_bytes();
        if bytes.len() > buf.len() {
            return Err(HostIoError::Errno(HostIoErrno::ENAMETOOLONG));
        }
        buf[..bytes.len()].copy_from_slice(bytes);
        Ok(bytes.len())
    }
}

impl HostIoOpen for ReplayTarget {
    fn open(&mut self, filename: &[u8], flags: HostIoOpenFlags, _mode: HostIoOpenMode) -> HostIoResult<u32, Self> {
        self.files.open(filename, flags, self.session.position())
    }
}

impl HostIoClose for ReplayTarget {
    fn close(&mut self, fd: u32) -> HostIoResult<(), Self> {
        self.files.close(fd)
    }
}

impl HostIoPread for ReplayTarget {
    fn pread(&mut self, fd: u32, count: usize, offset: u64, buf: &mut [u8]) -> HostIoResult<usize, Self> {
        self.files.pread(fd, count, offset, buf)
    }
}

impl HostIoFstat for ReplayTarget {
    fn fstat(&mut self, fd: u32) -> HostIoResult<HostIoStat, Self> {
        self.files.fstat(fd)
    }
}

impl HostIoSetfs for ReplayTarget {
    fn setfs(&mut self, _fs: FsKind) -> HostIoResult<(), Self> {
        Ok(())
    }
}

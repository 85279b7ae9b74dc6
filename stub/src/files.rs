//! What lets a plain `gdb` with no file argument find the code: the executable's path
//! (qXfer:exec-file), the files themselves over host I/O (vFile, served from the recording's
//! copies under their original paths), the auxiliary vector (AT_ENTRY and AT_PHDR, so gdb can
//! relocate a PIE; AT_BASE; AT_SYSINFO_EHDR for the vDSO) and the SVR4 library list.
//!
//! This file builds them from a recording and answers for them; `file_ops` plugs them into
//! gdbstub's extensions for [`crate::target::ReplayTarget`] (so this file needs no target).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use gdbstub::target::ext::host_io::{HostIoErrno, HostIoError, HostIoOpenFlags, HostIoOpenMode, HostIoStat};
use rtit_replay_core::recording::{ImageKind, ImageRecord, Maps, Recording};

use crate::proc_files::{cmdline_bytes, maps_text, ProcFile};

/// The recording's files as gdb asks for them.
#[derive(Debug, Default)]
pub struct Files {
    /// Original path (and the copy's own path) → the copy.
    by_path: HashMap<String, PathBuf>,
    /// The recording's directory, which every copy served must lie in.
    dir: PathBuf,
    exec: Option<String>,
    auxv: Vec<u8>,
    svr4: String,
    /// The memory map and its changes, for `/proc/PID/maps` (empty if unreadable).
    maps: Maps,
    /// The command, for `/proc/PID/cmdline`.
    command: Vec<String>,
    /// The working directory it ran in, for `/proc/PID/cwd`.
    cwd: String,
    open: HashMap<u32, Open>,
    next_fd: u32,
}

/// A file gdb opened: a copy in the recording, or text made for it (`proc_files`).
#[derive(Debug)]
enum Open {
    File(File),
    Text(Vec<u8>),
}

/// The recorded executable among the images: the one named like the command, else the first.
pub fn executable(rec: &Recording) -> Option<&ImageRecord> {
    let base = Path::new(rec.manifest.command.first()?).file_name()?;
    let mut elf = rec.manifest.images.iter().filter(|i| i.kind == ImageKind::Elf);
    elf.clone()
        .find(|i| Path::new(&i.path).file_name() == Some(base))
        .or_else(|| elf.next())
}

/// The executable's dynamic linker as the executable names it (PT_INTERP, say
/// `/lib64/ld-linux-x86-64.so.2`), and its copy among the images, which the recorder names
/// by the path it resolved to (`/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2`): the same
/// file name, else the image named like a dynamic linker. gdb opens it by the first name to
/// find the linker's debug interface (`_dl_debug_state`); without it, it warns that it
/// cannot debug shared library initializers.
pub fn interpreter(rec: &Recording) -> Option<(String, &ImageRecord)> {
    let exe = executable(rec)?;
    let interp = elf_layout(&rec.image_bytes(exe).ok()?)?.interp?;
    let name = Path::new(&interp).file_name()?;
    let mut elf = rec
        .manifest
        .images
        .iter()
        .filter(|i| i.kind == ImageKind::Elf && i != &exe);
    let image = elf
        .clone()
        .find(|i| Path::new(&i.path).file_name() == Some(name))
        .or_else(|| elf.find(|i| i.path.contains("/ld-linux") || i.path.contains("/ld64")))?;
    Some((interp, image))
}

/// What the auxv and the library list need from a 64-bit ELF file's headers.
struct Layout {
    entry: u64,
    phoff: u64,
    phnum: u16,
    /// Lowest PT_LOAD address, page-aligned.
    lowest: u64,
    /// PT_PHDR's address.
    phdr: Option<u64>,
    /// PT_DYNAMIC's address.
    dynamic: Option<u64>,
    /// PT_INTERP's path: the dynamic linker the kernel loaded for it.
    interp: Option<String>,
}

fn elf_layout(bytes: &[u8]) -> Option<Layout> {
    let u64_at = |o: usize| Some(u64::from_le_bytes(bytes.get(o..o + 8)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(bytes.get(o..o + 4)?.try_into().ok()?));
    let mut layout = Layout {
        entry: u64_at(0x18)?,
        phoff: u64_at(0x20)?,
        phnum: u16::from_le_bytes(bytes.get(0x38..0x3a)?.try_into().ok()?),
        lowest: u64::MAX,
        phdr: None,
        dynamic: None,
        interp: None,
    };
    for i in 0..usize::from(layout.phnum) {
        let h = layout.phoff as usize + i * 56;
        let (kind, vaddr) = (u32_at(h)?, u64_at(h + 0x10)?);
        match kind {
            1 => layout.lowest = layout.lowest.min(vaddr & !0xfff),
            2 => layout.dynamic = Some(vaddr),
            3 => {
                let (offset, size) = (u64_at(h + 0x08)? as usize, u64_at(h + 0x20)? as usize);
                let name = bytes.get(offset..offset.checked_add(size)?)?;
                let name = name.split(|&b| b == 0).next()?;
                layout.interp = Some(String::from_utf8_lossy(name).into_owned());
            }
            6 => layout.phdr = Some(vaddr),
            _ => {}
        }
    }
    Some(layout)
}

impl Files {
    /// The files of a recording.
    pub fn new(rec: &Recording) -> Self {
        let mut files = Files {
            next_fd: 3,
            dir: rec.dir.clone(),
            ..Files::default()
        };
        for image in &rec.manifest.images {
            let copy = rec.dir.join(&image.file);
            files.by_path.insert(image.path.clone(), copy.clone());
            files.by_path.insert(copy.display().to_string(), copy);
        }
        if let Some((interp, image)) = interpreter(rec) {
            files.by_path.entry(interp).or_insert_with(|| rec.dir.join(&image.file));
        }
        let exe = executable(rec);
        files.exec = exe.map(|i| i.path.clone());
        let mut auxv: Vec<(u64, u64)> = Vec::new();
        let mut libraries = String::from("<library-list-svr4 version=\"1.0\">");
        for (n, image) in rec.manifest.images.iter().enumerate() {
            let Ok(bytes) = rec.image_bytes(image) else {
                continue;
            };
            let Some(l) = elf_layout(&bytes) else {
                continue;
            };
            let bias = image.load_address.wrapping_sub(l.lowest);
            match image.kind {
                // gdb loads these with `add-symbol-file` (`monitor info` prints the command).
                ImageKind::Relocatable => {}
                ImageKind::Vdso => auxv.push((33, image.load_address)), // AT_SYSINFO_EHDR
                ImageKind::Elf if Some(image) == exe => {
                    let phdr = l.phdr.map_or(image.load_address + l.phoff, |p| p.wrapping_add(bias));
                    auxv.extend([
                        (3, phdr),
                        (4, 56),
                        (5, u64::from(l.phnum)),
                        (9, l.entry.wrapping_add(bias)),
                    ]);
                }
                ImageKind::Elf => {
                    if image.path.contains("/ld-linux") || image.path.contains("/ld64") {
                        auxv.push((7, image.load_address)); // AT_BASE: the interpreter
                    }
                    let l_ld = l.dynamic.map_or(0, |d| d.wrapping_add(bias));
                    libraries += &format!(
                        "<library name=\"{}\" lm=\"{:#x}\" l_addr=\"{bias:#x}\" l_ld=\"{l_ld:#x}\" lmid=\"0x0\"/>",
                        image.path,
                        0x1000 * (n as u64 + 1)
                    );
                }
            }
        }
        libraries += "</library-list-svr4>";
        auxv.push((0, 0));
        files.auxv = auxv
            .iter()
            .flat_map(|(k, v)| k.to_le_bytes().into_iter().chain(v.to_le_bytes()))
            .collect();
        files.svr4 = libraries;
        files.maps = rec.maps().unwrap_or_default();
        files.command = rec.manifest.command.clone();
        files.cwd = rec.manifest.cwd.clone();
        files
    }

    /// The executable's original path (empty if the recording has none).
    pub fn exec_path(&self) -> &str {
        self.exec.as_deref().unwrap_or("")
    }

    /// The auxiliary vector, as the kernel lays it out.
    pub fn auxv(&self) -> &[u8] {
        &self.auxv
    }

    /// The SVR4 library list (XML).
    pub fn svr4(&self) -> &str {
        &self.svr4
    }

    /// Closes every open file (a new gdb starts with none).
    pub fn close_all(&mut self) {
        self.open.clear();
    }

    /// Opens a file of the recording by its original path, or a `/proc` file of the process
    /// as it stands at `position` (`proc_files`); anything else does not exist.
    pub fn open<E>(&mut self, filename: &[u8], flags: HostIoOpenFlags, position: u64) -> Result<u32, HostIoError<E>> {
        if flags != HostIoOpenFlags::O_RDONLY {
            return Err(HostIoError::Errno(HostIoErrno::EACCES));
        }
        let name = String::from_utf8_lossy(filename);
        let open = match ProcFile::parse(&name) {
            Some(ProcFile::Maps) => Open::Text(maps_text(&self.maps, position).into_bytes()),
            Some(ProcFile::Cmdline) => Open::Text(cmdline_bytes(&self.command)),
            Some(ProcFile::Exe | ProcFile::Cwd) => return Err(HostIoError::Errno(HostIoErrno::EISDIR)),
            None => {
                let copy = self
                    .by_path
                    .get(name.as_ref())
                    .ok_or(HostIoError::Errno(HostIoErrno::ENOENT))?;
                // A plain file inside the recording only: a FIFO or a link out of it put
                // there since it was opened is not served.
                let (file, _) = rtit_replay_core::plain_file::open(copy, Some(&self.dir))
                    .map_err(|_| HostIoError::Errno(HostIoErrno::EACCES))?;
                Open::File(file)
            }
        };
        let fd = self.next_fd;
        self.next_fd += 1;
        self.open.insert(fd, open);
        Ok(fd)
    }

    /// Where a `/proc` link of the process points: `exe` to the executable's original path,
    /// `cwd` to the directory the program was recorded in; anything else is no link.
    pub fn readlink<E>(&self, filename: &[u8]) -> Result<String, HostIoError<E>> {
        let name = String::from_utf8_lossy(filename);
        let target = match ProcFile::parse(&name) {
            Some(ProcFile::Exe) => self.exec.clone(),
            Some(ProcFile::Cwd) => Some(self.cwd.clone()).filter(|c| !c.is_empty()),
            _ => None,
        };
        target.ok_or(HostIoError::Errno(HostIoErrno::ENOENT))
    }

    /// Closes an open file.
    pub fn close<E>(&mut self, fd: u32) -> Result<(), HostIoError<E>> {
        self.open
            .remove(&fd)
            .map(drop)
            .ok_or(HostIoError::Errno(HostIoErrno::EBADF))
    }

    /// Reads at most `count` bytes at `offset` of an open file.
    pub fn pread<E>(&self, fd: u32, count: usize, offset: u64, buf: &mut [u8]) -> Result<usize, HostIoError<E>> {
        let n = count.min(buf.len());
        match self.open.get(&fd).ok_or(HostIoError::Errno(HostIoErrno::EBADF))? {
            Open::File(file) => Ok(file.read_at(&mut buf[..n], offset)?),
            Open::Text(text) => Ok(copy_out(text, offset, n, buf)),
        }
    }

    /// An open file's size, as a read-only regular file.
    pub fn fstat<E>(&self, fd: u32) -> Result<HostIoStat, HostIoError<E>> {
        let size = match self.open.get(&fd).ok_or(HostIoError::Errno(HostIoErrno::EBADF))? {
            Open::File(file) => file.metadata()?.len(),
            Open::Text(text) => text.len() as u64,
        };
        Ok(HostIoStat {
            st_dev: 0,
            st_ino: fd,
            st_mode: HostIoOpenMode::S_IRUSR,
            st_nlink: 1,
            st_uid: 0,
            st_gid: 0,
            st_rdev: 0,
            st_size: size,
            st_blksize: 4096,
            st_blocks: size.div_ceil(512),
            st_atime: 0,
            st_mtime: 0,
            st_ctime: 0,
        })
    }
}

/// Copies `data[offset..]` into `buf`, as the qXfer callbacks want.
pub fn copy_out(data: &[u8], offset: u64, length: usize, buf: &mut [u8]) -> usize {
    let start = (offset as usize).min(data.len());
    let n = (data.len() - start).min(length).min(buf.len());
    buf[..n].copy_from_slice(&data[start..start + n]);
    n
}

//! The traced process: spawning it stopped at its first instruction, and reading its
//! registers, memory, memory map and signal dispositions.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sys::personality::{self, Persona};
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use rtit_replay_core::recording::Mapping;

use super::StepError;
use crate::interrupt::Interrupt;
use crate::sideband::parse_map_line;

/// A process stopped under ptrace.
pub struct Tracee {
    pub pid: Pid,
    mem: File,
}

/// The general-purpose registers.
pub type Regs = nix::libc::user_regs_struct;

/// The ptrace options a tracee is given as it starts: it dies with rtit, the threads it
/// creates are tracees too (`super::threads`), and a successful execve stops it at the new
/// program's first instruction (`super::exec`).
pub const OPTIONS: ptrace::Options = ptrace::Options::PTRACE_O_EXITKILL
    .union(ptrace::Options::PTRACE_O_TRACECLONE)
    .union(ptrace::Options::PTRACE_O_TRACEEXEC);

/// Finds `program` as execve would: a path with a slash as is, else along `PATH`.
pub fn resolve(program: &Path) -> Result<PathBuf, StepError> {
    if program.components().count() > 1 || program.to_string_lossy().contains('/') {
        return Ok(program.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or_else(|| StepError::Program {
            program: program.display().to_string(),
            problem: "not found (neither a path nor on PATH)".to_string(),
        })
}

/// Checks that `path` is a 64-bit x86 ELF executable, or a script whose interpreter is one,
/// before running it with `args`; returns what the user should be warned about (see
/// [`privilege_warning`]).
pub fn check_executable(path: &Path, args: &[OsString]) -> Result<Vec<String>, StepError> {
    let problem = |problem: &str| StepError::Program {
        program: path.display().to_string(),
        problem: problem.to_string(),
    };
    let mut header = [0u8; 20];
    let file = File::open(path).map_err(|e| problem(&format!("cannot open it: {e}")))?;
    file.read_at(&mut header, 0)
        .map_err(|e| problem(&format!("cannot read it: {e}")))?;
    if header.starts_with(b"#!") {
        // The kernel runs its interpreter, and rtit records that (and follows its execve).
        let mut argv = vec![path.as_os_str().to_os_string()];
        argv.extend(args.iter().cloned());
        let cwd = std::env::current_dir().unwrap_or_default();
        let run = crate::exec::interpreters(path, &argv, &cwd).map_err(|e| problem(&format!("cannot be run: {e}")))?;
        return check_executable(&cwd.join(&run.file), &[]).map_err(|e| match e {
            StepError::Program { program, problem: p } => {
                problem(&format!("is a script whose interpreter {program} {p}"))
            }
            e => e,
        });
    }
    if &header[..4] != b"\x7fELF" {
        // A text file without `#!`: a shell that cannot exec it runs it with /bin/sh.
        let text = header
            .iter()
            .all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace() || b == 0);
        if text {
            let script = path.display();
            return Err(problem(&format!(
                "is not an ELF executable but text without a #! line, which a shell runs with /bin/sh: record that, `rtit record -- /bin/sh {script}`"
            )));
        }
        return Err(problem("is not an ELF executable"));
    }
    if header[4] != 2 {
        return Err(problem("is a 32-bit program; only x86-64 programs are supported"));
    }
    if u16::from_le_bytes([header[18], header[19]]) != 62 {
        return Err(problem("is not an x86-64 program"));
    }
    let meta = file
        .metadata()
        .map_err(|e| problem(&format!("cannot read its attributes: {e}")))?;
    Ok(privilege_warning(path, &meta).into_iter().collect())
}

/// A warning for a set-user-ID or set-group-ID program owned by another user or group than
/// rtit's: run directly it would take on their privileges, recorded it may not (QEMU loads
/// it itself and never grants them; the kernel grants them under ptrace only to a tracer
/// that could have them anyway, root), so it may behave differently.
pub fn privilege_warning(path: &Path, meta: &std::fs::Metadata) -> Option<String> {
    use nix::unistd::{getegid, geteuid, Gid, Group, Uid, User};
    use std::os::unix::fs::MetadataExt;
    let uid = (meta.mode() & nix::libc::S_ISUID != 0 && meta.uid() != geteuid().as_raw()).then(|| {
        let name = User::from_uid(Uid::from_raw(meta.uid())).ok().flatten().map(|u| u.name);
        format!("set-user-ID {} (uid {})", name.as_deref().unwrap_or("?"), meta.uid())
    });
    let gid = (meta.mode() & nix::libc::S_ISGID != 0 && meta.gid() != getegid().as_raw()).then(|| {
        let name = Group::from_gid(Gid::from_raw(meta.gid()))
            .ok()
            .flatten()
            .map(|g| g.name);
        format!("set-group-ID {} (gid {})", name.as_deref().unwrap_or("?"), meta.gid())
    });
    let what: Vec<String> = uid.into_iter().chain(gid).collect();
    (!what.is_empty()).then(|| {
        format!(
            "{} is {}: recorded, it may run without those privileges (QEMU never grants them, ptrace only to root), so it may behave differently than when run directly",
            path.display(),
            what.join(" and ")
        )
    })
}

/// Keeps the calling process (the program, before execve) on the CPU it runs on. The kernel
/// writes the CPU number into a thread's rseq area (glibc registers one for every thread)
/// whenever the thread moves to another CPU, a write no system call makes and no log holds:
/// a program that never moves sees one value, the one its memory snapshots hold. (rr binds
/// its tracees to one CPU too.) The program sees one CPU in its affinity mask.
fn pin_here() -> std::io::Result<()> {
    // SAFETY: sched_getcpu reads the CPU number; no allocation, no lock.
    #[allow(unsafe_code)]
    let cpu = unsafe { nix::libc::sched_getcpu() };
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu.max(0) as usize).map_err(std::io::Error::from)?;
    nix::sched::sched_setaffinity(Pid::from_raw(0), &set).map_err(std::io::Error::from)
}

impl super::vdso::Memory for Tracee {
    fn read(&self, at: u64, buf: &mut [u8]) -> usize {
        Tracee::read(self, at, buf)
    }

    fn write(&self, at: u64, bytes: &[u8]) -> Result<(), StepError> {
        Tracee::write(self, at, bytes)
    }
}

impl Tracee {
    /// Starts `program` with `args` under ptrace, stopped at its first instruction after
    /// execve, with the vDSO hidden from it (`vdso`). Standard input, output, error and the
    /// environment pass through.
    pub fn spawn(program: &Path, args: &[OsString], aslr: bool) -> Result<Self, StepError> {
        let mut cmd = Command::new(program);
        cmd.args(args);
        // PTRACE_O_EXITKILL (below) kills it with rtit from its stop at execve on; before
        // that, a dead rtit would leave it running on, untraced.
        crate::tether::die_with_this_thread(&mut cmd);
        // SAFETY: runs in the forked child before execve, where only async-signal-safe calls
        // are allowed: ptrace(PTRACE_TRACEME) and personality() are plain system calls that
        // allocate nothing and take no lock.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(move || {
                ptrace::traceme().map_err(std::io::Error::from)?;
                pin_here()?;
                if !aslr {
                    let persona = personality::get().map_err(std::io::Error::from)?;
                    personality::set(persona | Persona::ADDR_NO_RANDOMIZE).map_err(std::io::Error::from)?;
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| StepError::Program {
            program: program.display().to_string(),
            problem: format!("cannot be started: {e}"),
        })?;
        let pid = Pid::from_raw(child.id() as i32);
        match waitpid(pid, None) {
            Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => {}
            Ok(other) => {
                return Err(StepError::Ptrace(format!(
                    "{program:?} did not stop at execve under ptrace: {other:?}"
                )));
            }
            Err(e) => return Err(StepError::Ptrace(format!("waitpid: {e}"))),
        }
        ptrace::setoptions(pid, OPTIONS)
            .map_err(|e| StepError::Ptrace(format!("PTRACE_SETOPTIONS: {e} (is ptrace permitted here?)")))?;
        let mem = File::options()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|e| StepError::Ptrace(format!("cannot open /proc/{pid}/mem: {e}")))?;
        // The child is reaped by waitpid, not by `child`: forget the handle.
        drop(child);
        let tracee = Self { pid, mem };
        super::vdso::hide(&tracee, tracee.regs()?.rsp)?;
        Ok(tracee)
    }

    /// The same process after execve, stopped at the new program's first instruction: its
    /// memory is the new program's (the old `/proc/PID/mem` still names the old one), and its
    /// vDSO is hidden as at the start.
    pub fn after_exec(&mut self) -> Result<(), StepError> {
        self.mem = File::options()
            .read(true)
            .write(true)
            .open(format!("/proc/{}/mem", self.pid))
            .map_err(|e| StepError::Ptrace(format!("cannot open /proc/{}/mem: {e}", self.pid)))?;
        super::vdso::hide(self, self.regs()?.rsp)?;
        Ok(())
    }

    /// Thread `tid` of the same process (a tracee already), sharing its memory.
    pub fn thread(&self, tid: Pid) -> Result<Self, StepError> {
        let mem = self
            .mem
            .try_clone()
            .map_err(|e| StepError::Ptrace(format!("/proc/{}/mem: {e}", self.pid)))?;
        Ok(Self { pid: tid, mem })
    }

    /// Waits for the running program's next stop or end, as `waitpid` would, looking every
    /// millisecond whether a signal asked rtit to stop (signal-hook restarts a blocked
    /// `waitpid`, so it would not return for one). Then the program is killed, and the answer
    /// is a [`Stopped`](crate::interrupt::Stopped) that says `during`.
    pub fn wait_unless(&self, interrupted: &Interrupt, during: impl Fn() -> String) -> Result<WaitStatus, StepError> {
        loop {
            match waitpid(self.pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => {}
                Ok(status) => return Ok(status),
                Err(e) => return Err(StepError::Ptrace(format!("waitpid: {e}"))),
            }
            if let Err(stopped) = interrupted.check(&during) {
                let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
                let _ = waitpid(self.pid, None);
                return Err(stopped.into());
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// The registers.
    pub fn regs(&self) -> Result<Regs, StepError> {
        ptrace::getregs(self.pid).map_err(|e| StepError::Ptrace(format!("PTRACE_GETREGS: {e}")))
    }

    /// MXCSR and the vector and opmask registers by the names a recording's register maps use,
    /// and XCR0: from the XSAVE register set, or where the kernel has none, MXCSR and
    /// xmm0–15 from the floating-point one (XCR0 then unknown).
    pub fn vectors(&self) -> Result<(BTreeMap<String, String>, Option<u64>), StepError> {
        match crate::xstate::XState::read(self.pid) {
            Ok(x) if x.xcr0().is_some() => Ok((x.registers(), x.xcr0())),
            _ => Ok((self.sse()?, None)),
        }
    }

    /// MXCSR and xmm0–xmm15, from the floating-point register set (FXSAVE's layout), by
    /// the names a recording's register maps use.
    fn sse(&self) -> Result<BTreeMap<String, String>, StepError> {
        let f = ptrace::getregset::<ptrace::regset::NT_PRFPREG>(self.pid)
            .map_err(|e| StepError::Ptrace(format!("PTRACE_GETREGSET NT_PRFPREG: {e}")))?;
        let mut map = BTreeMap::new();
        map.insert("mxcsr".to_string(), format!("{:#x}", f.mxcsr));
        for (i, dwords) in f.xmm_space.chunks_exact(4).enumerate() {
            let value = dwords.iter().rev().fold(0u128, |v, &d| v << 32 | u128::from(d));
            map.insert(format!("xmm{i}"), format!("{value:#x}"));
        }
        Ok(map)
    }

    /// Sets the registers.
    pub fn set_regs(&self, regs: Regs) -> Result<(), StepError> {
        ptrace::setregs(self.pid, regs).map_err(|e| StepError::Ptrace(format!("PTRACE_SETREGS: {e}")))
    }

    /// Reads memory; fewer bytes than asked where the mapping ends.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
        let mut done = 0;
        while done < buf.len() {
            match self.mem.read_at(&mut buf[done..], addr + done as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => done += n,
            }
        }
        done
    }

    /// Writes memory (breakpoints).
    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<(), StepError> {
        self.mem
            .write_all_at(bytes, addr)
            .map_err(|e| StepError::Ptrace(format!("cannot write {addr:#x}: {e}")))
    }

    /// The memory map.
    pub fn maps(&self) -> Result<Vec<Mapping>, StepError> {
        let text = std::fs::read_to_string(format!("/proc/{}/maps", self.pid))
            .map_err(|e| StepError::Ptrace(format!("cannot read /proc/{}/maps: {e}", self.pid)))?;
        Ok(text.lines().filter_map(parse_map_line).collect())
    }

    /// Whether the process has a handler for `signal` (`SigCgt`), ignores it (`SigIgn`).
    pub fn disposition(&self, signal: Signal) -> (bool, bool) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let mask = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .unwrap_or(0)
        };
        let bit = 1u64 << (signal as i32 - 1);
        (mask("SigCgt:") & bit != 0, mask("SigIgn:") & bit != 0)
    }
}

/// Registers by name, as the manifest stores them.
pub fn regs_map(r: &Regs) -> BTreeMap<String, String> {
    let pairs = [
        ("rax", r.rax),
        ("rbx", r.rbx),
        ("rcx", r.rcx),
        ("rdx", r.rdx),
        ("rsi", r.rsi),
        ("rdi", r.rdi),
        ("rbp", r.rbp),
        ("rsp", r.rsp),
        ("r8", r.r8),
        ("r9", r.r9),
        ("r10", r.r10),
        ("r11", r.r11),
        ("r12", r.r12),
        ("r13", r.r13),
        ("r14", r.r14),
        ("r15", r.r15),
        ("rip", r.rip),
        ("eflags", r.eflags),
        ("cs", r.cs),
        ("ss", r.ss),
        ("ds", r.ds),
        ("es", r.es),
        ("fs", r.fs),
        ("gs", r.gs),
        ("fs_base", r.fs_base),
        ("gs_base", r.gs_base),
    ];
    pairs.iter().map(|(k, v)| (k.to_string(), format!("{v:#x}"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executables_are_checked_before_running() {
        let dir = std::env::temp_dir();
        let script = dir.join(format!("rtit-script-{}", std::process::id()));
        std::fs::write(&script, "#!/bin/sh\necho hi\n").expect("write");
        check_executable(&script, &[]).expect("a script run by an x86-64 interpreter");
        std::fs::write(&script, "#!/no/such/shell\necho hi\n").expect("write");
        let err = check_executable(&script, &[]).expect_err("no interpreter");
        assert!(
            err.to_string().contains("cannot be run: /no/such/shell: No such file"),
            "{err}"
        );
        std::fs::write(
            &script,
            [0x7f, b'E', b'L', b'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 3, 0],
        )
        .expect("write");
        let err = check_executable(&script, &[]).expect_err("32-bit");
        assert!(err.to_string().contains("32-bit"), "{err}");
        std::fs::remove_file(&script).ok();
        assert!(check_executable(Path::new("/no/such/program"), &[]).is_err());
        let err = resolve(Path::new("no-such-program-rtit")).expect_err("not on PATH");
        assert!(err.to_string().contains("not found"), "{err}");
        let warnings = check_executable(&std::env::current_exe().expect("self"), &[]).expect("the test binary is fine");
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    /// Set-user-ID of our own user changes nothing; of another user, it is warned about.
    #[test]
    fn set_user_id_programs_of_other_users_are_warned_about() {
        use std::os::unix::fs::PermissionsExt;
        let file = std::env::temp_dir().join(format!("rtit-setuid-{}", std::process::id()));
        std::fs::write(&file, b"").expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
        let meta = |f: &Path| std::fs::metadata(f).expect("stat");
        assert_eq!(privilege_warning(&file, &meta(&file)), None, "our own");
        if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(&file, Some(nix::unistd::Uid::from_raw(65534)), None).expect("chown");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
            let warning = privilege_warning(&file, &meta(&file)).expect("another user's");
            assert!(
                warning.contains("set-user-ID") && warning.contains("(uid 65534)"),
                "{warning}"
            );
            assert!(!warning.contains("set-group-ID"), "{warning}");
        }
        std::fs::remove_file(&file).ok();
    }
}

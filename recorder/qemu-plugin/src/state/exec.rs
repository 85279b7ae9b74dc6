//! The plugin at an execve (issue 43): what the call runs (`rtit_recorder::exec`), and for a
//! program rtit follows, the QEMU that records it next (`rtit_recorder::qemu::relaunch`),
//! which [`crate::relaunch`] starts once this program's recording is written.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rtit_recorder::exec::{absolute, classify, read_call, Target};
use rtit_recorder::qemu::relaunch;

use super::Plugin;

/// QEMU again, on the program an execve runs: its path, arguments and environment.
pub struct Relaunch {
    pub qemu: CString,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    /// The directory it records into, made before it starts (its gdbstub's socket is there).
    pub dir: std::path::PathBuf,
    /// The pipe `rtit record` asks the plugin to stop on (`stop=`), kept open for it.
    pub stop: Option<i32>,
    /// The file execve named (absolute): the program, or the script, it runs.
    pub program: String,
    /// The program's file (a script's interpreter).
    pub file: String,
    /// The program's command line, as the kernel gives it.
    pub command: Vec<String>,
    /// Where its recording starts (`--start`, where it defines the symbol).
    pub start: Option<String>,
}

fn c(s: &OsStr) -> Option<CString> {
    CString::new(s.as_bytes()).ok()
}

impl Plugin {
    /// What execve or execveat (`number`, arguments `a`) runs, and for a program rtit follows,
    /// how QEMU starts again on it.
    pub(super) fn exec_target(&self, number: u64, a: [u64; 6]) -> (Target, Option<Relaunch>) {
        let call = match read_call(number, a, |at, buf| self.read(at, buf)) {
            Ok(call) => call,
            Err(target) => return (target, None),
        };
        let cwd = std::env::current_dir().unwrap_or_default();
        let target = classify(&call.path, &call.argv, &cwd);
        let Target::Follow(run) = &target else {
            return (target, None);
        };
        let Some(plugin) = &self.args.plugin else {
            let why = "runs a program the plugin cannot follow (it was not told its own path)";
            return (Target::Unsupported(why.into()), None);
        };
        let Ok(qemu) = std::fs::read_link("/proc/self/exe") else {
            return (
                Target::Unsupported("runs a program, and QEMU's own path cannot be read".into()),
                None,
            );
        };
        let file = absolute(&run.file, &cwd);
        let next = relaunch::next_args(&self.args, &file, run.argv.len() as u64);
        let preload = OsStr::from_bytes(b"LD_PRELOAD=");
        let theirs = (call.envp.iter())
            .find_map(|e| e.as_bytes().strip_prefix(preload.as_bytes()))
            .map(OsStr::from_bytes);
        let argv0 = run.argv.first().map(OsString::as_os_str);
        let args = run.argv.get(1..).unwrap_or_default();
        let (qemu_args, qemu_preload) = relaunch::arguments(plugin, &next, argv0, &file, args, theirs);
        let mut envp: Vec<OsString> = (call.envp.iter())
            .filter(|e| !e.as_bytes().starts_with(preload.as_bytes()))
            .cloned()
            .collect();
        let mut own = preload.to_os_string();
        own.push(&qemu_preload);
        envp.push(own);
        let all = || -> Option<Relaunch> {
            Some(Relaunch {
                qemu: c(qemu.as_os_str())?,
                argv: std::iter::once(qemu.clone().into_os_string())
                    .chain(qemu_args)
                    .map(|a| c(&a))
                    .collect::<Option<_>>()?,
                envp: envp.iter().map(|e| c(e)).collect::<Option<_>>()?,
                dir: Path::new(&next.out).to_path_buf(),
                stop: next.stop,
                program: absolute(&call.path, &cwd).display().to_string(),
                file: file.display().to_string(),
                command: run.argv.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
                start: next.start.clone(),
            })
        };
        match all() {
            Some(r) => (target, Some(r)),
            None => (Target::Fails, None),
        }
    }
}

/// Starts QEMU again as `r` says, replacing this process (the recording of the program that
/// called execve is written); returns only if that fails, with why.
pub fn start(r: &Relaunch) -> String {
    if let Err(e) = std::fs::create_dir_all(&r.dir) {
        return format!("{}: {e}", r.dir.display());
    }
    // The stop thread closes its pipe on exec (`crate::stop`); the next one needs it.
    if let Some(fd) = r.stop {
        let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()));
    }
    // The signals the program ignored stay ignored in the program execve runs, as the kernel
    // keeps them; QEMU's own handlers go with it (a new QEMU installs its own).
    for (signal, handler) in crate::published::HANDLERS.iter().enumerate().skip(1) {
        if handler.load(std::sync::atomic::Ordering::Relaxed) == 1 {
            // SAFETY: setting a signal's disposition to SIG_IGN, just before execve.
            unsafe { nix::libc::signal(signal as i32, nix::libc::SIG_IGN) };
        }
    }
    match nix::unistd::execve(&r.qemu, &r.argv, &r.envp) {
        Ok(never) => match never {},
        Err(e) => format!("cannot start {} again: {e}", r.qemu.to_string_lossy()),
    }
}

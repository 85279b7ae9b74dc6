//! Following `execve` (issue 43): what a call would run, decided before it is made, the same
//! way for every backend. A call the kernel would refuse returns its error and the recording
//! goes on; one that runs an x86-64 program (directly, or a script through its interpreters)
//! ends this program's recording and starts the next one's; one that runs something rtit
//! cannot record (a 32-bit program) stops the recording before the call, and the program
//! runs on unrecorded.
//!
//! Under ptrace the kernel runs the program itself, and its exec event confirms the choice;
//! under QEMU user mode the host's execve would run the new program natively, so the plugin
//! starts QEMU again on the program this module names (`qemu::relaunch`).

mod call;
mod script;
mod target;

pub use call::{read as read_call, Call};
pub use script::{interpreters, Interpreted};
pub use target::{classify, Target};

/// `path` made absolute from `cwd`, without its `.` parts: how a recording names the program
/// an execve ran (the script's path for a script, as the caller named it).
pub fn absolute(path: &std::path::Path, cwd: &std::path::Path) -> std::path::PathBuf {
    cwd.join(path).components().collect()
}

/// Whether the program `file` defines `symbol` (`main` found from the entry point's code in a
/// stripped program): `--start SYMBOL` applies to every program of a run that has it, and a
/// program without it (a wrapper) is recorded whole.
pub fn defines(file: &std::path::Path, symbol: &str) -> bool {
    std::fs::read(file)
        .is_ok_and(|bytes| rtit_replay_core::image::defined_symbol(&file.display().to_string(), &bytes, symbol).is_ok())
}

/// What the recording of `program`, a script's interpreter that does not define `--start`'s
/// `symbol`, says when it ran another program.
pub fn start_warning(symbol: &str, program: &str) -> String {
    format!("--start {symbol}: {program} does not define it, so it is recorded whole; each program it runs through execve is recorded from {symbol} where that program defines it")
}

/// Whether the recording of `program` run with `args` (from rtit's working directory) starts
/// at its entry although `--start` names `symbol`: `Some(interpreter)` for a script whose
/// interpreter does not define it (recorded whole, and the programs it runs from `symbol`);
/// `None` where the program defines it. `Err` names a program given directly that does not
/// (a misspelt symbol, said before anything runs).
pub fn start_elsewhere(
    program: &std::path::Path,
    args: &[std::ffi::OsString],
    symbol: &str,
) -> Result<Option<std::path::PathBuf>, String> {
    let mut argv = vec![program.as_os_str().to_os_string()];
    argv.extend(args.iter().cloned());
    let cwd = std::env::current_dir().unwrap_or_default();
    let file = interpreters(program, &argv, &cwd).map_or_else(|_| program.to_path_buf(), |r| absolute(&r.file, &cwd));
    if defines(&file, symbol) {
        return Ok(None);
    }
    if file == absolute(program, &cwd) {
        return Err(format!("{} does not define it", program.display()));
    }
    Ok(Some(file))
}

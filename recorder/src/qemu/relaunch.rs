//! The command line that runs a program under QEMU with the plugin: `rtit record`'s first
//! launch, and the plugin's own when the program calls an execve that rtit follows (issue 43).
//! QEMU user mode's execve would run the new program natively, outside QEMU; instead the
//! plugin ends the recording of the program that called it and replaces QEMU, in the same
//! process (its descriptors, working directory and parent unchanged, as execve keeps them),
//! with QEMU on the new program, recording into the directory [`NEXT`] inside its own.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::report::Args;

/// Where the next program's recording goes, inside the directory of the one that ran it.
pub const NEXT: &str = "exec";

/// The socket QEMU's gdbstub listens on for `rtit record` (`-g`), in the recording's scratch
/// directory `dir`.
pub fn socket(dir: &Path) -> PathBuf {
    dir.join("gdbstub.sock")
}

/// QEMU's arguments (after its own path) to run `program` with `program_args` under the
/// plugin at `plugin` with `args`, its gdbstub on [`socket`] in `args.out`, the program's
/// `argv[0]` set to `argv0` where given; and the `LD_PRELOAD` QEMU itself runs with. The
/// plugin is preloaded into QEMU too (to see a fatal signal's end, its `kill`); the program
/// gets `guest_preload`, its own `LD_PRELOAD`, or none.
pub fn arguments(
    plugin: &Path,
    args: &Args,
    argv0: Option<&OsStr>,
    program: &Path,
    program_args: &[OsString],
    guest_preload: Option<&OsStr>,
) -> (Vec<OsString>, OsString) {
    let mut out: Vec<OsString> = Vec::new();
    let mut preload = plugin.as_os_str().to_os_string();
    match guest_preload {
        Some(theirs) => {
            let mut guest = OsString::from("LD_PRELOAD=");
            guest.push(theirs);
            out.extend(["-E".into(), guest]);
            preload.push(":");
            preload.push(theirs);
        }
        None => out.extend(["-U".into(), "LD_PRELOAD".into()]),
    }
    let mut option = plugin.as_os_str().to_os_string();
    option.push(",");
    option.push(args.to_option());
    out.extend(["-plugin".into(), option]);
    out.extend(["-g".into(), socket(Path::new(&args.out)).into_os_string()]);
    if let Some(argv0) = argv0 {
        out.extend(["-0".into(), argv0.to_os_string()]);
    }
    out.push(program.as_os_str().to_os_string());
    out.extend(program_args.iter().cloned());
    (out, preload)
}

/// The plugin arguments for the program an execve runs, `program` with `argc` arguments,
/// after the one with `args`: the same configuration, recording into [`NEXT`] inside
/// `args.out`, from the same start symbol where `program` defines it, else from its first
/// instruction (an address names a place in the first program only).
pub fn next_args(args: &Args, program: &Path, argc: u64) -> Args {
    let start = (args.start.clone()).filter(|s| !s.starts_with("0x") && crate::exec::defines(program, s));
    Args {
        out: Path::new(&args.out).join(NEXT).display().to_string(),
        start,
        exe: Some(program.to_path_buf()),
        argc,
        ..args.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guest_keeps_its_own_preload_and_argv0_and_the_next_records_inside() {
        let args = Args {
            out: "/tmp/s".into(),
            plugin: Some("/p/lib.so".into()),
            start: Some("main".into()),
            ..Args::default()
        };
        let (argv, preload) = arguments(
            Path::new("/p/lib.so"),
            &args,
            Some(OsStr::new("python3")),
            Path::new("/usr/bin/python3.11"),
            &["-c".into(), "1".into()],
            Some(OsStr::new("/x.so")),
        );
        assert_eq!(preload, "/p/lib.so:/x.so");
        let text: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(&text[..2], ["-E", "LD_PRELOAD=/x.so"]);
        assert_eq!(text[2], "-plugin");
        assert!(text[3].starts_with("/p/lib.so,out=/tmp/s,"), "{}", text[3]);
        assert_eq!(
            &text[4..],
            [
                "-g",
                "/tmp/s/gdbstub.sock",
                "-0",
                "python3",
                "/usr/bin/python3.11",
                "-c",
                "1"
            ]
        );
        let next = next_args(&args, Path::new("/no/such/program"), 1);
        assert_eq!(
            (next.out.as_str(), next.start.as_deref()),
            ("/tmp/s/exec", None),
            "no main there"
        );
        let with_main = next_args(&args, Path::new("/bin/true"), 1);
        assert_eq!(
            with_main.start.as_deref(),
            Some("main"),
            "main from the entry point's code"
        );
        assert_eq!(next.plugin, args.plugin);
        let (argv, preload) = arguments(Path::new("/p/lib.so"), &next, None, Path::new("/bin/true"), &[], None);
        assert_eq!(preload, "/p/lib.so");
        assert_eq!(argv[..2], [OsString::from("-U"), "LD_PRELOAD".into()]);
        assert!(argv.iter().all(|a| a != "-0"));
    }
}

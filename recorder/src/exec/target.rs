//! What an `execve` would run, and whether rtit follows it there.

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;

use nix::unistd::{access, AccessFlags};

use super::script::{interpreters, Interpreted};

/// What an `execve` does, as far as the recording goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The kernel refuses it (no such file, not executable, not a format it runs): the call
    /// returns an error and the program goes on, recorded.
    Fails,
    /// It runs an x86-64 program: the recording goes on there.
    Follow(Interpreted),
    /// It runs something rtit cannot record: why, in words that follow "the program".
    Unsupported(String),
}

/// What `execve(path, argv)` made in directory `cwd` runs. Decided from the files as the
/// kernel reads them; a call that fails for another reason (out of memory, a limit) is taken
/// as followed, and then its error is what the recording shows.
pub fn classify(path: &Path, argv: &[OsString], cwd: &Path) -> Target {
    let runnable = |p: &Path| {
        let p = cwd.join(p);
        p.is_file() && access(&p, AccessFlags::X_OK).is_ok()
    };
    if !runnable(path) {
        return Target::Fails;
    }
    let Ok(run) = interpreters(path, argv, cwd) else {
        return Target::Fails;
    };
    if !runnable(&run.file) {
        return Target::Fails;
    }
    let mut header = [0u8; 20];
    let read = std::fs::File::open(cwd.join(&run.file)).and_then(|f| f.take(20).read_exact(&mut header));
    if read.is_err() || &header[..4] != b"\x7fELF" {
        return Target::Fails;
    }
    let machine = u16::from_le_bytes([header[18], header[19]]);
    match (header[4], machine) {
        (2, 62) => Target::Follow(run),
        (1, 3) => Target::Unsupported(format!(
            "runs {}, a 32-bit program, which rtit does not record",
            run.file.display()
        )),
        _ => Target::Unsupported(format!(
            "runs {}, a program for another machine (ELF machine {machine}), which rtit does not record",
            run.file.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_missing_or_plain_file_fails_and_a_script_is_followed_to_its_interpreter() {
        let dir = std::env::temp_dir().join(format!("rtit-exec-target-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let argv = |a: &str| vec![OsString::from(a)];
        assert_eq!(classify(Path::new("nothing-here"), &argv("x"), &dir), Target::Fails);
        let text = dir.join("text");
        std::fs::write(&text, "echo hi\n").expect("write");
        std::fs::set_permissions(&text, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(classify(&text, &argv("text"), &dir), Target::Fails, "ENOEXEC");
        let script = dir.join("script");
        std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("write");
        assert_eq!(
            classify(&script, &argv("script"), &dir),
            Target::Fails,
            "not executable"
        );
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        match classify(Path::new("script"), &argv("script"), &dir) {
            Target::Follow(run) => {
                assert_eq!(run.file, Path::new("/bin/sh"));
                assert_eq!(run.argv, vec![OsString::from("/bin/sh"), "script".into()]);
            }
            other => panic!("{other:?}"),
        }
        let lost = dir.join("lost");
        std::fs::write(&lost, "#!/no/such/interpreter\n").expect("write");
        std::fs::set_permissions(&lost, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(classify(&lost, &argv("lost"), &dir), Target::Fails, "ENOENT");
        // A 32-bit ELF header: the kernel would run it, rtit cannot record it.
        let elf32 = dir.join("elf32");
        let mut header = b"\x7fELF\x01\x01\x01".to_vec();
        header.resize(18, 0);
        header.extend([3, 0]);
        std::fs::write(&elf32, &header).expect("write");
        std::fs::set_permissions(&elf32, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(matches!(classify(&elf32, &argv("e"), &dir), Target::Unsupported(w) if w.contains("32-bit")));
    }
}

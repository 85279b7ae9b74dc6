//! A script's `#!` line, read as the kernel reads it (fs/binfmt_script.c's rules): the
//! interpreter's path, then at most one argument (the rest of the line, trimmed), then the
//! script's path as the caller named it, then the caller's arguments after its `argv[0]`.
//! The interpreter may itself be a script, a few levels deep.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The longest `#!` line the kernel reads (BINPRM_BUF_SIZE since Linux 5.1).
const LINE: usize = 256;

/// How many interpreters deep the kernel follows (its binfmt recursion limit).
const DEPTH: usize = 4;

/// A program as the kernel runs it once every `#!` is followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpreted {
    /// The file the kernel loads (not a script).
    pub file: PathBuf,
    /// The arguments it gets, `argv[0]` first.
    pub argv: Vec<OsString>,
}

/// What the kernel runs for `execve(path, argv)` made in directory `cwd`: `path` itself if it
/// is not a script, else its interpreter with the script's path and arguments, followed to a
/// file that is not a script. Paths stay as given (relative ones are read from `cwd`). `Err`
/// says why the kernel would refuse (a `#!` line without an interpreter, too many levels, an
/// unreadable file).
pub fn interpreters(path: &Path, argv: &[OsString], cwd: &Path) -> Result<Interpreted, String> {
    let mut now = Interpreted {
        file: path.to_path_buf(),
        argv: argv.to_vec(),
    };
    for _ in 0..=DEPTH {
        let Some((interpreter, argument)) = shebang(&cwd.join(&now.file))? else {
            return Ok(now);
        };
        let mut argv = vec![interpreter.clone().into_os_string()];
        argv.extend(argument);
        argv.push(now.file.clone().into_os_string());
        argv.extend(now.argv.iter().skip(1).cloned());
        now = Interpreted {
            file: interpreter,
            argv,
        };
    }
    Err(format!("{}: more than {DEPTH} interpreters deep", path.display()))
}

/// The interpreter and its one argument, if the file at `path` starts with `#!`.
fn shebang(path: &Path) -> Result<Option<(PathBuf, Option<OsString>)>, String> {
    let mut head = Vec::with_capacity(LINE);
    std::fs::File::open(path)
        .and_then(|f| f.take(LINE as u64).read_to_end(&mut head))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let Some(rest) = head.strip_prefix(b"#!") else {
        return Ok(None);
    };
    let line = rest.split(|&b| b == b'\n').next().unwrap_or_default();
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let line: &[u8] = {
        let start = line.iter().position(|b| !blank(b)).unwrap_or(line.len());
        let end = line.iter().rposition(|b| !blank(b)).map_or(start, |e| e + 1);
        &line[start..end.max(start)]
    };
    let split = line.iter().position(blank).unwrap_or(line.len());
    let (interpreter, argument) = line.split_at(split);
    if interpreter.is_empty() {
        return Err(format!("{}: its #! line names no interpreter", path.display()));
    }
    let start = argument.iter().position(|b| !blank(b)).unwrap_or(argument.len());
    let argument = &argument[start..];
    Ok(Some((
        PathBuf::from(OsStr::from_bytes(interpreter)),
        (!argument.is_empty()).then(|| OsStr::from_bytes(argument).to_os_string()),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    /// A directory of this test's own, emptied.
    fn tempdir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rtit-exec-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        dir
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_script_runs_as_its_interpreter_with_one_argument_and_the_scripts_path() {
        let dir = tempdir("chain");
        let inner = script(&dir, "inner", "#!/bin/sh -e -x  \necho\n");
        let outer = script(&dir, "outer", &format!("#! {}\n", inner.display()));
        let got = interpreters(&outer, &os(&["called-as", "a b", "c"]), Path::new("/")).expect("runs");
        assert_eq!(got.file, PathBuf::from("/bin/sh"));
        assert_eq!(
            got.argv,
            vec![
                OsString::from("/bin/sh"),
                "-e -x".into(),
                inner.into_os_string(),
                outer.into_os_string(),
                "a b".into(),
                "c".into()
            ]
        );
    }

    #[test]
    fn an_elf_is_itself_and_a_loop_or_an_empty_line_is_refused() {
        let got = interpreters(Path::new("bin/sh"), &os(&["sh", "-c"]), Path::new("/")).expect("runs");
        assert_eq!((got.file, got.argv), (PathBuf::from("bin/sh"), os(&["sh", "-c"])));
        let dir = tempdir("loop");
        let me = dir.join("me");
        script(&dir, "me", &format!("#!{}\n", me.display()));
        assert!(interpreters(&me, &os(&["me"]), &dir)
            .unwrap_err()
            .contains("interpreters deep"));
        script(&dir, "empty", "#!   \n");
        assert!(interpreters(Path::new("empty"), &os(&["x"]), &dir)
            .unwrap_err()
            .contains("names no interpreter"));
    }
}

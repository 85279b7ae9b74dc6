//! A script given to `rtit record`, and what to record instead. rtit records one program and
//! stops where it calls `execve`, so a script (which the kernel runs by starting its
//! interpreter) cannot be recorded yet. "Record its interpreter" was the advice, which is
//! wrong for the common case: a wrapper such as a pyenv shim is a bash script whose program
//! is what it `exec`s at its end. So the advice names what the script runs when that can be
//! read cheaply from the script (its last line's `exec`; a pyenv shim's program from `pyenv
//! which`), and the interpreter from its `#!` line, `/usr/bin/env NAME` found on PATH, each
//! as a command line to copy.

use std::ffi::OsString;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use words::{last_exec, quote, Word};

/// Scripts larger than this are not read for their last `exec`: wrappers are small.
const READ_AT_MOST: u64 = 1 << 20;

/// How many scripts deep an interpreter is followed to its program (`#!/usr/bin/env python3`
/// finding a pyenv shim, which runs the real python3); the kernel allows a few levels too.
const DEPTH: usize = 4;

/// What to tell a user who asked to record the script at `script` with `args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptAdvice {
    script: PathBuf,
    /// The `#!` line, without `#!`.
    shebang: String,
    /// The interpreter's name as the script gives it (`bash`, `python3`).
    name: String,
    /// The command line (shell words) that runs the script in its interpreter, if found.
    interpreter: Option<String>,
    /// What the script ends in, if it ends in an `exec`.
    runs: Option<Runs>,
}

/// What a script runs at its end.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Runs {
    /// The `exec` line as the user reads it.
    said: String,
    /// The command line of the program it runs, where that is known.
    command: Option<String>,
    /// How the program was found, where the line does not show it.
    found_by: Option<String>,
}

impl ScriptAdvice {
    /// Reads the script at `script`, which the user asked to run with `args`.
    pub fn new(script: &Path, args: &[OsString]) -> Self {
        let text = read_small(script).unwrap_or_default();
        let first = text.lines().next().unwrap_or_default();
        let shebang = first.strip_prefix("#!").unwrap_or_default().trim().to_string();
        let (name, interpreter) = interpreter(&shebang);
        let args: Vec<String> = args.iter().map(|a| quote(&a.to_string_lossy())).collect();
        let interpreter = interpreter.map(|mut words| {
            words[0] = quote(&program_behind(Path::new(&words[0]), DEPTH).unwrap_or_else(|| words[0].clone()));
            words.push(quote(&script.to_string_lossy()));
            words.extend(args.iter().cloned());
            words.join(" ")
        });
        let runs = last_exec(&text).map(|words| runs(script, &words, &args));
        Self {
            script: script.to_path_buf(),
            shebang,
            name,
            interpreter,
            runs,
        }
    }
}

impl fmt::Display for ScriptAdvice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is a script (#!{})", self.script.display(), self.shebang)?;
        if let Some(runs) = &self.runs {
            write!(f, " that ends in `{}`", runs.said)?;
        }
        f.write_str(", and rtit cannot follow execve yet: record ")?;
        let name = &self.name;
        match (&self.runs, &self.interpreter) {
            (Some(runs), _) => {
                f.write_str("the program it runs")?;
                if let Some(how) = &runs.found_by {
                    write!(f, " (`{how}`)")?;
                }
                if let Some(program) = &runs.command {
                    write!(f, ", `rtit record -- {program}`")?;
                }
            }
            (None, Some(interpreter)) => return write!(f, "{name} running it, `rtit record -- {interpreter}`"),
            (None, None) if name.is_empty() => {
                return f.write_str("its interpreter running it; the #! line names none")
            }
            (None, None) => return write!(f, "its interpreter running it; {name} is not found"),
        }
        // With the program known, the interpreter running the script is no way to record it:
        // the script's `exec` would stop that recording before the program starts.
        match (&self.interpreter, self.runs.as_ref().and_then(|r| r.command.as_ref())) {
            (Some(interpreter), None) => write!(f, ", or {name} running the script, `rtit record -- {interpreter}`"),
            _ => Ok(()),
        }
    }
}

/// The file's text, if it is small enough to be a wrapper.
fn read_small(path: &Path) -> Option<String> {
    let size = std::fs::metadata(path).ok()?.len();
    let bytes = (size <= READ_AT_MOST).then(|| std::fs::read(path).ok()).flatten()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The interpreter's name and the words that start it, from a `#!` line: the kernel runs
/// the path with the rest of the line as one argument; `env` finds its first operand on PATH
/// (after options and assignments; `-S` splits the rest into words, as here).
fn interpreter(shebang: &str) -> (String, Option<Vec<String>>) {
    let (path, arg) = match shebang.split_once(char::is_whitespace) {
        Some((path, arg)) => (path, Some(arg.trim())),
        None => (shebang, None),
    };
    let file_name = |p: &str| {
        Path::new(p)
            .file_name()
            .map_or(p.to_string(), |n| n.to_string_lossy().into_owned())
    };
    if file_name(path) == "env" {
        let mut words = arg
            .unwrap_or_default()
            .split_whitespace()
            .skip_while(|w| w.starts_with('-') || w.contains('='));
        let Some(name) = words.next() else {
            return (file_name(path), None);
        };
        let found = find_on_path(name).map(|p| {
            let mut all = vec![p.to_string_lossy().into_owned()];
            all.extend(words.map(quote));
            all
        });
        return (name.to_string(), found);
    }
    let found = Path::new(path).is_file().then(|| {
        let mut all = vec![path.to_string()];
        all.extend(arg.filter(|a| !a.is_empty()).map(quote));
        all
    });
    (file_name(path), found)
}

/// `name` as execve's callers find it: along PATH unless it has a slash.
fn find_on_path(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Path::new(name).is_file().then(|| PathBuf::from(name));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// The ELF program `path` comes down to: itself if it is one, else, for a script that only
/// passes its arguments on to another program (a pyenv shim), that program's, `depth`
/// scripts deep at most. `None` where that cannot be told.
fn program_behind(path: &Path, depth: usize) -> Option<String> {
    let mut magic = [0u8; 4];
    std::fs::File::open(path).ok()?.read_exact(&mut magic).ok()?;
    if &magic == b"\x7fELF" {
        return Some(path.to_string_lossy().into_owned());
    }
    if depth == 0 || !magic.starts_with(b"#!") {
        return None;
    }
    let words = last_exec(&read_small(path)?)?;
    if let Some(name) = pyenv_shim(path, &words) {
        return pyenv_which(&words, &name);
    }
    match words.as_slice() {
        [Word::Literal(program), Word::Args] => program_behind(&find_on_path(program)?, depth - 1),
        _ => None,
    }
}

/// What a script's last `exec` means for the user: how it reads, and the command line to
/// record the program it runs, with the user's `args` where the script passes its own on.
fn runs(script: &Path, words: &[Word], args: &[String]) -> Runs {
    if let Some(name) = pyenv_shim(script, words) {
        let which = format!("pyenv which {name}");
        let (program, found_by) = match pyenv_which(words, &name) {
            Some(p) => (quote(&p), Some(which)),
            None => (format!("\"$({which})\""), None),
        };
        let command = std::iter::once(program).chain(args.iter().cloned()).collect::<Vec<_>>();
        return Runs {
            said: format!("pyenv exec {name}"),
            command: Some(command.join(" ")),
            found_by,
        };
    }
    let said: Vec<String> = words.iter().map(Word::as_written).collect();
    let mut said = format!("exec {}", said.join(" "));
    if said.chars().count() > 60 {
        said = said.chars().take(60).collect::<String>() + " …";
    }
    let mut command = Vec::new();
    for (i, word) in words.iter().enumerate() {
        match word {
            Word::Literal(w) if i == 0 => command.push(quote(
                &find_on_path(w).map_or(w.clone(), |p| p.to_string_lossy().into_owned()),
            )),
            Word::Literal(w) => command.push(quote(w)),
            Word::Args if i > 0 => command.extend(args.iter().cloned()),
            _ => {
                return Runs {
                    said,
                    command: None,
                    found_by: None,
                }
            }
        }
    }
    Runs {
        said,
        command: Some(command.join(" ")),
        found_by: None,
    }
}

/// The program name a pyenv shim runs (`exec …/pyenv exec "$program" "$@"`, `$program`
/// being the shim's own file name), if `words` are such a line.
fn pyenv_shim(script: &Path, words: &[Word]) -> Option<String> {
    let [pyenv, Word::Literal(exec), _, Word::Args] = words else {
        return None;
    };
    (pyenv.as_written().trim_end_matches([')', '"']).ends_with("pyenv") && exec == "exec")
        .then(|| script.file_name().map(|n| n.to_string_lossy().into_owned()))
        .flatten()
}

/// What `pyenv which NAME` says, with PATH's pyenv (or the one the shim names): the program
/// the shim would run from here.
fn pyenv_which(words: &[Word], name: &str) -> Option<String> {
    let named = match words.first() {
        Some(Word::Literal(p)) if Path::new(p).is_file() => Some(PathBuf::from(p)),
        _ => None,
    };
    let pyenv = find_on_path("pyenv").or(named)?;
    let out = Command::new(pyenv)
        .args(["which", name])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let program = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && Path::new(&program).is_file()).then_some(program)
}

mod words;

#[cfg(test)]
mod tests;

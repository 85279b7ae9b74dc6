//! An `execve` or `execveat` call's arguments, read from the program's memory.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use super::target::Target;
use crate::sideband::nr;

/// `AT_FDCWD`: execveat's directory descriptor for the working directory.
const AT_FDCWD: i64 = -100;
/// execveat's flag to run the descriptor itself (fexecve).
const AT_EMPTY_PATH: u64 = 0x1000;
/// The longest string the kernel takes as an argument (MAX_ARG_STRLEN, 32 pages).
const LONGEST: usize = 32 << 12;
/// More arguments than this are not read (the kernel's limit is the stack's size).
const MOST: usize = 1 << 16;

/// What an `execve` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The file, as given (relative to the working directory if relative).
    pub path: PathBuf,
    /// The arguments, `argv[0]` first.
    pub argv: Vec<OsString>,
    /// The environment.
    pub envp: Vec<OsString>,
}

/// The call `number` (execve or execveat) with arguments `args`, read with `read` (which
/// copies memory at an address into a buffer and says how many bytes it could). `Err` is
/// what the call does instead of running a file rtit can name: fail (memory it cannot read
/// makes the kernel return EFAULT), or run a descriptor (fexecve), which is not followed.
pub fn read(number: u64, args: [u64; 6], read: impl Fn(u64, &mut [u8]) -> usize) -> Result<Call, Target> {
    let (path, argv, envp) = match number {
        nr::EXECVE => (args[0], args[1], args[2]),
        _ => {
            let relative_to_fd = args[0] as i64 != AT_FDCWD;
            let path = string(&read, args[1]).ok_or(Target::Fails)?;
            if args[4] & AT_EMPTY_PATH != 0 || (relative_to_fd && !path.starts_with(b"/")) {
                return Err(Target::Unsupported(
                    "runs a program it names by a file descriptor (execveat), which rtit does not follow".into(),
                ));
            }
            (args[1], args[2], args[3])
        }
    };
    Ok(Call {
        path: PathBuf::from(OsString::from_vec(string(&read, path).ok_or(Target::Fails)?)),
        argv: strings(&read, argv).ok_or(Target::Fails)?,
        envp: strings(&read, envp).ok_or(Target::Fails)?,
    })
}

/// The NUL-terminated string at `at`.
fn string(read: &impl Fn(u64, &mut [u8]) -> usize, at: u64) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 256];
    while out.len() < LONGEST {
        // Up to the end of the page, so a string that ends before unmapped memory is read.
        let here = at + out.len() as u64;
        let room = (4096 - (here & 4095)) as usize;
        let n = read(here, &mut chunk[..room.min(256)]);
        if n == 0 {
            return None;
        }
        match chunk[..n].iter().position(|&b| b == 0) {
            Some(end) => {
                out.extend_from_slice(&chunk[..end]);
                return Some(out);
            }
            None => out.extend_from_slice(&chunk[..n]),
        }
    }
    None
}

/// The NULL-terminated array of strings at `at` (a null `at` is an empty array, as Linux
/// takes it).
fn strings(read: &impl Fn(u64, &mut [u8]) -> usize, at: u64) -> Option<Vec<OsString>> {
    let mut out = Vec::new();
    if at == 0 {
        return Some(out);
    }
    for i in 0..MOST as u64 {
        let mut word = [0u8; 8];
        if read(at + 8 * i, &mut word) != 8 {
            return None;
        }
        match u64::from_le_bytes(word) {
            0 => return Some(out),
            p => out.push(OsString::from_vec(string(read, p)?)),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory of `bytes` at 0x1000.
    fn memory(bytes: &[u8]) -> impl Fn(u64, &mut [u8]) -> usize + '_ {
        move |at, buf| {
            let Some(from) = at.checked_sub(0x1000).map(|o| o as usize).filter(|&o| o < bytes.len()) else {
                return 0;
            };
            let n = buf.len().min(bytes.len() - from);
            buf[..n].copy_from_slice(&bytes[from..from + n]);
            n
        }
    }

    #[test]
    fn execve_and_execveat_are_read_and_a_descriptor_or_bad_pointer_is_not_followed() {
        // 0x1000 "/bin/x\0", 0x1007 "-v\0", 0x1010 argv [0x1000, 0x1007, 0], 0x1028 envp [0].
        let mut m = b"/bin/x\0-v\0".to_vec();
        m.resize(0x10, 0);
        for w in [0x1000u64, 0x1007, 0, 0] {
            m.extend(w.to_le_bytes());
        }
        let call = read(nr::EXECVE, [0x1000, 0x1010, 0x1028, 0, 0, 0], memory(&m)).expect("read");
        assert_eq!(call.path, PathBuf::from("/bin/x"));
        assert_eq!(call.argv, vec![OsString::from("/bin/x"), "-v".into()]);
        assert!(call.envp.is_empty());
        let at = read(nr::EXECVEAT, [AT_FDCWD as u64, 0x1000, 0x1010, 0, 0, 0], memory(&m)).expect("read");
        assert_eq!(at.argv.len(), 2);
        assert_eq!(
            read(nr::EXECVE, [0x9000, 0x1010, 0, 0, 0, 0], memory(&m)),
            Err(Target::Fails)
        );
        assert!(matches!(
            read(nr::EXECVEAT, [3, 0x1007, 0x1010, 0, AT_EMPTY_PATH, 0], memory(&m)),
            Err(Target::Unsupported(_))
        ));
    }
}

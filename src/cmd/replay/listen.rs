//! Listening for gdb. A port in use is the usual way this fails: a replay left running in
//! another terminal holds 1234, the default. The OS says only "Address already in use", so
//! the error names the address, who holds it where /proc tells (another `rtit replay`, with
//! its recording and pid), and the way on: `--port 0`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Listens on `host:port`; a port in use is an error that says what to do.
pub fn bind(host: &str, port: u16) -> Result<TcpListener> {
    match TcpListener::bind((host, port)) {
        Ok(listener) => Ok(listener),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(anyhow::anyhow!(busy(host, port, holder(port)))),
        Err(e) => Err(e).with_context(|| format!("cannot listen on {host}:{port}")),
    }
}

/// The error for `host:port` in use, held by `holder` if /proc told.
fn busy(host: &str, port: u16, holder: Option<Holder>) -> String {
    let by = match holder {
        Some(h) => format!(", by {h}"),
        None => " (another `rtit replay` may hold it, or any other program)".to_string(),
    };
    format!("cannot listen on {host}:{port}: the port is in use{by}; `--port 0` picks a free one")
}

/// Who holds a socket bound to local TCP `port`, as /proc tells: the kernel's socket tables
/// give the socket's inode, a process's descriptors the socket. `None` where /proc does not
/// say (another user's process, another network namespace): the message then only guesses.
fn holder(port: u16) -> Option<Holder> {
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| sockets_on(&table, port))
        .collect();
    if inodes.is_empty() {
        return None;
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let mut links = fds.flatten().filter_map(|fd| std::fs::read_link(fd.path()).ok());
        if links.any(|l| wanted.iter().any(|w| l.as_os_str() == w.as_str())) {
            return Some(Holder::of(pid, &entry.path()));
        }
    }
    None
}

/// The inodes of the sockets bound to local `port` in a /proc/net/tcp table (lines of `sl
/// local_address rem_address st … uid timeout inode`, the address `HEXIP:HEXPORT`).
fn sockets_on(table: &str, port: u16) -> Vec<String> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local = fields.get(1)?;
            let bound = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            let inode = fields.get(9)?;
            (bound == port && *inode != "0").then(|| inode.to_string())
        })
        .collect()
}

/// A process holding the port.
struct Holder {
    pid: u32,
    /// Its command line, for a process that is not a replay.
    command: String,
    /// The recording it replays, when it is an `rtit replay`.
    replays: Option<PathBuf>,
}

impl Holder {
    /// What /proc/PID (`proc`) says of process `pid`. A replay's recording is the argument
    /// that names one (a directory with a manifest) from the directory it was started in;
    /// none names it when it replays the latest, and its command line is shown instead.
    fn of(pid: u32, proc: &Path) -> Self {
        let words: Vec<String> = std::fs::read(proc.join("cmdline"))
            .unwrap_or_default()
            .split(|&b| b == 0)
            .filter(|w| !w.is_empty())
            .map(|w| String::from_utf8_lossy(w).replace(char::is_control, " "))
            .collect();
        let rtit = std::fs::read_to_string(proc.join("comm")).is_ok_and(|c| c.trim() == "rtit");
        let replays = match (rtit, std::fs::read_link(proc.join("cwd"))) {
            (true, Ok(cwd)) if words.get(1).is_some_and(|w| w == "replay") => words[2..]
                .iter()
                .rev()
                .map(|w| cwd.join(w))
                .find(|dir| dir.join("manifest.json").is_file()),
            _ => None,
        };
        Self {
            pid,
            command: words.join(" "),
            replays,
        }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.replays {
            Some(rec) => write!(f, "`rtit replay` of {} (pid {})", rec.display(), self.pid),
            None if self.command.is_empty() => write!(f, "pid {}", self.pid),
            None => {
                let short: String = self.command.chars().take(80).collect();
                let more = if short.len() < self.command.len() { " …" } else { "" };
                write!(f, "pid {} (`{short}{more}`)", self.pid)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_table_gives_the_inodes_bound_to_a_port() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:04D2 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 233002 1 0 100 0 0 10 0
   1: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 635 1 0 100 0 0 10 0
   2: 0100007F:04D2 0100007F:9C40 06 00000000:00000000 03:00000F9E 00000000     0        0 0 3 0
";
        assert_eq!(sockets_on(table, 1234), ["233002"]);
        assert_eq!(sockets_on(table, 2024), ["635"]);
        assert!(sockets_on(table, 80).is_empty());
    }

    #[test]
    fn a_holder_unknown_is_guessed_at_and_a_long_command_cut() {
        assert_eq!(
            busy("127.0.0.1", 1234, None),
            "cannot listen on 127.0.0.1:1234: the port is in use (another `rtit replay` may hold it, or any other program); `--port 0` picks a free one"
        );
        let long = Holder {
            pid: 7,
            command: "x".repeat(100),
            replays: None,
        };
        assert_eq!(long.to_string(), format!("pid 7 (`{} …`)", "x".repeat(80)));
    }
}

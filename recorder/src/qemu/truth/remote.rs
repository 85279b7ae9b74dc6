//! As much of a GDB remote-protocol client as sampling needs: packets with checksums and
//! acknowledgements, stop replies, and the `g` reply of QEMU's x86-64 target.
//!
//! QEMU's gdbstub is the only thing in QEMU user mode 7.2 that can read the guest's
//! registers (the plugin API of 7.2 cannot); this client talks to it over the Unix socket
//! `qemu-x86_64 -g PATH` listens on.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::TruthError;
use crate::outcome::RegisterMap;

/// What waiting for a packet gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// A packet's data (run-length encoding undone).
    Packet(String),
    /// Nothing began to arrive in time.
    TimedOut,
    /// QEMU closed the connection (it ended, or the program called execve).
    Closed,
}

/// A stop reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The program stopped with this GDB signal number (`S`/`T`).
    Signal(u8),
    /// The program exited or was killed (`W`/`X`).
    Ended,
}

/// A connection to a gdbstub.
pub struct Remote {
    stream: UnixStream,
    pending: Vec<u8>,
}

impl Remote {
    /// Wraps a connected socket.
    pub fn new(stream: UnixStream) -> Self {
        Self {
            stream,
            pending: Vec::new(),
        }
    }

    /// Sends one packet.
    pub fn send(&mut self, data: &str) -> Result<(), TruthError> {
        let sum = data.bytes().fold(0u8, u8::wrapping_add);
        let frame = format!("${data}#{sum:02x}");
        self.stream.write_all(frame.as_bytes()).map_err(TruthError::Io)
    }

    /// Sends `data` and waits for the reply.
    pub fn request(&mut self, data: &str) -> Result<String, TruthError> {
        self.send(data)?;
        match self.receive(None)? {
            Received::Packet(p) => Ok(p),
            _ => Err(TruthError::Protocol(format!(
                "QEMU closed the connection after {data:?}"
            ))),
        }
    }

    /// The next packet, acknowledged; `timeout` bounds the wait for its first byte.
    pub fn receive(&mut self, timeout: Option<Duration>) -> Result<Received, TruthError> {
        // Acknowledgements and anything before a packet's `$` are skipped.
        loop {
            match self.byte(timeout)? {
                None => return Ok(Received::Closed),
                Some(Err(())) => return Ok(Received::TimedOut),
                Some(Ok(b'$')) => break,
                Some(Ok(_)) => {}
            }
        }
        let mut data = Vec::new();
        loop {
            match self.byte(None)? {
                Some(Ok(b'#')) => break,
                Some(Ok(b)) => data.push(b),
                _ => return Ok(Received::Closed),
            }
        }
        let mut sum = [0u8; 2];
        for s in &mut sum {
            match self.byte(None)? {
                Some(Ok(b)) => *s = b,
                _ => return Ok(Received::Closed),
            }
        }
        let expected = std::str::from_utf8(&sum)
            .ok()
            .and_then(|s| u8::from_str_radix(s, 16).ok());
        if expected != Some(data.iter().fold(0u8, |a, &b| a.wrapping_add(b))) {
            return Err(TruthError::Protocol(format!(
                "a packet with a bad checksum: {:?}",
                String::from_utf8_lossy(&data)
            )));
        }
        self.stream.write_all(b"+").map_err(TruthError::Io)?;
        Ok(Received::Packet(expand(&data)))
    }

    /// One byte: `None` at the end of the stream, `Some(Err(()))` when `timeout` passed.
    fn byte(&mut self, timeout: Option<Duration>) -> Result<Option<Result<u8, ()>>, TruthError> {
        if self.pending.is_empty() {
            self.stream.set_read_timeout(timeout).map_err(TruthError::Io)?;
            let mut buf = [0u8; 4096];
            let n = loop {
                match self.stream.read(&mut buf) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        return Ok(Some(Err(())))
                    }
                    Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(None),
                    Err(e) => return Err(TruthError::Io(e)),
                }
            };
            if n == 0 {
                return Ok(None);
            }
            self.pending.extend(buf[..n].iter().rev());
        }
        Ok(self.pending.pop().map(Ok))
    }
}

/// Undoes the protocol's run-length encoding (`X*n`: `n - 29` more copies of `X`).
fn expand(data: &[u8]) -> String {
    let mut out: Vec<u8> = Vec::with_capacity(data.len());
    let mut i = 0;
    while i < data.len() {
        if data[i] == b'*' && i + 1 < data.len() {
            if let Some(&last) = out.last() {
                out.extend(std::iter::repeat(last).take(usize::from(data[i + 1].saturating_sub(29))));
            }
            i += 2;
        } else {
            out.push(data[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses a stop reply.
pub fn stop(reply: &str) -> Result<Stop, TruthError> {
    let bad = || TruthError::Protocol(format!("not a stop reply: {reply:?}"));
    match reply.as_bytes().first() {
        Some(b'S' | b'T') => reply
            .get(1..3)
            .and_then(|s| u8::from_str_radix(s, 16).ok())
            .map(Stop::Signal)
            .ok_or_else(bad),
        Some(b'W' | b'X') => Ok(Stop::Ended),
        _ => Err(bad()),
    }
}

/// The general-purpose, flags, segment and base registers of QEMU's x86-64 `g` reply: 16
/// GPRs and rip (8 bytes each), eflags and six selectors (4 bytes each), then fs_base and
/// gs_base (8 bytes each); the x87, SSE and control registers after them are not sampled.
pub fn registers(reply: &str) -> Result<RegisterMap, TruthError> {
    const NAMES64: [&str; 17] = [
        "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
        "rip",
    ];
    const NAMES32: [&str; 7] = ["eflags", "cs", "ss", "ds", "es", "fs", "gs"];
    let bytes =
        unhex(reply).ok_or_else(|| TruthError::Protocol(format!("a `g` reply that is not hex: {:.40}…", reply)))?;
    if bytes.len() < 180 {
        return Err(TruthError::Protocol(format!(
            "a `g` reply of {} bytes; QEMU's x86-64 one has at least 180",
            bytes.len()
        )));
    }
    let word = |at: usize, n: usize| {
        let mut w = [0u8; 8];
        w[..n].copy_from_slice(&bytes[at..at + n]);
        u64::from_le_bytes(w)
    };
    let mut map = RegisterMap::new();
    for (i, name) in NAMES64.iter().enumerate() {
        map.insert(name.to_string(), format!("{:#x}", word(8 * i, 8)));
    }
    for (i, name) in NAMES32.iter().enumerate() {
        map.insert(name.to_string(), format!("{:#x}", word(136 + 4 * i, 4)));
    }
    map.insert("fs_base".into(), format!("{:#x}", word(164, 8)));
    map.insert("gs_base".into(), format!("{:#x}", word(172, 8)));
    Ok(map)
}

/// Hex digits as bytes.
fn unhex(text: &str) -> Option<Vec<u8>> {
    let digits = text.as_bytes();
    if digits.len() % 2 != 0 {
        return None;
    }
    digits
        .chunks_exact(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_length_encoding_is_undone() {
        assert_eq!(expand(b"0* "), "0000");
        assert_eq!(expand(b"a1*!b"), "a11111b");
        assert_eq!(expand(b"plain"), "plain");
    }

    #[test]
    fn stop_replies_are_told_apart() {
        assert_eq!(stop("T1athread:1a91;").ok(), Some(Stop::Signal(0x1a)));
        assert_eq!(stop("S05").ok(), Some(Stop::Signal(5)));
        assert_eq!(stop("W00").ok(), Some(Stop::Ended));
        assert_eq!(stop("X09").ok(), Some(Stop::Ended));
        assert!(stop("OK").is_err());
        assert!(stop("T").is_err());
    }

    #[test]
    fn registers_come_from_their_offsets() {
        let mut bytes = vec![0u8; 608];
        bytes[0] = 0x11; // rax
        bytes[56..64].copy_from_slice(&0x7fff_0000_1230u64.to_le_bytes()); // rsp
        bytes[128..136].copy_from_slice(&0x40_1000u64.to_le_bytes()); // rip
        bytes[136..140].copy_from_slice(&0x246u32.to_le_bytes()); // eflags
        bytes[140..144].copy_from_slice(&0x33u32.to_le_bytes()); // cs
        bytes[164..172].copy_from_slice(&0x7fff_f7d8_a740u64.to_le_bytes()); // fs_base
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let map = registers(&hex).expect("parses");
        assert_eq!(map["rax"], "0x11");
        assert_eq!(map["rsp"], "0x7fff00001230");
        assert_eq!(map["rip"], "0x401000");
        assert_eq!(map["eflags"], "0x246");
        assert_eq!(map["cs"], "0x33");
        assert_eq!(map["fs_base"], "0x7ffff7d8a740");
        assert_eq!(map["gs_base"], "0x0");
        assert!(registers(&hex[..200]).is_err());
        assert!(registers("zz").is_err());
    }
}

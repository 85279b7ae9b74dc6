//! As much of a GDB remote-protocol client as rtit needs: packets with checksums and
//! acknowledgements, stop replies, the `g` reply of QEMU's x86-64 target and the auxiliary
//! vector (`qXfer:auxv:read`).
//!
//! QEMU's gdbstub is the only thing in QEMU user mode 7.2 that can read the guest's
//! registers (the plugin API of 7.2 cannot); this client talks to it over the Unix socket
//! `qemu-x86_64 -g PATH` listens on.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::time::TimeSpec;

use super::GdbstubError;
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
    pub fn send(&mut self, data: &str) -> Result<(), GdbstubError> {
        let sum = data.bytes().fold(0u8, u8::wrapping_add);
        let frame = format!("${data}#{sum:02x}");
        self.stream.write_all(frame.as_bytes()).map_err(GdbstubError::Io)
    }

    /// Sends `data` and waits for the reply.
    pub fn request(&mut self, data: &str) -> Result<String, GdbstubError> {
        self.request_bytes(data)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// Sends `data` and waits for the reply, which may be binary.
    fn request_bytes(&mut self, data: &str) -> Result<Vec<u8>, GdbstubError> {
        self.send(data)?;
        match self.receive_bytes(None)? {
            Some(Some(p)) => Ok(p),
            _ => Err(GdbstubError::Protocol(format!(
                "QEMU closed the connection after {data:?}"
            ))),
        }
    }

    /// The next packet, acknowledged; `timeout` bounds the wait for its first byte.
    pub fn receive(&mut self, timeout: Option<Duration>) -> Result<Received, GdbstubError> {
        Ok(match self.receive_bytes(timeout)? {
            None => Received::Closed,
            Some(None) => Received::TimedOut,
            Some(Some(p)) => Received::Packet(String::from_utf8_lossy(&p).into_owned()),
        })
    }

    /// The program's auxiliary vector, as (type, value) pairs.
    pub fn auxv(&mut self) -> Result<Vec<(u64, u64)>, GdbstubError> {
        let mut bytes = Vec::new();
        loop {
            let reply = self.request_bytes(&format!("qXfer:auxv:read::{:x},800", bytes.len()))?;
            let (&kind, data) = reply
                .split_first()
                .ok_or_else(|| GdbstubError::Protocol("an empty reply to qXfer:auxv:read".into()))?;
            match kind {
                b'm' | b'l' => bytes.extend(unescape(data)),
                _ => {
                    return Err(GdbstubError::Protocol(format!(
                        "qXfer:auxv:read answered {:?}",
                        String::from_utf8_lossy(&reply)
                    )))
                }
            }
            if kind == b'l' || data.is_empty() {
                break;
            }
        }
        Ok(bytes
            .chunks_exact(16)
            .map(|c| {
                let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
                (word(&c[..8]), word(&c[8..]))
            })
            .collect())
    }

    /// A file as the program sees it, through the gdbstub's host I/O (`vFile`): QEMU 8.1 and
    /// later open it as the program's own `open` would, so `/proc/self/maps` is the program's
    /// map with its own protections, not the host's. `None` where the gdbstub has no host
    /// I/O (QEMU 7.2) or cannot open the file.
    pub fn guest_file(&mut self, path: &str) -> Result<Option<Vec<u8>>, GdbstubError> {
        let name = crate::qemu::hex::encode(path.as_bytes());
        let reply = self.request(&format!("vFile:open:{name},0,0"))?;
        let Some(fd) = file_result(reply.as_bytes()).filter(|&fd| fd >= 0) else {
            return Ok(None);
        };
        let mut out = Vec::new();
        let whole = loop {
            let reply = self.request_bytes(&format!("vFile:pread:{fd:x},1000,{:x}", out.len()))?;
            match file_result(&reply) {
                Some(0) => break true,
                Some(n) if n > 0 => {
                    let at = reply.iter().position(|&b| b == b';').map_or(reply.len(), |i| i + 1);
                    let data = unescape(&reply[at..]);
                    if data.len() as i64 != n {
                        break false;
                    }
                    out.extend(data);
                }
                _ => break false,
            }
        };
        self.request(&format!("vFile:close:{fd:x}"))?;
        Ok(whole.then_some(out))
    }

    /// The next packet's bytes, acknowledged: `None` when QEMU closed the connection,
    /// `Some(None)` when nothing began to arrive within `timeout`.
    fn receive_bytes(&mut self, timeout: Option<Duration>) -> Result<Option<Option<Vec<u8>>>, GdbstubError> {
        // Acknowledgements and anything before a packet's `$` are skipped.
        loop {
            match self.byte(timeout)? {
                None => return Ok(None),
                Some(Err(())) => return Ok(Some(None)),
                Some(Ok(b'$')) => break,
                Some(Ok(_)) => {}
            }
        }
        let mut data = Vec::new();
        loop {
            match self.byte(None)? {
                Some(Ok(b'#')) => break,
                Some(Ok(b)) => data.push(b),
                _ => return Ok(None),
            }
        }
        let mut sum = [0u8; 2];
        for s in &mut sum {
            match self.byte(None)? {
                Some(Ok(b)) => *s = b,
                _ => return Ok(None),
            }
        }
        let expected = std::str::from_utf8(&sum)
            .ok()
            .and_then(|s| u8::from_str_radix(s, 16).ok());
        if expected != Some(data.iter().fold(0u8, |a, &b| a.wrapping_add(b))) {
            return Err(GdbstubError::Protocol(format!(
                "a packet with a bad checksum: {:?}",
                String::from_utf8_lossy(&data)
            )));
        }
        self.stream.write_all(b"+").map_err(GdbstubError::Io)?;
        Ok(Some(Some(expand(&data))))
    }

    /// Whether something (a byte or the end of the stream) arrives within `timeout`. `ppoll`
    /// rather than the socket's read timeout: that one is rounded up to the kernel's tick
    /// (4 ms at 250 Hz), which made the sampler's waits of 0.1-0.7 ms ten times longer.
    fn readable_within(&self, timeout: Duration) -> Result<bool, GdbstubError> {
        let mut fds = [PollFd::new(self.stream.as_fd(), PollFlags::POLLIN)];
        loop {
            match ppoll(&mut fds, Some(TimeSpec::from_duration(timeout)), None) {
                Ok(n) => return Ok(n > 0),
                // A signal cut the wait short: waiting the whole time again errs on the late side.
                Err(Errno::EINTR) => {}
                Err(e) => return Err(GdbstubError::Io(e.into())),
            }
        }
    }

    /// One byte: `None` at the end of the stream, `Some(Err(()))` when `timeout` passed.
    fn byte(&mut self, timeout: Option<Duration>) -> Result<Option<Result<u8, ()>>, GdbstubError> {
        if self.pending.is_empty() {
            if let Some(timeout) = timeout {
                if !self.readable_within(timeout)? {
                    return Ok(Some(Err(())));
                }
            }
            let mut buf = [0u8; 4096];
            let n = loop {
                match self.stream.read(&mut buf) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        return Ok(Some(Err(())))
                    }
                    Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(None),
                    Err(e) => return Err(GdbstubError::Io(e)),
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
/// The number a host I/O reply (`F<hex>[,errno][;data]`) gives, negative for a failure.
fn file_result(reply: &[u8]) -> Option<i64> {
    let head = reply.strip_prefix(b"F")?;
    let end = head.iter().position(|&b| b == b';' || b == b',').unwrap_or(head.len());
    let text = std::str::from_utf8(&head[..end]).ok()?;
    match text.strip_prefix('-') {
        Some(n) => i64::from_str_radix(n, 16).ok().map(|n| -n),
        None => i64::from_str_radix(text, 16).ok(),
    }
}

fn expand(data: &[u8]) -> Vec<u8> {
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
    out
}

/// Undoes the escaping of binary data (`}` then the byte XOR 0x20).
fn unescape(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut bytes = data.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'}' => out.extend(bytes.next().map(|e| e ^ 0x20)),
            _ => out.push(b),
        }
    }
    out
}

/// Parses a stop reply.
pub fn stop(reply: &str) -> Result<Stop, GdbstubError> {
    let bad = || GdbstubError::Protocol(format!("not a stop reply: {reply:?}"));
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

/// The registers of QEMU's x86-64 `g` reply (its `i386-64bit.xml`, as `maint print
/// remote-registers` lists it): 16 GPRs and rip (8 bytes each) at 0, eflags and six
/// selectors (4 bytes each) at 136, fs_base and gs_base (8 bytes each) at 164, then
/// k_gs_base and control registers, the x87 registers at 236, xmm0–15 (16 bytes each) at
/// 348 and MXCSR at 604. The x87 and control registers are not taken; xmm and MXCSR only
/// when the reply is long enough to hold them.
/// Register `name` of `regs` ([`registers`]) as a number.
pub fn register(regs: &RegisterMap, name: &str) -> Option<u64> {
    let v = regs.get(name)?;
    u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()
}

pub fn registers(reply: &str) -> Result<RegisterMap, GdbstubError> {
    const NAMES64: [&str; 17] = [
        "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
        "rip",
    ];
    const NAMES32: [&str; 7] = ["eflags", "cs", "ss", "ds", "es", "fs", "gs"];
    const XMM: usize = 348;
    const MXCSR: usize = 604;
    let bytes = crate::qemu::hex::decode(reply)
        .ok_or_else(|| GdbstubError::Protocol(format!("a `g` reply that is not hex: {:.40}…", reply)))?;
    if bytes.len() < 180 {
        return Err(GdbstubError::Protocol(format!(
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
    if bytes.len() >= MXCSR + 4 {
        for i in 0..16 {
            let at = XMM + 16 * i;
            map.insert(
                format!("xmm{i}"),
                format!("{:#x}", u128::from(word(at + 8, 8)) << 64 | u128::from(word(at, 8))),
            );
        }
        map.insert("mxcsr".into(), format!("{:#x}", word(MXCSR, 4)));
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_length_encoding_is_undone() {
        assert_eq!(expand(b"0* "), b"0000");
        assert_eq!(expand(b"a1*!b"), b"a11111b");
        assert_eq!(expand(b"plain"), b"plain");
    }

    #[test]
    fn host_io_replies_give_their_number() {
        assert_eq!(file_result(b"F5"), Some(5));
        assert_eq!(file_result(b"F1a;abc"), Some(0x1a));
        assert_eq!(file_result(b"F-1,2"), Some(-1));
        assert_eq!(file_result(b""), None, "no host I/O: an empty reply");
        assert_eq!(file_result(b"E01"), None);
    }

    #[test]
    fn binary_data_is_unescaped() {
        assert_eq!(unescape(b"a}\x03b"), b"a#b");
        assert_eq!(unescape(&[b'}', 0x5d, 0x01]), [0x7d, 0x01]);
        assert_eq!(unescape(&[b'}', 0x03]), [0x23]);
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
        let mut bytes = vec![0u8; 400];
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
        assert!(!map.contains_key("mxcsr"));
        bytes.resize(620, 0);
        bytes[348] = 0x78; // xmm0's lowest byte
        bytes[348 + 15] = 0x12; // xmm0's highest
        bytes[348 + 16 * 15 + 8] = 1; // xmm15's upper half
        bytes[604..608].copy_from_slice(&0x1fa0u32.to_le_bytes());
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let map = registers(&hex).expect("parses");
        assert_eq!(map["xmm0"], "0x12000000000000000000000000000078");
        assert_eq!(map["xmm15"], "0x10000000000000000");
        assert_eq!(map["mxcsr"], "0x1fa0");
        assert_eq!(map["rsp"], "0x7fff00001230");
        assert!(registers(&hex[..200]).is_err());
        assert!(registers("zz").is_err());
    }
}

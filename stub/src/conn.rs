//! The connection gdbstub talks through: a TCP stream with buffered input and output, and one
//! bit of protocol awareness.
//!
//! gdbstub 0.7 answers `m addr,len` by cutting the range into chunks the size of its packet
//! buffer and calling `read_addrs` once per chunk, writing each chunk's hex into the same
//! reply. So a chunk that fails after one that succeeded appends `E0e` to the data (gdb
//! reads it as data), and after a short chunk the next chunk's bytes follow as if they were
//! at the short chunk's end: wrong data. Its API has no way to answer an `m` as one range.
//! This connection therefore caps the length of every `m` request it passes on at
//! [`MAX_READ`], which always fits in one chunk: each `m` is one `read_addrs`, and the reply
//! is the known prefix of the range or an error, never both. gdb never asks for more (it
//! reads at most half of the PacketSize gdbstub advertises per `m`); a client that does gets
//! the known prefix of the first [`MAX_READ`] bytes, a short reply, which is how the protocol
//! says "read the rest with another request". The cap also bounds what one packet can cost:
//! `m0,ffffffffffffffff` would otherwise make gdbstub loop over 2^52 chunks.
//!
//! Buffering: gdbstub reads and writes a byte at a time, a system call (and with Nagle off a
//! TCP segment) per byte. Input is read in blocks; output is held until gdbstub flushes a
//! reply, except the acknowledgement `+` of a packet, which goes out at once so that a slow
//! answer never makes gdb send its packet again.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::TcpStream;

use gdbstub::conn::{Connection, ConnectionExt};

/// The packet buffer gdbstub gets (and advertises as PacketSize).
pub const PACKET_SIZE: usize = 4096;

/// The longest `m` read served in one reply. A packet (`$m`, the address in hex, `,`, the
/// length, `#` and two checksum digits) fits in [`PACKET_SIZE`] bytes, so its address decodes
/// to at most (PACKET_SIZE - 6) / 2 bytes, and gdbstub's chunk (the buffer after `$m` and the
/// decoded address) holds at least PACKET_SIZE / 2 + 1 bytes.
pub const MAX_READ: usize = PACKET_SIZE / 2;

/// A gdb connection for gdbstub: see the module documentation.
pub struct Conn {
    stream: TcpStream,
    nonblocking: bool,
    input: VecDeque<u8>,
    cap: ReadCap,
    output: Vec<u8>,
}

impl Conn {
    /// Wraps a connected stream (blocking, as accepted).
    pub fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            nonblocking: false,
            input: VecDeque::new(),
            cap: ReadCap::default(),
            output: Vec::new(),
        }
    }

    /// Sends `text` to gdb's console at once, as an `O` packet: what gdb prints while it
    /// waits for a stop reply (and only then).
    pub fn console(&mut self, text: &str) -> io::Result<()> {
        let body: String = std::iter::once("O".to_string())
            .chain(text.bytes().map(|b| format!("{b:02x}")))
            .collect();
        let packet = format!("${body}#{:02x}", checksum(body.as_bytes()));
        self.output.extend_from_slice(packet.as_bytes());
        self.send()?;
        Write::flush(&mut self.stream)
    }

    /// Sends what is held.
    fn send(&mut self) -> io::Result<()> {
        if !self.output.is_empty() {
            self.set_nonblocking(false)?;
            Write::write_all(&mut self.stream, &self.output)?;
            self.output.clear();
        }
        Ok(())
    }

    fn set_nonblocking(&mut self, on: bool) -> io::Result<()> {
        if self.nonblocking != on {
            self.stream.set_nonblocking(on)?;
            self.nonblocking = on;
        }
        Ok(())
    }

    /// Reads what has arrived (waiting for it if `wait`) and passes it through the cap.
    fn fill(&mut self, wait: bool) -> io::Result<()> {
        self.set_nonblocking(!wait)?;
        let mut block = [0u8; 4096];
        let n = match Read::read(&mut self.stream, &mut block) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "gdb closed the connection",
                ))
            }
            Ok(n) => n,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => return Ok(()),
            Err(e) => return Err(e),
        };
        for &b in &block[..n] {
            self.cap.push(b, &mut self.input);
        }
        Ok(())
    }
}

impl Connection for Conn {
    type Error = io::Error;

    fn write(&mut self, byte: u8) -> io::Result<()> {
        self.output.push(byte);
        if self.output == b"+" {
            self.send()?;
        }
        Ok(())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.output.extend_from_slice(buf);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()?;
        Write::flush(&mut self.stream)
    }

    fn on_session_start(&mut self) -> io::Result<()> {
        // Replies are whole packets already; Nagle would only delay them.
        self.stream.set_nodelay(true)
    }
}

impl ConnectionExt for Conn {
    fn read(&mut self) -> io::Result<u8> {
        loop {
            if let Some(b) = self.input.pop_front() {
                return Ok(b);
            }
            self.send()?;
            self.fill(true)?;
        }
    }

    /// The next byte if one has arrived; a closed connection is an error, so that a long
    /// `continue` polling for Ctrl-C stops when gdb goes away.
    fn peek(&mut self) -> io::Result<Option<u8>> {
        if self.input.is_empty() {
            self.send()?;
            self.fill(false)?;
        }
        Ok(self.input.front().copied())
    }
}

/// Where the scan of the incoming bytes is.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// Between packets: acknowledgements, Ctrl-C.
    #[default]
    Outside,
    /// After a `$`.
    Start,
    /// In the body of an `m` packet, held until it is complete.
    Read,
    /// In the checksum of an `m` packet (digits seen).
    ReadChecksum(u8),
    /// In any other packet (or an `m` too long to be one), passed on as it comes.
    Through,
    /// In its checksum (digits seen).
    ThroughChecksum(u8),
}

/// Caps the length of `m` requests at [`MAX_READ`] in the incoming byte stream and passes
/// everything else on unchanged.
#[derive(Debug, Default)]
struct ReadCap {
    scan: Scan,
    packet: Vec<u8>,
}

impl ReadCap {
    fn push(&mut self, b: u8, out: &mut VecDeque<u8>) {
        self.scan = match self.scan {
            Scan::Outside if b == b'$' => {
                self.packet.clear();
                self.packet.push(b);
                Scan::Start
            }
            Scan::Outside => {
                out.push_back(b);
                Scan::Outside
            }
            Scan::Start if b == b'm' => {
                self.packet.push(b);
                Scan::Read
            }
            Scan::Start => {
                out.push_back(b'$');
                out.push_back(b);
                if b == b'#' {
                    Scan::ThroughChecksum(0)
                } else {
                    Scan::Through
                }
            }
            Scan::Read => {
                self.packet.push(b);
                if b == b'#' {
                    Scan::ReadChecksum(0)
                } else if self.packet.len() > PACKET_SIZE {
                    // Not a packet gdbstub can hold: it will say so.
                    out.extend(self.packet.drain(..));
                    Scan::Through
                } else {
                    Scan::Read
                }
            }
            Scan::ReadChecksum(0) => {
                self.packet.push(b);
                Scan::ReadChecksum(1)
            }
            Scan::ReadChecksum(_) => {
                self.packet.push(b);
                out.extend(capped(&self.packet));
                self.packet.clear();
                Scan::Outside
            }
            Scan::Through => {
                out.push_back(b);
                if b == b'#' {
                    Scan::ThroughChecksum(0)
                } else {
                    Scan::Through
                }
            }
            Scan::ThroughChecksum(0) => {
                out.push_back(b);
                Scan::ThroughChecksum(1)
            }
            Scan::ThroughChecksum(_) => {
                out.push_back(b);
                Scan::Outside
            }
        };
    }
}

fn checksum(body: &[u8]) -> u8 {
    body.iter().fold(0u8, |a, &b| a.wrapping_add(b))
}

/// A hex number's value, saturating; `None` if it is empty or not hex.
fn hex_value(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |v, &d| {
        let d = char::from(d).to_digit(16)?;
        Some(
            v.checked_mul(16)
                .and_then(|v| v.checked_add(u64::from(d)))
                .unwrap_or(u64::MAX),
        )
    })
}

/// `$m<addr>,<len>#<sum>` with `len` at most [`MAX_READ`]. Anything that is not such a packet
/// with a right checksum is returned as it is, for gdbstub to judge.
fn capped(packet: &[u8]) -> Vec<u8> {
    let unchanged = || packet.to_vec();
    let Some(hash) = packet.len().checked_sub(3) else {
        return unchanged();
    };
    let (body, sum) = (&packet[1..hash], &packet[hash + 1..]);
    if hex_value(sum) != Some(u64::from(checksum(body))) {
        return unchanged();
    }
    let Some(comma) = body.iter().position(|&b| b == b',') else {
        return unchanged();
    };
    let (addr, len) = (&body[1..comma], &body[comma + 1..]);
    match (hex_value(addr), hex_value(len)) {
        (Some(_), Some(n)) if n > MAX_READ as u64 => {
            let mut body = b"m".to_vec();
            body.extend_from_slice(addr);
            body.extend_from_slice(format!(",{MAX_READ:x}").as_bytes());
            let mut out = b"$".to_vec();
            out.extend_from_slice(&body);
            out.extend_from_slice(format!("#{:02x}", checksum(&body)).as_bytes());
            out
        }
        _ => unchanged(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(body: &str) -> String {
        format!("${body}#{:02x}", checksum(body.as_bytes()))
    }

    fn scan(input: &str) -> String {
        let mut cap = ReadCap::default();
        let mut out = VecDeque::new();
        input.bytes().for_each(|b| cap.push(b, &mut out));
        String::from_utf8(out.into_iter().collect()).expect("ASCII")
    }

    #[test]
    fn a_long_read_is_capped_and_its_checksum_redone() {
        let input = format!("+{}", packet("m401000,100000"));
        assert_eq!(scan(&input), format!("+{}", packet("m401000,800")));
        // More digits than a u64 holds: still capped, not passed on to fail elsewhere.
        let huge = packet("m0,123456789abcdef0123456789");
        assert_eq!(scan(&huge), packet("m0,800"));
        assert_eq!(scan(&packet("m0,801")), packet("m0,800"));
    }

    #[test]
    fn everything_else_passes_unchanged() {
        let inputs = [
            packet("m401000,800"),
            packet("m7ffe0000,4"),
            packet("qSupported:multiprocess+;swbreak+"),
            packet("g"),
            packet("vCont;c"),
            packet("M1000,2:abcd"),
            // A bad checksum stays bad, for gdbstub to refuse.
            "$m0,100000#00".to_string(),
            // Not hex: gdbstub's own parser answers.
            packet("m0,zz"),
            packet("m,100000"),
            "\x03".to_string(),
            "+-+".to_string(),
            "$#00".to_string(),
        ];
        for input in inputs {
            assert_eq!(scan(&input), input);
        }
        let stream = format!("+{}\x03+{}-", packet("g"), packet("m0,10"));
        assert_eq!(scan(&stream), stream, "in sequence");
    }

    #[test]
    fn a_packet_longer_than_gdbstub_takes_passes_through_as_it_is() {
        let long = format!("$m{}", "0".repeat(2 * PACKET_SIZE));
        let out = scan(&format!("{long},100000#00+"));
        assert_eq!(out, format!("{long},100000#00+"));
    }

    #[test]
    fn acknowledgements_go_out_at_once_and_replies_when_flushed() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        let mut conn = Conn::new(server);
        Write::write_all(&mut client, format!("{}+", packet("m10,100000")).as_bytes()).expect("send");
        let got: Vec<u8> = (0..12).map(|_| conn.read().expect("a byte")).collect();
        assert_eq!(String::from_utf8_lossy(&got), packet("m10,800") + "+");
        conn.write(b'+').expect("ack");
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        let mut ack = [0u8; 1];
        Read::read_exact(&mut client, &mut ack).expect("the ack arrives without a flush");
        assert_eq!(&ack, b"+");
        conn.write_all(b"$OK#9a").expect("reply");
        assert_eq!(conn.peek().expect("peek"), None, "nothing more from the client");
        let mut reply = [0u8; 6];
        Read::read_exact(&mut client, &mut reply).expect("held output goes out before waiting for input");
        assert_eq!(&reply, b"$OK#9a");
        drop(client);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let closed = loop {
            match conn.peek() {
                Err(e) => break e,
                Ok(_) if std::time::Instant::now() < deadline => std::thread::yield_now(),
                Ok(b) => panic!("still open: {b:?}"),
            }
        };
        assert_eq!(closed.kind(), io::ErrorKind::UnexpectedEof);
    }
}

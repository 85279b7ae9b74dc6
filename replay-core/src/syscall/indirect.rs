//! Calls whose writes depend on user memory the call reads, not on its arguments alone:
//! `readv` and `preadv` scatter into the buffers an array of `iovec`s names, `recvmsg` also
//! fills the name and control buffers its `msghdr` names and updates three of its fields,
//! `recvfrom`, `accept` and `getsockopt` write an address or option as long as an in-out
//! length says. A recorder expands them
//! from the process's memory after the call (reading more than was written is harmless: the
//! log holds the bytes there after the call); the replay, with no log, from the state's memory
//! before it (forgetting more than was written is sound).

/// The most iovecs a call takes (UIO_MAXIOV).
const MAX_IOV: u64 = 1024;
/// The longest socket address (`sockaddr_storage`).
pub const MAX_ADDR: u64 = 128;
/// The most control data a bound is taken for.
const MAX_CONTROL: u64 = 1 << 16;

/// A write whose ranges are in user memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indirect {
    /// At most `total` bytes into the buffers of the `count` iovecs at `iov`, in order.
    Iovecs {
        /// The array of `struct iovec` (base, length).
        iov: u64,
        /// Its length.
        count: u64,
        /// The bytes written (the result), or `None` to take every buffer whole.
        total: Option<u64>,
    },
    /// `recvmsg`: the `struct msghdr` at `msg`, `total` bytes of data.
    Message {
        /// The `struct msghdr`.
        msg: u64,
        /// The bytes received (the result), or `None`.
        total: Option<u64>,
    },
    /// Into `addr` as many bytes as the 4-byte length at `len` says (at most `max`), and that
    /// length: a socket address or option.
    Sized {
        /// The buffer (none if 0).
        addr: u64,
        /// The in-out length.
        len: u64,
        /// The most the buffer is taken to hold.
        max: u64,
    },
    /// `len` bytes at `addr` (beside an indirect part of the same call).
    Buffer {
        /// Where.
        addr: u64,
        /// How many.
        len: u64,
    },
}

impl Indirect {
    /// The (address, length) ranges written, reading the `width`-byte little-endian words
    /// they depend on with `read`; `None` if one of those is not known.
    pub fn ranges(&self, read: &dyn Fn(u64, u32) -> Option<u64>) -> Option<Vec<(u64, u64)>> {
        match *self {
            Indirect::Iovecs { iov, count, total } => {
                let mut left = total.unwrap_or(u64::MAX);
                let mut out = Vec::new();
                for i in 0..count.min(MAX_IOV) {
                    if left == 0 {
                        break;
                    }
                    let base = read(iov + 16 * i, 8)?;
                    let len = read(iov + 16 * i + 8, 8)?.min(left);
                    out.push((base, len));
                    left -= len;
                }
                Some(out)
            }
            Indirect::Message { msg, total } => {
                let (name, control) = (read(msg, 8)?, read(msg + 32, 8)?);
                let mut out = vec![(msg + 8, 4), (msg + 40, 8), (msg + 48, 4)];
                if name != 0 {
                    out.push((name, read(msg + 8, 4)?.min(MAX_ADDR)));
                }
                if control != 0 {
                    out.push((control, read(msg + 40, 8)?.min(MAX_CONTROL)));
                }
                let iov = Indirect::Iovecs {
                    iov: read(msg + 16, 8)?,
                    count: read(msg + 24, 8)?,
                    total,
                };
                out.extend(iov.ranges(read)?);
                Some(out)
            }
            Indirect::Sized { addr: 0, .. } | Indirect::Sized { len: 0, .. } => Some(Vec::new()),
            Indirect::Sized { addr, len, max } => Some(vec![(len, 4), (addr, read(len, 4)?.min(max))]),
            Indirect::Buffer { addr, len } => Some(vec![(addr, len)]),
        }
    }
}

//! The bytes of a stored timeline: a header naming the recording and the rtit it was decoded
//! by (its key), the timeline's arrays as they are in memory (little-endian; the runs' codes
//! as they are, the successor lists as their lengths then their blocks), its events, and a
//! checksum of everything before it. Read back, every array is checked against the others
//! (block numbers below the block count, offsets in order, every run's code decoded once and
//! the marks found where their runs are), so a damaged file is refused with where it went
//! wrong, never turned into a wrong history.

use std::hash::Hasher;
use std::io::{self, Read, Write};

use rustc_hash::FxHasher;

use super::{CacheError, Key, Prefix};
use crate::flow::{EventKind, FlowEvent};
use crate::timeline::blocks::Blocks;
use crate::timeline::runs::{Runs, LISTED, STRIDE};
use crate::timeline::Timeline;

/// The first bytes of every stored timeline; the last digit is the format's version.
const MAGIC: &[u8; 8] = b"rtitTL02";

/// Bytes converted at a time.
const CHUNK: usize = 1 << 16;

/// Whether the file at `path` begins as this format does: a stored timeline an rtit that did
/// not pack it wrote (`super::packed`).
pub(super) fn is_unpacked(path: &std::path::Path) -> bool {
    let mut magic = [0; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == MAGIC
}

/// Writes the first `prefix` of `timeline` under `key`.
pub(super) fn write(timeline: &Timeline, prefix: Prefix, key: &Key, out: impl Write) -> io::Result<()> {
    let mut w = Summed::new(out);
    w.put(MAGIC)?;
    w.put(&key.0)?;
    let ips = &timeline.blocks.ips[..prefix.ips];
    let starts = &timeline.blocks.starts[..prefix.blocks + 1];
    let runs = &timeline.runs;
    let codes = &runs.codes[..prefix.nibbles.div_ceil(2) as usize];
    let marks = prefix.runs.div_ceil(STRIDE);
    // The lists as they were at the prefix: what came after added only blocks past it.
    let blocks = prefix.blocks as u32;
    let lists: Vec<Vec<u32>> = runs.next[..runs.next.len().min(prefix.blocks + 1)]
        .iter()
        .map(|l| l.iter().copied().filter(|&b| b < blocks).collect())
        .collect();
    let events = &timeline.events[..prefix.events];
    for n in [
        prefix.len,
        ips.len() as u64,
        starts.len() as u64,
        prefix.runs as u64,
        prefix.nibbles,
        lists.len() as u64,
        events.len() as u64,
    ] {
        w.put(&n.to_le_bytes())?;
    }
    put_all(&mut w, starts, |v| v.to_le_bytes())?;
    let ips = encode_ips(ips, starts);
    w.put(&(ips.len() as u64).to_le_bytes())?;
    for chunk in ips.chunks(CHUNK) {
        w.put(chunk)?;
    }
    // A nibble past the prefix shares its last byte: left out.
    let odd = prefix.nibbles % 2 == 1;
    for (i, chunk) in codes.chunks(CHUNK).enumerate() {
        match chunk.split_last() {
            Some((&b, head)) if odd && (i + 1) * CHUNK >= codes.len() => {
                let mut c = head.to_vec();
                c.push(b & 15);
                w.put(&c)?;
            }
            _ => w.put(chunk)?,
        }
    }
    put_all(&mut w, &lists.iter().map(|l| l.len() as u32).collect::<Vec<_>>(), |v| {
        v.to_le_bytes()
    })?;
    put_all(&mut w, &lists.concat(), |v| v.to_le_bytes())?;
    put_all(&mut w, &runs.mark_positions[..marks], |v| v.to_le_bytes())?;
    put_all(&mut w, &runs.mark_nibbles[..marks], |v| v.to_le_bytes())?;
    put_all(&mut w, &runs.mark_before[..marks], |v| v.to_le_bytes())?;
    let last_block = match prefix.runs {
        0 => u32::MAX,
        n => runs.iter_from(n - 1).next().unwrap_or(u32::MAX),
    };
    w.put(&last_block.to_le_bytes())?;
    for e in events {
        put_event(&mut w, e)?;
    }
    let sum = w.sum.finish();
    w.inner.write_all(&sum.to_le_bytes())?;
    w.inner.flush()
}

/// Reads a timeline stored under `key`; `size` is the file's, to refuse counts it cannot hold
/// before allocating for them.
pub(super) fn read(input: impl Read, key: &Key, size: u64) -> Result<Timeline, CacheError> {
    let mut r = Summed::new(input);
    let mut magic = [0; 8];
    r.take(&mut magic)?;
    if &magic != MAGIC {
        return Err(CacheError::NotACache);
    }
    let mut stored = [0; 32];
    r.take(&mut stored)?;
    if stored != key.0 {
        return Err(CacheError::OtherKey);
    }
    let len = r.u64()?;
    let counts = [r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?];
    let [n_ips, n_starts, n_runs, n_nibbles, n_lists, n_events] = counts;
    let n_marks = n_runs.div_ceil(STRIDE as u64);
    let array_bytes = [
        (n_ips, 1),
        (n_starts, 4),
        (n_nibbles.div_ceil(2), 1),
        (n_lists, 4),
        (n_marks, 20),
    ]
    .iter()
    .fold(0u64, |sum, &(n, b)| sum.saturating_add(n.saturating_mul(b)));
    // A run's code takes a nibble at least.
    if n_events > size || array_bytes > size || n_starts == 0 || n_lists > n_starts || n_runs > n_nibbles {
        return Err(r.corrupt("array sizes the file cannot hold"));
    }
    let starts = take_all(&mut r, n_starts, u32::from_le_bytes)?;
    let n_bytes = r.u64()?;
    if n_bytes > size {
        return Err(r.corrupt("array sizes the file cannot hold"));
    }
    let mut bytes = vec![0; n_bytes as usize];
    for chunk in bytes.chunks_mut(CHUNK) {
        r.take(chunk)?;
    }
    let ips = decode_ips(&bytes, &starts, n_ips).map_err(|what| r.corrupt(what))?;
    let mut codes = vec![0; n_nibbles.div_ceil(2) as usize];
    for chunk in codes.chunks_mut(CHUNK) {
        r.take(chunk)?;
    }
    let lengths = take_all(&mut r, n_lists, u32::from_le_bytes)?;
    let listed = lengths.iter().map(|&n| u64::from(n)).sum::<u64>();
    if lengths.iter().any(|&n| n as usize > LISTED) {
        return Err(r.corrupt("a successor list out of range"));
    }
    let mut flat = take_all(&mut r, listed, u32::from_le_bytes)?.into_iter();
    let next = lengths
        .iter()
        .map(|&n| flat.by_ref().take(n as usize).collect())
        .collect();
    let mark_positions = take_all(&mut r, n_marks, u64::from_le_bytes)?;
    let mark_nibbles = take_all(&mut r, n_marks, u64::from_le_bytes)?;
    let mark_before = take_all(&mut r, n_marks, u32::from_le_bytes)?;
    let mut last = [0; 4];
    r.take(&mut last)?;
    let mut runs = Runs {
        codes,
        nibbles: n_nibbles,
        count: usize::try_from(n_runs).map_err(|_| r.corrupt("the run count"))?,
        next,
        mark_positions,
        mark_nibbles,
        mark_before,
        last: Some(u32::from_le_bytes(last)).filter(|_| n_runs > 0),
        ..Runs::default()
    };
    let mut events = Vec::with_capacity(n_events as usize);
    for _ in 0..n_events {
        events.push(take_event(&mut r)?);
    }
    let sum = r.sum.finish();
    let mut stored = [0; 8];
    r.inner.read_exact(&mut stored).map_err(|_| r.corrupt("no checksum"))?;
    if u64::from_le_bytes(stored) != sum {
        return Err(r.corrupt("checksum differs"));
    }
    let mut trailing = [0; 1];
    if r.inner.read(&mut trailing)? != 0 {
        return Err(r.corrupt("bytes after the checksum"));
    }
    let blocks = Blocks { ips, starts };
    runs.index();
    check(&blocks, &runs, len).map_err(|what| r.corrupt(what))?;
    Ok(Timeline {
        blocks,
        runs,
        events,
        len,
    })
}

/// Whether the arrays agree with one another, so that no lookup can go out of bounds: the
/// checksum already makes a damaged file unlikely to get here.
fn check(blocks: &Blocks, runs: &Runs, len: u64) -> Result<(), &'static str> {
    let starts = &blocks.starts;
    if starts[0] != 0
        || starts.windows(2).any(|w| w[0] >= w[1])
        || starts.last().map(|&s| s as usize) != Some(blocks.ips.len())
    {
        return Err("block offsets out of order");
    }
    runs.check(starts.len() as u32 - 1, |b| u64::from(blocks.len(b)), len)
}

/// The blocks' addresses as each block's first, then the length of each instruction after
/// it in a byte (a block's instructions follow one another in memory): an eighth of the
/// addresses themselves, which in a short history outweighed its runs. A first byte of 1
/// says so; 0, the addresses as they are (a block whose instructions do not follow one
/// another, which the decoder does not make).
fn encode_ips(ips: &[u64], starts: &[u32]) -> Vec<u8> {
    let blocks = starts.windows(2).map(|w| &ips[w[0] as usize..w[1] as usize]);
    let follow = |b: &[u64]| b.windows(2).all(|w| (1..=255).contains(&w[1].wrapping_sub(w[0])));
    if !blocks.clone().all(follow) {
        return std::iter::once(0)
            .chain(ips.iter().flat_map(|v| v.to_le_bytes()))
            .collect();
    }
    let mut out = vec![1];
    for b in blocks {
        out.extend_from_slice(&b[0].to_le_bytes());
        out.extend(b.windows(2).map(|w| (w[1] - w[0]) as u8));
    }
    out
}

/// The addresses [`encode_ips`] wrote, `n` of them in the blocks `starts` says.
fn decode_ips(bytes: &[u8], starts: &[u32], n: u64) -> Result<Vec<u64>, &'static str> {
    let short = "block addresses end early";
    let (&how, mut rest) = bytes.split_first().ok_or(short)?;
    let word = |rest: &mut &[u8]| -> Result<u64, &'static str> {
        let (w, tail) = rest.split_first_chunk::<8>().ok_or(short)?;
        *rest = tail;
        Ok(u64::from_le_bytes(*w))
    };
    let mut ips = Vec::with_capacity(n.min(bytes.len() as u64) as usize);
    match how {
        0 => {
            for _ in 0..n {
                ips.push(word(&mut rest)?);
            }
        }
        1 => {
            if starts.last().map(|&s| u64::from(s)) != Some(n) {
                return Err("block offsets out of order");
            }
            for w in starts.windows(2) {
                let len = w[1].checked_sub(w[0]).ok_or("block offsets out of order")?;
                if len == 0 {
                    continue;
                }
                let mut ip = word(&mut rest)?;
                ips.push(ip);
                let (deltas, tail) = rest.split_at_checked(len as usize - 1).ok_or(short)?;
                rest = tail;
                for &d in deltas {
                    ip = ip.wrapping_add(u64::from(d));
                    ips.push(ip);
                }
            }
        }
        _ => return Err("block addresses of an unknown kind"),
    }
    match rest.is_empty() && ips.len() as u64 == n {
        true => Ok(ips),
        false => Err("block addresses that do not fill their blocks"),
    }
}

fn put_all<T: Copy, const N: usize>(
    w: &mut Summed<impl Write>,
    values: &[T],
    bytes: impl Fn(T) -> [u8; N],
) -> io::Result<()> {
    let mut buf = Vec::with_capacity(CHUNK);
    for chunk in values.chunks(CHUNK / N) {
        buf.clear();
        for &v in chunk {
            buf.extend_from_slice(&bytes(v));
        }
        w.put(&buf)?;
    }
    Ok(())
}

fn take_all<T, const N: usize>(
    r: &mut Summed<impl Read>,
    count: u64,
    value: impl Fn([u8; N]) -> T,
) -> Result<Vec<T>, CacheError> {
    let mut out = Vec::with_capacity(count as usize);
    let mut buf = vec![0; CHUNK];
    let mut left = count as usize * N;
    while left > 0 {
        let n = left.min(CHUNK);
        r.take(&mut buf[..n])?;
        out.extend(buf[..n].chunks_exact(N).map(|c| value(c.try_into().expect("N bytes"))));
        left -= n;
    }
    Ok(out)
}

/// Tags of the event kinds.
const ENABLED: u8 = 0;
const DISABLED: u8 = 1;
const INTERRUPT: u8 = 2;
const GAP: u8 = 3;
const LOST: u8 = 4;
const ERROR: u8 = 5;
const STOP: u8 = 6;
const SPINS: u8 = 7;

fn put_event(w: &mut Summed<impl Write>, e: &FlowEvent) -> io::Result<()> {
    let (tag, a, b): (u8, Option<u64>, Option<u64>) = match &e.kind {
        EventKind::Enabled { ip } => (ENABLED, Some(*ip), None),
        EventKind::Disabled { ip } => (DISABLED, *ip, None),
        EventKind::Interrupt { ip, target } => (INTERRUPT, Some(*ip), Some(*target)),
        EventKind::Gap { ip } => (GAP, Some(*ip), None),
        EventKind::Lost { bytes } => (LOST, *bytes, None),
        EventKind::Error { ip, .. } => (ERROR, *ip, None),
        EventKind::Stop => (STOP, None, None),
        EventKind::Spins { ip, instructions } => (SPINS, Some(*ip), *instructions),
    };
    w.put(&[tag])?;
    w.put(&(e.offset as u64).to_le_bytes())?;
    w.put(&e.position.to_le_bytes())?;
    for v in [a, b] {
        w.put(&[v.is_some() as u8])?;
        w.put(&v.unwrap_or(0).to_le_bytes())?;
    }
    let message = match &e.kind {
        EventKind::Error { message, .. } => message.as_bytes(),
        _ => &[],
    };
    w.put(&(message.len() as u64).to_le_bytes())?;
    w.put(message)
}

fn take_event(r: &mut Summed<impl Read>) -> Result<FlowEvent, CacheError> {
    let mut tag = [0; 1];
    r.take(&mut tag)?;
    let offset = usize::try_from(r.u64()?).map_err(|_| r.corrupt("an event's offset"))?;
    let position = r.u64()?;
    let mut field = || -> Result<Option<u64>, CacheError> {
        let mut some = [0; 1];
        r.take(&mut some)?;
        let v = r.u64()?;
        Ok((some[0] == 1).then_some(v))
    };
    let (a, b) = (field()?, field()?);
    let n = r.u64()?;
    if n > 1 << 20 {
        return Err(r.corrupt("an event's message length"));
    }
    let mut message = vec![0; n as usize];
    r.take(&mut message)?;
    let message = String::from_utf8(message).map_err(|_| r.corrupt("an event's message"))?;
    let need = |v: Option<u64>| v.ok_or(());
    let kind = match tag[0] {
        ENABLED => need(a).map(|ip| EventKind::Enabled { ip }),
        DISABLED => Ok(EventKind::Disabled { ip: a }),
        INTERRUPT => need(a).and_then(|ip| Ok(EventKind::Interrupt { ip, target: need(b)? })),
        GAP => need(a).map(|ip| EventKind::Gap { ip }),
        LOST => Ok(EventKind::Lost { bytes: a }),
        ERROR => Ok(EventKind::Error { ip: a, message }),
        STOP => Ok(EventKind::Stop),
        SPINS => need(a).map(|ip| EventKind::Spins { ip, instructions: b }),
        _ => Err(()),
    }
    .map_err(|()| r.corrupt("an event"))?;
    Ok(FlowEvent { kind, offset, position })
}

/// A reader or writer that sums the bytes going through it and counts them (to say where a
/// damaged file went wrong). The sum depends on how the bytes are cut into calls: reading
/// takes them in the very pieces writing put them (the same sizes, in the same order).
struct Summed<T> {
    inner: T,
    sum: FxHasher,
    at: u64,
}

impl<T> Summed<T> {
    fn new(inner: T) -> Self {
        Self {
            inner,
            sum: FxHasher::default(),
            at: 0,
        }
    }

    fn corrupt(&self, what: &'static str) -> CacheError {
        CacheError::Corrupt { offset: self.at, what }
    }
}

impl<W: Write> Summed<W> {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.sum.write(bytes);
        self.at += bytes.len() as u64;
        self.inner.write_all(bytes)
    }
}

impl<R: Read> Summed<R> {
    fn take(&mut self, bytes: &mut [u8]) -> Result<(), CacheError> {
        self.inner.read_exact(bytes).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => self.corrupt("the file ends early"),
            _ => CacheError::Io(e),
        })?;
        self.sum.write(bytes);
        self.at += bytes.len() as u64;
        Ok(())
    }

    fn u64(&mut self) -> Result<u64, CacheError> {
        let mut b = [0; 8];
        self.take(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}

//! The stored timeline's bytes packed with LZ4, a block of at most [`BLOCK`] at a time: the
//! file is [`MAGIC`], then per block its unpacked length and its packed length (u32, little
//! endian) and its packed bytes, to the end of the file.
//!
//! Why: a history is larger than the trace where the trace is small, a loop's trace above all
//! (a bit a round, where the history keeps a successor code a run): a C loop's billion
//! instructions stored 66 MB beside an 11 MB trace, a 19 G-instruction sort's 1.20 GB beside
//! 1.17. Packed, they take 7 MB and 355 MB. LZ4 (pure Rust, `lz4_flex`) rather than zstd:
//! zstd packs tighter (1.8 and 169 MB) but needs its C library; LZ4 unpacks at several GB a
//! second, so reading the history back stays a fraction of decoding it.

use std::io::{self, Read, Seek, SeekFrom, Write};

/// The first bytes of a packed stored timeline.
pub const MAGIC: &[u8; 8] = b"rtitTLZ1";

/// The most bytes a block unpacks to.
pub const BLOCK: usize = 4 << 20;

/// A writer that packs what it is given a block at a time into `inner`.
pub struct Packer<W: Write> {
    inner: W,
    raw: Vec<u8>,
    packed: Vec<u8>,
}

impl<W: Write> Packer<W> {
    /// Writes the magic to `inner`.
    pub fn new(mut inner: W) -> io::Result<Self> {
        inner.write_all(MAGIC)?;
        Ok(Self {
            inner,
            raw: Vec::with_capacity(BLOCK),
            packed: Vec::new(),
        })
    }

    fn block(&mut self) -> io::Result<()> {
        if self.raw.is_empty() {
            return Ok(());
        }
        let bound = lz4_flex::block::get_maximum_output_size(self.raw.len());
        self.packed.resize(bound, 0);
        let n = lz4_flex::block::compress_into(&self.raw, &mut self.packed).map_err(io::Error::other)?;
        self.inner.write_all(&(self.raw.len() as u32).to_le_bytes())?;
        self.inner.write_all(&(n as u32).to_le_bytes())?;
        self.inner.write_all(&self.packed[..n])?;
        self.raw.clear();
        Ok(())
    }

    /// Packs what is left and flushes `inner`.
    pub fn finish(mut self) -> io::Result<()> {
        self.block()?;
        self.inner.flush()
    }
}

impl<W: Write> Write for Packer<W> {
    fn write(&mut self, mut bytes: &[u8]) -> io::Result<usize> {
        let given = bytes.len();
        while !bytes.is_empty() {
            let take = (BLOCK - self.raw.len()).min(bytes.len());
            self.raw.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.raw.len() == BLOCK {
                self.block()?;
            }
        }
        Ok(given)
    }

    /// Packs what it holds as a block (shorter than the others) and flushes `inner`.
    fn flush(&mut self) -> io::Result<()> {
        self.block()?;
        self.inner.flush()
    }
}

/// A reader of a packed file: what `inner` unpacks to.
pub struct Unpacker<R: Read> {
    inner: R,
    /// The file offset of the next block's header.
    at: u64,
    raw: Vec<u8>,
    packed: Vec<u8>,
    /// How much of `raw` was read.
    taken: usize,
}

fn damaged(at: u64, what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("damaged at byte {at}: {what}"))
}

/// Reads the header of the block at `at`; `None` at the end of the file.
fn header(r: &mut impl Read, at: u64) -> io::Result<Option<(usize, usize)>> {
    let mut h = [0; 8];
    let mut got = 0;
    while got < h.len() {
        match r.read(&mut h[got..])? {
            0 if got == 0 => return Ok(None),
            0 => return Err(damaged(at, "a block's header is cut")),
            n => got += n,
        }
    }
    let raw = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
    let packed = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if raw == 0 || raw > BLOCK || packed > lz4_flex::block::get_maximum_output_size(raw) {
        return Err(damaged(at, "a block's lengths are not a block's"));
    }
    Ok(Some((raw, packed)))
}

impl<R: Read + Seek> Unpacker<R> {
    /// The reader, after its magic, and how many bytes it unpacks to in all (every block's
    /// header read first, so that a damaged one is found before anything is unpacked).
    /// `Ok(None)`: not a packed stored timeline.
    pub fn open(mut inner: R) -> io::Result<Option<(Self, u64)>> {
        let mut magic = [0; 8];
        if inner.read_exact(&mut magic).is_err() || &magic != MAGIC {
            return Ok(None);
        }
        let len = inner.seek(SeekFrom::End(0))?;
        inner.seek(SeekFrom::Start(MAGIC.len() as u64))?;
        let (mut at, mut total) = (MAGIC.len() as u64, 0u64);
        while let Some((raw, packed)) = header(&mut inner, at)? {
            if at + 8 + packed as u64 > len {
                return Err(damaged(at, "the file ends inside a block"));
            }
            total += raw as u64;
            at += 8 + packed as u64;
            inner.seek(SeekFrom::Start(at))?;
        }
        inner.seek(SeekFrom::Start(MAGIC.len() as u64))?;
        let reader = Self {
            inner,
            at: MAGIC.len() as u64,
            raw: Vec::with_capacity(BLOCK),
            packed: Vec::new(),
            taken: 0,
        };
        Ok(Some((reader, total)))
    }
}

impl<R: Read> Unpacker<R> {
    /// Unpacks the next block; false at the end of the file.
    fn next_block(&mut self) -> io::Result<bool> {
        let Some((raw, packed)) = header(&mut self.inner, self.at)? else {
            return Ok(false);
        };
        self.packed.resize(packed, 0);
        self.inner
            .read_exact(&mut self.packed)
            .map_err(|_| damaged(self.at, "the file ends inside a block"))?;
        self.raw.resize(raw, 0);
        match lz4_flex::block::decompress_into(&self.packed, &mut self.raw) {
            Ok(n) if n == raw => {}
            _ => return Err(damaged(self.at, "a block does not unpack to its length")),
        }
        self.at += 8 + packed as u64;
        self.taken = 0;
        Ok(true)
    }
}

impl<R: Read> Read for Unpacker<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.taken == self.raw.len() && !self.next_block()? {
            return Ok(0);
        }
        let n = buf.len().min(self.raw.len() - self.taken);
        buf[..n].copy_from_slice(&self.raw[self.taken..self.taken + n]);
        self.taken += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn pack(bytes: &[u8], pieces: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut p = Packer::new(&mut out).unwrap();
        for piece in bytes.chunks(pieces) {
            p.write_all(piece).unwrap();
        }
        p.finish().unwrap();
        out
    }

    fn unpack(file: Vec<u8>) -> io::Result<Vec<u8>> {
        let (mut r, total) = Unpacker::open(Cursor::new(file))?.expect("packed");
        let mut out = Vec::new();
        r.read_to_end(&mut out)?;
        assert_eq!(out.len() as u64, total);
        Ok(out)
    }

    #[test]
    fn bytes_over_several_blocks_come_back_and_a_loop_packs_small() {
        // A loop's successor codes: the same few bytes again and again, and a tail that is not.
        let mut bytes: Vec<u8> = (0..BLOCK * 2 + 1000).map(|i| (i % 3) as u8).collect();
        bytes.extend((0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
        let file = pack(&bytes, 70_001);
        assert!(file.len() < bytes.len() / 50, "{} bytes", file.len());
        assert_eq!(unpack(file).unwrap(), bytes);
        assert_eq!(unpack(pack(&[], 1)).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn a_file_of_another_form_is_not_taken_for_one() {
        assert!(Unpacker::open(Cursor::new(b"rtitTL02rest".to_vec())).unwrap().is_none());
        assert!(Unpacker::open(Cursor::new(b"rtit".to_vec())).unwrap().is_none());
    }

    #[test]
    fn damage_is_refused_with_its_byte() {
        let bytes: Vec<u8> = (0..BLOCK + 10).map(|i| (i / 7) as u8).collect();
        let file = pack(&bytes, BLOCK);
        // Cut inside the second block.
        let err = Unpacker::open(Cursor::new(file[..file.len() - 3].to_vec()))
            .err()
            .unwrap();
        assert!(err.to_string().contains("the file ends inside a block"), "{err}");
        // A length past a block's.
        let mut bad = file.clone();
        bad[8..12].copy_from_slice(&(BLOCK as u32 + 1).to_le_bytes());
        let err = Unpacker::open(Cursor::new(bad)).err().unwrap();
        assert!(
            err.to_string().contains("damaged at byte 8: a block's lengths"),
            "{err}"
        );
        // A packed byte changed: the block unpacks to something else or to nothing.
        let mut flipped = file.clone();
        let second = 8 + 8 + u32::from_le_bytes(file[12..16].try_into().unwrap()) as usize;
        flipped[second + 8] ^= 0xff;
        match unpack(flipped) {
            Err(e) => assert!(e.to_string().contains(&format!("damaged at byte {second}")), "{e}"),
            // LZ4 has no checksum: a literal byte changed unpacks to other bytes, which the
            // stored timeline's own checksum refuses.
            Ok(out) => assert_ne!(out, bytes),
        }
    }
}

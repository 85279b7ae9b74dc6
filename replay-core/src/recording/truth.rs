//! `truth.bin`: every retired instruction address `rtit record --truth` saw, the oracle the
//! tests hold the decode and the values to.
//!
//! Written as the magic [`MAGIC`] and then, for each address, the difference from the one before
//! (the first from 0) zigzag-encoded as an unsigned LEB128 number. Consecutive instructions
//! differ by their length, so most addresses take one byte instead of eight: a test recording
//! of 48 M instructions holds 50 MB of truth, not 385 MB (CI's disk ran out on the latter).
//! A file without the magic is the first form, one little-endian u64 per address, still read.

/// The first bytes of a `truth.bin` in the compact form (never the start of an address: as a
/// little-endian u64 it is not canonical).
pub const MAGIC: &[u8; 8] = b"RTITTRU1";

/// Appends addresses to the compact form; `last` carries the previous address across calls
/// (0 at the start of the file, which [`MAGIC`] precedes).
#[derive(Debug, Default)]
pub struct Encoder {
    last: u64,
}

impl Encoder {
    /// Appends `ips`, each as its difference from the address before it.
    pub fn push(&mut self, ips: &[u64], out: &mut Vec<u8>) {
        out.reserve(ips.len() + ips.len() / 4);
        for &ip in ips {
            let delta = ip.wrapping_sub(self.last) as i64;
            self.last = ip;
            let mut z = ((delta << 1) ^ (delta >> 63)) as u64;
            while z >= 0x80 {
                out.push(z as u8 | 0x80);
                z >>= 7;
            }
            out.push(z as u8);
        }
    }
}

/// The whole file in the compact form: [`MAGIC`] and `ips`.
pub fn encode(ips: &[u64]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    Encoder::default().push(ips, &mut out);
    out
}

/// The addresses of a whole `truth.bin`, either form; the error says what is wrong and at which
/// byte.
pub fn decode(bytes: &[u8]) -> Result<Vec<u64>, String> {
    let Some(body) = bytes.strip_prefix(MAGIC.as_slice()) else {
        if bytes.len() % 8 != 0 {
            return Err(format!(
                "{} bytes: not a whole number of 8-byte addresses (cut at byte {})",
                bytes.len(),
                bytes.len() / 8 * 8
            ));
        }
        return Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect());
    };
    let mut ips = Vec::with_capacity(body.len());
    let (mut last, mut z, mut shift, mut start) = (0u64, 0u64, 0u32, 0usize);
    for (i, &b) in body.iter().enumerate() {
        if shift == 0 {
            start = i;
        }
        if shift > 63 || (shift == 63 && b > 1) {
            return Err(format!(
                "byte {}: an address difference longer than 64 bits",
                MAGIC.len() + start
            ));
        }
        z |= u64::from(b & 0x7f) << shift;
        if b & 0x80 != 0 {
            shift += 7;
            continue;
        }
        let delta = (z >> 1) as i64 ^ -((z & 1) as i64);
        last = last.wrapping_add(delta as u64);
        ips.push(last);
        (z, shift) = (0, 0);
    }
    if shift != 0 {
        return Err(format!(
            "{} bytes: the last address difference is cut (it starts at byte {})",
            bytes.len(),
            MAGIC.len() + start
        ));
    }
    Ok(ips)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_in_one_byte_each_when_consecutive() {
        let ips = [0x401000, 0x401003, 0x401008, 0x7fff_f7dd_0000, 0x401010, 0, u64::MAX, 1];
        let bytes = encode(&ips);
        assert_eq!(decode(&bytes).unwrap(), ips);
        let straight: Vec<u64> = (0..1000).map(|i| 0x401000 + 3 * i).collect();
        // The first address takes four bytes (0x401000 zigzagged is 24 bits), each next one byte.
        assert_eq!(encode(&straight).len(), MAGIC.len() + 4 + 999);
    }

    #[test]
    fn pushing_in_pieces_equals_the_whole() {
        let ips: Vec<u64> = (0..500u64).map(|i| 0x7f00_0000_0000 ^ (i * 0x9e37_79b9)).collect();
        let mut enc = Encoder::default();
        let mut out = MAGIC.to_vec();
        for piece in ips.chunks(37) {
            enc.push(piece, &mut out);
        }
        assert_eq!(out, encode(&ips));
    }

    #[test]
    fn the_first_form_is_still_read() {
        let raw: Vec<u8> = [0x401000u64, 0x401003].iter().flat_map(|ip| ip.to_le_bytes()).collect();
        assert_eq!(decode(&raw).unwrap(), [0x401000, 0x401003]);
        let err = decode(&raw[..13]).unwrap_err();
        assert!(err.contains("cut at byte 8"), "{err}");
    }

    #[test]
    fn a_cut_or_overlong_difference_is_refused_with_its_byte() {
        let mut bytes = encode(&[0x401000, 0x7fff_f7dd_0000]);
        bytes.pop();
        let err = decode(&bytes).unwrap_err();
        assert!(err.contains("starts at byte 12"), "{err}");
        let mut long = MAGIC.to_vec();
        long.extend_from_slice(&[0xff; 10]);
        long.push(0);
        let err = decode(&long).unwrap_err();
        assert!(
            err.contains("byte 8: an address difference longer than 64 bits"),
            "{err}"
        );
    }
}

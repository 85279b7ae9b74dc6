//! The IP carried by TIP and FUP packets, and its compression against RTIT_LAST_LIP.
//!
//! RTIT sends a 48-bit linear IP in 2, 4 or 6 bytes (§4.2.3, CNT field). The bytes not sent are
//! either the upper bytes of the last IP sent (RTIT_LAST_LIP, §3.3.7) or zeroes (the Zext bit);
//! table 18 of §4.2.3.1 says which. [`LastLip`] is that register as a decoder (or the unit model,
//! when encoding) keeps it, and [`IpPayload`] is the field exactly as transmitted, so that
//! decoding and encoding are exact inverses of each other.
//!
//! Rules that are easy to get wrong, all from the spec:
//! - every IP-carrying packet (TIP and every FUP) updates LAST_LIP with the *full* IP, even when
//!   the packet itself was compressed (§4.2.3.1);
//! - a RET compressed into a TNT bit sends no IP and so does not update LAST_LIP (§4.2.3.2);
//! - the hardware clears LAST_LIP at a PSB, but possibly up to 4 packets late (§3.3.9). A decoder
//!   that keeps its own copy across a PSB therefore stays right either way; one that starts cold
//!   at a PSB has no copy and must wait for an IP sent without match compression;
//! - the 48-bit IP is made canonical by sign-extending bit 47 (§3.3.6: LIP_SIGN_EXT).

/// Mask of the 48 bits of a linear IP that RTIT transmits.
pub const LIP_MASK: u64 = (1 << 48) - 1;

/// Sign-extends bit 47 of a 48-bit linear IP to the canonical 64-bit address.
#[inline]
pub const fn canonical(lip: u64) -> u64 {
    (((lip << 16) as i64) >> 16) as u64
}

/// How many low bytes of the IP a TIP or FUP packet carries: the CNT field of its header
/// (§4.2.3: `00` two bytes, `01` four, `10` six; `11` is reserved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpSize {
    /// CNT = 0: IP[15:0].
    Two,
    /// CNT = 1: IP[31:0].
    Four,
    /// CNT = 2: IP[47:0], nothing compressed.
    Six,
}

impl IpSize {
    /// The size for a CNT field value, or `None` for the reserved value 3.
    #[inline]
    pub const fn from_cnt(cnt: u8) -> Option<Self> {
        match cnt {
            0 => Some(Self::Two),
            1 => Some(Self::Four),
            2 => Some(Self::Six),
            _ => None,
        }
    }

    /// The CNT field value.
    #[inline]
    pub const fn cnt(self) -> u8 {
        match self {
            Self::Two => 0,
            Self::Four => 1,
            Self::Six => 2,
        }
    }

    /// Number of payload bytes.
    #[inline]
    pub const fn bytes(self) -> usize {
        match self {
            Self::Two => 2,
            Self::Four => 4,
            Self::Six => 6,
        }
    }

    /// Mask of the IP bits the payload carries.
    #[inline]
    pub const fn mask(self) -> u64 {
        match self {
            Self::Two => 0xffff,
            Self::Four => 0xffff_ffff,
            Self::Six => LIP_MASK,
        }
    }
}

/// The IP field of a TIP or FUP packet exactly as transmitted: size (CNT), the Zext bit and
/// the low IP bits carried. Expanding it to a full IP needs [`LastLip`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpPayload {
    /// How many bytes are sent (CNT).
    pub size: IpSize,
    /// Zext: the bytes not sent are zero rather than those of LAST_LIP.
    pub zext: bool,
    /// The IP bits sent; must fit `size` (checked by the encoder).
    pub bits: u64,
}

impl IpPayload {
    /// An uncompressed payload: all 48 bits, Zext clear (table 18, last row).
    pub const fn full(ip: u64) -> Self {
        Self {
            size: IpSize::Six,
            zext: false,
            bits: ip & LIP_MASK,
        }
    }

    /// Whether expanding this payload needs the previous IP (match compression).
    #[inline]
    pub const fn needs_last_lip(&self) -> bool {
        !self.zext && !matches!(self.size, IpSize::Six)
    }
}

/// A compressed IP arrived while no previous IP is known (after a cold start at a PSB, or at
/// the start of a trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("compressed IP ({bytes} bytes, no Zext) with no previous IP to expand it against")]
pub struct NoPreviousIp {
    /// The payload size of the offending packet.
    pub bytes: usize,
}

/// RTIT_LAST_LIP (§3.3.7): the full 48-bit IP of the last IP-carrying packet, or invalid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LastLip {
    lip: Option<u64>,
}

impl LastLip {
    /// An invalid register, as after reset or a cold start at a PSB.
    pub const fn new() -> Self {
        Self { lip: None }
    }

    /// The last IP as a canonical address, if valid.
    #[inline]
    pub fn get(&self) -> Option<u64> {
        self.lip.map(canonical)
    }

    /// Makes the register invalid (CMPRS_LIP_Valid = 0).
    #[inline]
    pub fn invalidate(&mut self) {
        self.lip = None;
    }

    /// Sets the register to an IP (only its 48 low bits count).
    #[inline]
    pub fn set(&mut self, ip: u64) {
        self.lip = Some(ip & LIP_MASK);
    }

    /// The full canonical IP a payload stands for, without changing the register.
    #[inline]
    pub fn expand(&self, payload: IpPayload) -> Result<u64, NoPreviousIp> {
        let mask = payload.size.mask();
        let low = payload.bits & mask;
        let high = if payload.zext || matches!(payload.size, IpSize::Six) {
            0
        } else {
            match self.lip {
                Some(last) => last & !mask & LIP_MASK,
                None => {
                    return Err(NoPreviousIp {
                        bytes: payload.size.bytes(),
                    })
                }
            }
        };
        Ok(canonical(high | low))
    }

    /// Expands a payload (see [`LastLip::expand`]) and updates the register with the result,
    /// as every TIP and FUP does (§4.2.3.1).
    #[inline]
    pub fn decompress(&mut self, payload: IpPayload) -> Result<u64, NoPreviousIp> {
        let ip = self.expand(payload)?;
        self.set(ip);
        Ok(ip)
    }

    /// The payload the hardware sends for `ip` given this register, per table 18: zero
    /// extension is preferred over a match (§4.2.3.1), the smallest matching size otherwise.
    pub fn choose(&self, ip: u64) -> IpPayload {
        let lip = ip & LIP_MASK;
        let high = lip >> 32; // LIP[47:32]
        let mid = (lip >> 16) & 0xffff; // LIP[31:16]
        let (match_high, match_mid) = match self.lip {
            Some(last) => (last >> 32 == high, (last >> 16) & 0xffff == mid),
            None => (false, false),
        };
        let (size, zext) = if high == 0 && mid == 0 {
            (IpSize::Two, true) // row 3
        } else if match_high && match_mid {
            (IpSize::Two, false) // rows 1 and 2
        } else if high == 0 {
            (IpSize::Four, true) // rows 5 and 6
        } else if match_high {
            (IpSize::Four, false) // row 4
        } else {
            (IpSize::Six, false) // row 7
        };
        IpPayload {
            size,
            zext,
            bits: lip & size.mask(),
        }
    }

    /// Chooses the payload for `ip` (see [`LastLip::choose`]) and updates the register.
    pub fn compress(&mut self, ip: u64) -> IpPayload {
        let payload = self.choose(ip);
        self.set(ip);
        payload
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last(ip: u64) -> LastLip {
        let mut l = LastLip::new();
        l.set(ip);
        l
    }

    /// One case per row of table 18: (last LIP, new LIP, expected CNT, expected Zext).
    #[test]
    fn every_row_of_table_18() {
        let rows: [(Option<u64>, u64, IpSize, bool); 9] = [
            // 1: match 47:32, match 31:16, 47:32 not zero.
            (Some(0x7f12_3456_0000), 0x7f12_3456_abcd, IpSize::Two, false),
            // 2: match both, 47:32 zero, 31:16 not zero.
            (Some(0x0000_0040_1000), 0x0000_0040_2345, IpSize::Two, false),
            // 3: 47:32 and 31:16 zero: zext preferred even though both match.
            (Some(0x0000_0000_1000), 0x0000_0000_2345, IpSize::Two, true),
            // 3 again with nothing to match against.
            (None, 0x0000_0000_2345, IpSize::Two, true),
            // 4: match 47:32 only, 47:32 not zero.
            (Some(0x7f12_3456_0000), 0x7f12_9999_abcd, IpSize::Four, false),
            // 5: 31:16 differs, 47:32 zero (and matches).
            (Some(0x0000_0040_1000), 0x0000_0050_2345, IpSize::Four, true),
            // 6: 47:32 differs, 47:32 zero now.
            (Some(0x7f12_0040_1000), 0x0000_0040_2345, IpSize::Four, true),
            // 7: 47:32 differs and is not zero.
            (Some(0x0000_0040_1000), 0x7f12_0040_2345, IpSize::Six, false),
            // 7 with no previous IP.
            (None, 0x7f12_0040_2345, IpSize::Six, false),
        ];
        for (i, (prev, ip, size, zext)) in rows.into_iter().enumerate() {
            let mut reg = prev.map_or_else(LastLip::new, last);
            let payload = reg.compress(ip);
            assert_eq!((payload.size, payload.zext), (size, zext), "row case {i}");
            assert_eq!(payload.bits, ip & size.mask(), "row case {i}");
            let mut dec = prev.map_or_else(LastLip::new, last);
            assert_eq!(dec.decompress(payload), Ok(ip), "row case {i}");
            assert_eq!(dec, reg, "row case {i}: both sides hold the full IP");
        }
    }

    #[test]
    fn bit_47_is_sign_extended() {
        let kernel = 0xffff_ffff_8100_1234_u64;
        let mut reg = LastLip::new();
        let payload = reg.compress(kernel);
        assert_eq!(payload, IpPayload::full(0xffff_8100_1234));
        let mut dec = LastLip::new();
        assert_eq!(dec.decompress(payload), Ok(kernel));
        // A two-byte update against a kernel LAST_LIP stays canonical.
        let two = IpPayload {
            size: IpSize::Two,
            zext: false,
            bits: 0x5678,
        };
        assert_eq!(dec.decompress(two), Ok(0xffff_ffff_8100_5678));
        assert_eq!(canonical(0x7fff_ffff_ffff), 0x7fff_ffff_ffff);
        assert_eq!(canonical(0x8000_0000_0000), 0xffff_8000_0000_0000);
    }

    #[test]
    fn compressed_ip_without_previous_is_an_error() {
        let mut dec = LastLip::new();
        for size in [IpSize::Two, IpSize::Four] {
            let p = IpPayload {
                size,
                zext: false,
                bits: 1,
            };
            assert_eq!(dec.decompress(p), Err(NoPreviousIp { bytes: size.bytes() }));
            assert_eq!(dec.get(), None, "a failed expansion leaves the register alone");
        }
        // Zext and full payloads need nothing.
        let zext = IpPayload {
            size: IpSize::Four,
            zext: true,
            bits: 0x0040_1000,
        };
        assert_eq!(dec.decompress(zext), Ok(0x40_1000));
    }

    #[test]
    fn six_bytes_with_zext_expands_like_six_bytes() {
        // Not a row of table 18, but the six bytes leave nothing to extend: accept it as sent.
        let p = IpPayload {
            size: IpSize::Six,
            zext: true,
            bits: 0x7f00_0000_1000,
        };
        assert_eq!(LastLip::new().expand(p), Ok(0x7f00_0000_1000));
    }
}

//! Vector and opmask registers by the names a recording's register maps use (the start
//! registers, truth samples, logged results): `xmmN` (16 bytes), `ymmN` (32), `zmmN` (64),
//! for N in 0–31, and `kN` (8 bytes) for N in 0–7, each a hexadecimal number.

/// A named vector or opmask register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// The low `bytes` bytes of vector register `index`.
    Vector {
        /// 0–31.
        index: usize,
        /// 16, 32 or 64.
        bytes: usize,
    },
    /// Opmask register `index` (0–7).
    Opmask(usize),
}

impl Named {
    /// The register a name means, if it is one of these.
    pub fn parse(name: &str) -> Option<Named> {
        let number = |prefix: &str, count: usize| {
            name.strip_prefix(prefix)
                .filter(|n| {
                    !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && !(n.len() > 1 && n.starts_with('0'))
                })
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&i| i < count)
        };
        for (prefix, bytes) in [("xmm", 16), ("ymm", 32), ("zmm", 64)] {
            if let Some(index) = number(prefix, 32) {
                return Some(Named::Vector { index, bytes });
            }
        }
        number("k", 8).map(Named::Opmask)
    }

    /// Its width in bytes.
    pub fn bytes(self) -> usize {
        match self {
            Named::Vector { bytes, .. } => bytes,
            Named::Opmask(_) => 8,
        }
    }

    /// A value of it, little-endian, from hexadecimal (`0x` optional, at most twice its width in
    /// digits); `None` if it is not such a number.
    pub fn value(self, hex: &str) -> Option<Vec<u8>> {
        let digits = hex.strip_prefix("0x").unwrap_or(hex);
        if digits.is_empty() || digits.len() > 2 * self.bytes() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut out = vec![0u8; self.bytes()];
        for (i, d) in digits.bytes().rev().enumerate() {
            let v = (d as char).to_digit(16)? as u8;
            out[i / 2] |= v << (4 * (i % 2));
        }
        Some(out)
    }
}

/// `bytes` (little-endian) as the hexadecimal a register map holds.
pub fn hex(bytes: &[u8]) -> String {
    let digits: String = bytes.iter().rev().map(|b| format!("{b:02x}")).collect();
    let trimmed = digits.trim_start_matches('0');
    format!("0x{}", if trimmed.is_empty() { "0" } else { trimmed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_round_trip() {
        assert_eq!(Named::parse("xmm3"), Some(Named::Vector { index: 3, bytes: 16 }));
        assert_eq!(Named::parse("zmm31"), Some(Named::Vector { index: 31, bytes: 64 }));
        assert_eq!(Named::parse("ymm16"), Some(Named::Vector { index: 16, bytes: 32 }));
        assert_eq!(Named::parse("k7"), Some(Named::Opmask(7)));
        for bad in ["k8", "zmm32", "xmm", "xmm-1", "rax", "kx", "ymm1h"] {
            assert_eq!(Named::parse(bad), None, "{bad}");
        }
        let z = Named::parse("zmm0").expect("zmm0");
        let mut bytes = vec![0u8; 64];
        bytes[0] = 0x01;
        bytes[63] = 0xab;
        let text = hex(&bytes);
        assert_eq!(text.len(), 2 + 128);
        assert_eq!(z.value(&text), Some(bytes));
        assert_eq!(Named::Opmask(1).value("0x1ff"), Some(vec![0xff, 1, 0, 0, 0, 0, 0, 0]));
        assert_eq!(
            Named::Opmask(1).value(&format!("0x1{}", "0".repeat(16))),
            None,
            "wider than 64 bits"
        );
        assert_eq!(hex(&[0, 0]), "0x0");
    }
}

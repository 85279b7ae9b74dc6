//! Bytes as hex digits and back: QEMU's gdbstub speaks them (register replies, host I/O file
//! names), and a plugin option carries a path so (QEMU's option splits at commas).

/// `bytes` as lower-case hex digits, two a byte.
pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex digits as bytes; `None` for an odd count or a non-digit.
pub fn decode(text: &str) -> Option<Vec<u8>> {
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
    fn bytes_round_trip_and_bad_digits_are_refused() {
        let bytes = b"/a dir, with commas=/\xff";
        assert_eq!(decode(&encode(bytes)).as_deref(), Some(&bytes[..]));
        assert_eq!(encode(&[0, 0xab]), "00ab");
        assert_eq!(decode("2f6"), None, "odd");
        assert_eq!(decode("zz"), None);
    }
}

//! Header bytes of figure 2 (§4.1), shared by the decoder and the encoder.
//!
//! ```text
//! 0xxxxxxx  TNT (leading 1 marks the count; 0x00 and 0x01 carry no bit)
//! 10eeezcc  FUP event eee (110 = TIP; 100, 101 reserved), z = Zext, cc = CNT (11 reserved)
//! 11000000  PSB (followed by 8 zero bytes)
//! 11000001  TraceSTOP
//! 1100001p  PIP, p = CR0.PG
//! 110001rr  MTC, rr = MTC range
//! 11001xxx  reserved
//! 1101aaaa  STS, aaaa = ACBR[5:2]
//! 111xxxxx  reserved
//! ```

/// The complete PSB packet: header 0xC0 and 8 zero bytes (§4.2.1, figure 3).
pub const PSB_BYTES: [u8; 9] = [0xc0, 0, 0, 0, 0, 0, 0, 0, 0];

/// Bit 7 clear: a TNT packet.
pub(crate) const TNT_MASK: u8 = 0x80;
/// Bits 7:6 = 10: a FUP or TIP.
pub(crate) const IP_PACKET_MASK: u8 = 0xc0;
pub(crate) const IP_PACKET: u8 = 0x80;
/// FUP event 110b: a TIP (§4.2.4).
pub(crate) const TIP_EVENT: u8 = 0b110;
pub(crate) const ZEXT_BIT: u8 = 0x04;

pub(crate) const PSB: u8 = 0xc0;
pub(crate) const TRACE_STOP: u8 = 0xc1;
/// PIP: 0xC2 | CR0.PG.
pub(crate) const PIP: u8 = 0xc2;
/// MTC: 0xC4 | range.
pub(crate) const MTC: u8 = 0xc4;
/// STS: 0xD0 | ACBR[5:2].
pub(crate) const STS: u8 = 0xd0;

/// The header of a FUP/TIP with event `event`, Zext and CNT.
#[inline]
pub(crate) const fn ip_header(event: u8, zext: bool, cnt: u8) -> u8 {
    IP_PACKET | (event << 3) | if zext { ZEXT_BIT } else { 0 } | cnt
}

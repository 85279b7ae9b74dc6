//! The packet encoder: the exact inverse of the decoder. The RTIT unit model writes its output
//! with it, and tests build traces with known content from it.
//!
//! Encoding is context-free: IP payloads are already compressed ([`crate::ip::LastLip::compress`]
//! chooses the compression) and cycle-count packets appear explicitly where Cycle_Acc puts them
//! ([`Packet::carries_cycle_count`]).

use super::header::{ip_header, MTC, PIP, PSB_BYTES, STS, TIP_EVENT, TRACE_STOP};
use super::{EncodeError, Packet};
use crate::ip::IpPayload;

/// Appends the bytes of `packet` to `out`. Fails, writing nothing, if a field is out of range.
pub fn encode(packet: &Packet, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    match *packet {
        Packet::Tnt(tnt) => out.push(tnt.header()),
        Packet::Tip(p) => encode_ip(TIP_EVENT, "tip", p, out)?,
        Packet::Fup(event, p) => encode_ip(event.code(), event.name(), p, out)?,
        Packet::Psb => out.extend_from_slice(&PSB_BYTES),
        Packet::TraceStop => out.push(TRACE_STOP),
        Packet::Pip(pip) => {
            check("pip", "cr3", pip.cr3, (1 << 40) - 1)?;
            out.push(PIP | u8::from(pip.pg));
            out.extend_from_slice(&pip.cr3.to_le_bytes()[..5]);
        }
        Packet::Mtc(mtc) => {
            check("mtc", "rng", mtc.rng.into(), 3)?;
            out.extend_from_slice(&[MTC | mtc.rng, mtc.tsc]);
        }
        Packet::Sts(sts) => {
            check("sts", "acbr", sts.acbr.into(), 63)?;
            check("sts", "ecbr", sts.ecbr.into(), 63)?;
            check("sts", "btc", sts.btc, (1 << 40) - 1)?;
            // Figure 12: ACBR[5:2] in the header, ACBR[1:0] above ECBR in byte 1.
            out.push(STS | (sts.acbr >> 2));
            out.push(((sts.acbr & 3) << 6) | sts.ecbr);
            out.extend_from_slice(&sts.btc.to_le_bytes()[..5]);
        }
        Packet::Cyc(cyc) => {
            // Figure 13: CNTP[5:0] above CCNT, then CNTP[13:6], then CNTP[21:14].
            let v = cyc.value();
            let bytes = [((v << 2) as u8) | cyc.encoded_len(), (v >> 6) as u8, (v >> 14) as u8];
            out.extend_from_slice(&bytes[..usize::from(cyc.encoded_len())]);
        }
    }
    Ok(())
}

/// Encodes a sequence of packets into a new buffer.
pub fn encode_all<'a>(packets: impl IntoIterator<Item = &'a Packet>) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    for p in packets {
        encode(p, &mut out)?;
    }
    Ok(out)
}

fn encode_ip(event: u8, name: &'static str, p: IpPayload, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    check(name, "ip", p.bits, p.size.mask())?;
    out.push(ip_header(event, p.zext, p.size.cnt()));
    out.extend_from_slice(&p.bits.to_le_bytes()[..p.size.bytes()]);
    Ok(())
}

fn check(packet: &'static str, field: &'static str, value: u64, max: u64) -> Result<(), EncodeError> {
    if value > max {
        Err(EncodeError {
            packet,
            field,
            value,
            max,
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::IpSize;
    use crate::packet::{CycleCount, FupEvent, Mtc, Pip, Sts, Tnt};

    fn bytes(p: Packet) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&p, &mut out).expect("encodable");
        out
    }

    /// Byte layouts straight from figures 2–13.
    #[test]
    fn layouts_of_the_figures() {
        let tnt = Tnt::from_bits(&[true, true, false, true, false, false]).expect("6 bits");
        assert_eq!(bytes(Packet::Tnt(tnt)), [0b0111_0100]);
        let p = IpPayload {
            size: IpSize::Four,
            zext: true,
            bits: 0x0040_1122,
        };
        assert_eq!(bytes(Packet::Tip(p)), [0xb5, 0x22, 0x11, 0x40, 0x00]);
        assert_eq!(
            bytes(Packet::Fup(FupEvent::FarTransfer, IpPayload::full(0x7f01_0203_0405))),
            [0xba, 0x05, 0x04, 0x03, 0x02, 0x01, 0x7f]
        );
        let two = IpPayload {
            size: IpSize::Two,
            zext: false,
            bits: 0xbeef,
        };
        assert_eq!(bytes(Packet::Fup(FupEvent::PacketGenEnable, two)), [0x80, 0xef, 0xbe]);
        assert_eq!(bytes(Packet::Fup(FupEvent::PacketGenDisable, two)), [0x88, 0xef, 0xbe]);
        assert_eq!(bytes(Packet::Fup(FupEvent::BufferOverflow, two)), [0x90, 0xef, 0xbe]);
        assert_eq!(
            bytes(Packet::Fup(FupEvent::PeriodicCycleCount, two)),
            [0x98, 0xef, 0xbe]
        );
        assert_eq!(bytes(Packet::Psb), PSB_BYTES);
        assert_eq!(bytes(Packet::TraceStop), [0xc1]);
        let pip = Pip {
            cr3: 0x12_3456_7000,
            pg: true,
        };
        assert_eq!(bytes(Packet::Pip(pip)), [0xc3, 0x00, 0x70, 0x56, 0x34, 0x12]);
        assert_eq!(bytes(Packet::Mtc(Mtc { rng: 2, tsc: 0x9a })), [0xc6, 0x9a]);
        let sts = Sts {
            acbr: 0b10_1101,
            ecbr: 0b01_0011,
            btc: 0xab_cdef_0123,
        };
        assert_eq!(
            bytes(Packet::Sts(sts)),
            [0xdb, 0b0101_0011, 0x23, 0x01, 0xef, 0xcd, 0xab]
        );
        let cyc = |v| Packet::Cyc(CycleCount::new(v).expect("22 bits"));
        assert_eq!(bytes(cyc(5)), [(5 << 2) | 1]);
        assert_eq!(bytes(cyc(0x1234)), [((0x34 << 2) as u8) | 2, 0x48]);
        assert_eq!(bytes(cyc(0x3f_ffff)), [0xff, 0xff, 0xff]);
    }

    #[test]
    fn out_of_range_fields_are_refused_and_write_nothing() {
        let mut out = vec![0xaa];
        let bad = [
            Packet::Pip(Pip {
                cr3: 1 << 40,
                pg: false,
            }),
            Packet::Mtc(Mtc { rng: 4, tsc: 0 }),
            Packet::Sts(Sts {
                acbr: 64,
                ecbr: 0,
                btc: 0,
            }),
            Packet::Sts(Sts {
                acbr: 0,
                ecbr: 64,
                btc: 0,
            }),
            Packet::Sts(Sts {
                acbr: 0,
                ecbr: 0,
                btc: 1 << 40,
            }),
            Packet::Tip(IpPayload {
                size: IpSize::Two,
                zext: false,
                bits: 0x1_0000,
            }),
        ];
        for p in bad {
            let err = encode(&p, &mut out).expect_err("out of range");
            assert_eq!(err.packet, p.name());
            assert_eq!(out, [0xaa], "{err}");
        }
    }
}

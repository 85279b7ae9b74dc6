//! Decoder tests on hand-encoded bytes from figures 2–13.

use super::*;
use crate::packet::{encode, encode_all};

const PLAIN: DecoderConfig = DecoderConfig { cycle_accurate: false };
const CYC: DecoderConfig = DecoderConfig { cycle_accurate: true };

fn decode(bytes: &[u8], config: DecoderConfig) -> Vec<Result<Decoded, DecodeError>> {
    PacketDecoder::new(bytes, config).collect()
}

fn ok(bytes: &[u8], config: DecoderConfig) -> Vec<Decoded> {
    decode(bytes, config)
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("unexpected error: {e}")))
        .collect()
}

#[test]
fn every_packet_type_from_its_figure() {
    let bytes = [
        0xc0, 0, 0, 0, 0, 0, 0, 0, 0, // PSB
        0x82, 0x34, 0x12, 0x40, 0x00, 0x00, 0x00, // FUP.PGE, 6 bytes: 0x401234
        0x05, // TNT 2 bits: N T
        0x7e, // TNT 6 bits: T T T T T N
        0xb0, 0x78, 0x56, // TIP, 2 bytes against LAST_LIP: 0x405678
        0xbd, 0x00, 0x10, 0x50, 0x00, // FUP.FAR, 4 bytes zext: 0x501000
        0xb4, 0x00, 0x20, // TIP, 2 bytes zext: 0x2000
        0x91, 0x00, 0x30, 0x40, 0x00, // FUP.BuffOvf, 4 bytes: 0x403000
        0x98, 0x10, 0x30, // FUP.PCC, 2 bytes: 0x403010
        0xc3, 0x00, 0x70, 0x56, 0x34, 0x12, // PIP: CR3 0x1234567000, PG
        0xc5, 0xab, // MTC: range 1, TSC 0xab
        0xdb, 0x53, 0x23, 0x01, 0xef, 0xcd, 0xab, // STS
        0x88, 0x99, 0x30, // FUP.PGD, 2 bytes: 0x403099
        0xc1, // TraceSTOP
    ];
    let got = ok(&bytes, PLAIN);
    let summary: Vec<(usize, &str, Option<u64>)> = got.iter().map(|d| (d.offset, d.packet.name(), d.ip)).collect();
    assert_eq!(
        summary,
        [
            (0, "psb", None),
            (9, "fup.pge", Some(0x40_1234)),
            (16, "tnt", None),
            (17, "tnt", None),
            (18, "tip", Some(0x40_5678)),
            (21, "fup.far", Some(0x50_1000)),
            (26, "tip", Some(0x2000)),
            (29, "fup.ovf", Some(0x40_3000)),
            (34, "fup.pcc", Some(0x40_3010)),
            (37, "pip", None),
            (43, "mtc", None),
            (45, "sts", None),
            (52, "fup.pgd", Some(0x40_3099)),
            (55, "stop", None),
        ]
    );
    let Packet::Tnt(t) = got[2].packet else { panic!("tnt") };
    assert_eq!(t.iter().collect::<Vec<_>>(), [false, true]);
    let Packet::Tnt(t) = got[3].packet else { panic!("tnt") };
    assert_eq!(t.iter().collect::<Vec<_>>(), [true, true, true, true, true, false]);
    assert_eq!(
        got[9].packet,
        Packet::Pip(Pip {
            cr3: 0x12_3456_7000,
            pg: true
        })
    );
    assert_eq!(got[10].packet, Packet::Mtc(Mtc { rng: 1, tsc: 0xab }));
    assert_eq!(
        got[11].packet,
        Packet::Sts(Sts {
            acbr: 0b10_1101,
            ecbr: 0b01_0011,
            btc: 0xab_cdef_0123
        })
    );
    // Decoding and encoding are inverses on this stream.
    let packets: Vec<Packet> = got.iter().map(|d| d.packet).collect();
    assert_eq!(encode_all(&packets).expect("encodable"), bytes);
}

#[test]
fn cycle_counts_follow_exactly_the_packets_of_4_2_15() {
    let bytes = [
        0xc0, 0, 0, 0, 0, 0, 0, 0, 0, // PSB: no CYC
        0x85, 0x00, 0x10, 0x40, 0x00, 0x05, // FUP.PGE + 1-byte CYC (1)
        0x23, // partial TNT: no CYC
        0x40, 0xd2, 0x48, // full TNT + 2-byte CYC 0x1234
        0xb0, 0x00, 0x20, 0xff, 0xff, 0xff, // TIP + 3-byte CYC 0x3fffff
        0xc2, 0, 0, 0, 0, 0, 0x01, // PIP + CYC 0
        0xc4, 0x07, 0x09, // MTC + CYC 2
        0xd0, 0x00, 0, 0, 0, 0, 0, 0x0d, // STS + CYC 3
        0xc1, // TraceSTOP: no CYC
        0x02, // TNT
    ];
    let got = ok(&bytes, CYC);
    let names: Vec<&str> = got.iter().map(|d| d.packet.name()).collect();
    assert_eq!(
        names,
        [
            "psb", "fup.pge", "cyc", "tnt", "tnt", "cyc", "tip", "cyc", "pip", "cyc", "mtc", "cyc", "sts", "cyc",
            "stop", "tnt"
        ]
    );
    let cycles: Vec<(usize, u32)> = got
        .iter()
        .filter_map(|d| match d.packet {
            Packet::Cyc(c) => Some((d.offset, c.value())),
            _ => None,
        })
        .collect();
    assert_eq!(
        cycles,
        [(14, 1), (17, 0x1234), (22, 0x3f_ffff), (31, 0), (34, 2), (42, 3)]
    );
    // The same bytes without Cycle_Acc go wrong at the first CYC byte (0x05 is a TNT here,
    // and the error shows up as a misparse further on), which is why the config matters.
    assert_ne!(
        decode(&bytes, PLAIN)
            .iter()
            .map(|r| r.as_ref().map(|d| d.offset).ok())
            .collect::<Vec<_>>(),
        got.iter().map(|d| Some(d.offset)).collect::<Vec<_>>()
    );
}

#[test]
fn cycle_accurate_config_follows_rtit_ctl() {
    assert_eq!(DecoderConfig::from_rtit_ctl(0x2802), CYC);
    assert_eq!(DecoderConfig::from_rtit_ctl(0x2809), PLAIN);
}

#[test]
fn reserved_headers_are_errors_and_decoding_resumes_at_the_next_psb() {
    let reserved = (0xa0..=0xaf).chain(0xc8..=0xcf).chain(0xe0..=0xff);
    for header in reserved {
        // TNT, reserved header, junk that looks like packets, PSB, TNT.
        let mut bytes = vec![0x03, header, 0x02, 0x03, 0xc1];
        bytes.extend_from_slice(&PSB_BYTES);
        bytes.push(0x05);
        let got = decode(&bytes, PLAIN);
        assert_eq!(got.len(), 4, "{header:#x}: {got:?}");
        assert_eq!(
            got[1],
            Err(DecodeError {
                offset: 1,
                kind: DecodeErrorKind::ReservedHeader(header)
            })
        );
        assert_eq!(got[2].as_ref().map(|d| (d.offset, d.packet)), Ok((5, Packet::Psb)));
        assert_eq!(got[3].as_ref().map(|d| d.offset), Ok(14));
    }
}

#[test]
fn malformed_packets_name_what_is_wrong() {
    let cases: [(&[u8], DecoderConfig, DecodeErrorKind); 6] = [
        (&[0x00], PLAIN, DecodeErrorKind::EmptyTnt(0x00)),
        (&[0x01], PLAIN, DecodeErrorKind::EmptyTnt(0x01)),
        (
            &[0xb3, 1, 2, 3, 4, 5, 6, 7],
            PLAIN,
            DecodeErrorKind::ReservedIpSize {
                packet: PacketKind::Tip,
                header: 0xb3,
            },
        ),
        (
            &[0x8f, 1, 2, 3, 4, 5, 6, 7],
            PLAIN,
            DecodeErrorKind::ReservedIpSize {
                packet: PacketKind::Fup(FupEvent::PacketGenDisable),
                header: 0x8f,
            },
        ),
        (
            &[0xc0, 0, 0, 0, 0, 0x42, 0, 0, 0],
            PLAIN,
            DecodeErrorKind::MalformedPsb { index: 5, value: 0x42 },
        ),
        (&[0xc1, 0x40, 0x00], CYC, DecodeErrorKind::ReservedCycleLength(0x00)),
    ];
    for (bytes, config, kind) in cases {
        let errors: Vec<DecodeError> = decode(bytes, config).into_iter().filter_map(Result::err).collect();
        let offset = bytes.len() - if config.cycle_accurate { 1 } else { bytes.len() };
        assert_eq!(errors, [DecodeError { offset, kind }], "{bytes:x?}");
    }
    let e = DecodeError {
        offset: 0x1234,
        kind: DecodeErrorKind::ReservedHeader(0xc9),
    };
    assert_eq!(e.to_string(), "trace offset 0x1234: reserved packet header 0xc9");
}

/// Every packet type in both configs, cut at every byte: one truncation error at the packet's
/// offset, then nothing (there is no PSB to resume at).
#[test]
fn truncation_at_every_byte_of_every_packet() {
    let packets = [
        Packet::Psb,
        Packet::Tip(IpPayload::full(0x7f00_1234_5678)),
        Packet::Tip(IpPayload {
            size: IpSize::Four,
            zext: true,
            bits: 0x40_1234,
        }),
        Packet::Fup(FupEvent::PacketGenEnable, IpPayload::full(0x40_1000)),
        Packet::Fup(FupEvent::FarTransfer, IpPayload::full(0x40_1000)),
        Packet::Fup(
            FupEvent::BufferOverflow,
            IpPayload {
                size: IpSize::Two,
                zext: true,
                bits: 0x10,
            },
        ),
        Packet::Pip(Pip {
            cr3: 0xff_ffff_ffff,
            pg: false,
        }),
        Packet::Mtc(Mtc { rng: 3, tsc: 0 }),
        Packet::Sts(Sts {
            acbr: 63,
            ecbr: 1,
            btc: 0,
        }),
    ];
    let prefix = [0x02u8]; // a TNT first, so the error offset is not 0
    for config in [PLAIN, CYC] {
        for p in packets {
            let mut whole = prefix.to_vec();
            encode(&p, &mut whole).expect("encodable");
            if config.cycle_accurate && p.carries_cycle_count() {
                let c = Packet::Cyc(CycleCount::new(0x3f_0000).expect("22 bits"));
                encode(&c, &mut whole).expect("encodable");
            }
            assert!(decode(&whole, config).iter().all(Result::is_ok), "{p:?} whole decodes");
            for cut in prefix.len() + 1..whole.len() {
                let got = decode(&whole[..cut], config);
                let errors: Vec<&DecodeError> = got.iter().filter_map(|r| r.as_ref().err()).collect();
                assert_eq!(errors.len(), 1, "{p:?} cut at {cut}: {got:?}");
                // Cut after the packet itself: the cycle count that is due is truncated.
                let body_end = prefix.len() + p.encoded_len();
                let at = if cut >= body_end { body_end } else { prefix.len() };
                assert_eq!(errors[0].offset, at, "{p:?} cut at {cut}");
                assert!(
                    matches!(errors[0].kind, DecodeErrorKind::Truncated { available, .. } if usize::from(available) == cut - at),
                    "{p:?} cut at {cut}: {}",
                    errors[0]
                );
            }
        }
    }
}

#[test]
fn compressed_ip_with_no_previous_ip() {
    // Trace start: nothing to expand against.
    let got = decode(&[0x80, 0x34, 0x12], PLAIN);
    assert!(
        matches!(
            &got[..],
            [Err(DecodeError {
                offset: 0,
                kind: DecodeErrorKind::NoPreviousIp {
                    packet: PacketKind::Fup(FupEvent::PacketGenEnable),
                    ..
                }
            })]
        ),
        "{got:?}"
    );
    // Zext needs nothing.
    let got = ok(&[0x84, 0x34, 0x12], PLAIN);
    assert_eq!(got[0].ip, Some(0x1234));
}

/// §3.3.7/§3.3.9: the hardware clears LAST_LIP at a PSB, possibly up to 4 packets late. A
/// decoder that keeps its copy across the PSB expands both kinds of stream correctly.
#[test]
fn last_lip_survives_a_psb_in_stream() {
    let mut late = vec![0xb2, 0x00, 0x10, 0x40, 0x00, 0x00, 0x7f]; // TIP 0x7f0000401000
    late.extend_from_slice(&PSB_BYTES);
    late.extend_from_slice(&[0xb0, 0x44, 0x33]); // compressed against the old LAST_LIP
    let got = ok(&late, PLAIN);
    assert_eq!(got[2].ip, Some(0x7f00_0040_3344));

    let mut cleared = vec![0xb2, 0x00, 0x10, 0x40, 0x00, 0x00, 0x7f];
    cleared.extend_from_slice(&PSB_BYTES);
    cleared.extend_from_slice(&[0xb2, 0x44, 0x33, 0x40, 0x00, 0x00, 0x7f]); // sent in full
    cleared.extend_from_slice(&[0xb1, 0x00, 0x00, 0x41, 0x00]); // then compressed against it
    let got = ok(&cleared, PLAIN);
    assert_eq!(got[2].ip, Some(0x7f00_0040_3344));
    assert_eq!(got[3].ip, Some(0x7f00_0041_0000));
}

/// Starting cold at a PSB (sync_forward, or resuming after an error), a compressed IP is an
/// error until an IP arrives without match compression.
#[test]
fn cold_start_at_a_psb_waits_for_an_uncompressed_ip() {
    let mut bytes = vec![0xb2, 0x00, 0x10, 0x40, 0x00, 0x00, 0x7f, 0x03];
    bytes.extend_from_slice(&PSB_BYTES);
    bytes.extend_from_slice(&[0xb0, 0x44, 0x33]); // compressed
    bytes.extend_from_slice(&PSB_BYTES);
    bytes.extend_from_slice(&[0xb4, 0x44, 0x33, 0xb0, 0x55, 0x66]); // zext, then compressed
    let mut dec = PacketDecoder::new(&bytes, PLAIN);
    dec.next();
    assert_eq!(dec.offset(), 7);
    assert_eq!(dec.sync_forward(), Some(8));
    assert_eq!(dec.last_lip().get(), None);
    assert_eq!(dec.next().map(|r| r.map(|d| d.packet)), Some(Ok(Packet::Psb)));
    let err = dec.next().and_then(Result::err).expect("no previous IP");
    assert_eq!(err.offset, 17);
    // Resumes at the next PSB, cold again.
    let rest: Vec<Decoded> = dec.map(|r| r.expect("decodes")).collect();
    assert_eq!(rest.iter().map(|d| d.offset).collect::<Vec<_>>(), [20, 29, 32]);
    assert_eq!(rest[1].ip, Some(0x3344));
    assert_eq!(rest[2].ip, Some(0x6655));
}

#[test]
fn sync_forward_finds_a_psb_after_junk_and_skips_false_starts() {
    // A 0xC0 inside a payload followed by too few zeroes is not a PSB.
    let mut bytes = vec![0xc0, 0, 0, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0xc0];
    bytes.extend_from_slice(&PSB_BYTES);
    bytes.push(0x02);
    let mut dec = PacketDecoder::new(&bytes, PLAIN);
    assert_eq!(dec.sync_forward(), Some(12));
    assert_eq!(dec.sync_forward(), Some(12), "at a PSB already");
    assert_eq!(dec.by_ref().count(), 2);
    assert_eq!(dec.sync_forward(), None);
    assert_eq!(dec.offset(), bytes.len());
}

#[test]
fn empty_trace_decodes_to_nothing() {
    assert!(decode(&[], PLAIN).is_empty());
    assert!(decode(&[], CYC).is_empty());
}

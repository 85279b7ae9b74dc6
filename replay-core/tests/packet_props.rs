//! Property tests of the packet layer: decoding inverts encoding for random packet sequences,
//! IP compression round-trips, and random bytes never make the decoder panic or report a
//! packet that is not in the bytes.

use proptest::prelude::*;
use rtit_replay_core::ip::{canonical, IpPayload, IpSize, LastLip};
use rtit_replay_core::packet::{
    encode_all, CycleCount, DecodeError, Decoded, DecoderConfig, FupEvent, Mtc, Packet, PacketDecoder, Pip, Sts, Tnt,
    PSB_BYTES,
};

fn ip_payload() -> impl Strategy<Value = IpPayload> {
    (0u8..3, any::<bool>(), any::<u64>()).prop_map(|(cnt, zext, bits)| {
        let size = IpSize::from_cnt(cnt).expect("0-2");
        IpPayload {
            size,
            zext,
            bits: bits & size.mask(),
        }
    })
}

fn fup_event() -> impl Strategy<Value = FupEvent> {
    prop_oneof![
        Just(FupEvent::PacketGenEnable),
        Just(FupEvent::PacketGenDisable),
        Just(FupEvent::BufferOverflow),
        Just(FupEvent::PeriodicCycleCount),
        Just(FupEvent::FarTransfer),
    ]
}

/// Any packet but a cycle count (those go where Cycle_Acc puts them).
fn packet() -> impl Strategy<Value = Packet> {
    prop_oneof![
        6 => (2u8..0x80).prop_map(|h| Packet::Tnt(Tnt::from_header(h).expect("TNT header"))),
        2 => ip_payload().prop_map(Packet::Tip),
        2 => (fup_event(), ip_payload()).prop_map(|(e, p)| Packet::Fup(e, p)),
        1 => Just(Packet::Psb),
        1 => Just(Packet::TraceStop),
        1 => (0u64..1 << 40, any::<bool>()).prop_map(|(cr3, pg)| Packet::Pip(Pip { cr3, pg })),
        1 => (0u8..4, any::<u8>()).prop_map(|(rng, tsc)| Packet::Mtc(Mtc { rng, tsc })),
        1 => (0u8..64, 0u8..64, 0u64..1 << 40).prop_map(|(acbr, ecbr, btc)| Packet::Sts(Sts { acbr, ecbr, btc })),
    ]
}

fn cycle_count() -> impl Strategy<Value = CycleCount> {
    (1u8..4, any::<u32>()).prop_map(|(len, v)| {
        let bits = 6 + 8 * (u32::from(len) - 1);
        CycleCount::with_len(v & ((1 << bits) - 1), len).expect("fits")
    })
}

/// A packet sequence a decoder can follow: the first IP payload is not match-compressed (there
/// is nothing to match against yet), and with Cycle_Acc a cycle count follows each packet that
/// carries one.
fn stream(cycle_accurate: bool) -> impl Strategy<Value = Vec<Packet>> {
    prop::collection::vec((packet(), cycle_count()), 0..64).prop_map(move |items| {
        let mut seen_ip = false;
        let mut out = Vec::new();
        for (mut p, cyc) in items {
            if let Packet::Tip(payload) | Packet::Fup(_, payload) = &mut p {
                if !seen_ip && payload.needs_last_lip() {
                    payload.zext = true;
                }
                seen_ip = true;
            }
            out.push(p);
            if cycle_accurate && p.carries_cycle_count() {
                out.push(Packet::Cyc(cyc));
            }
        }
        out
    })
}

fn config_and_stream() -> impl Strategy<Value = (DecoderConfig, Vec<Packet>)> {
    any::<bool>().prop_flat_map(|cycle_accurate| (Just(DecoderConfig { cycle_accurate }), stream(cycle_accurate)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decode_inverts_encode((config, packets) in config_and_stream()) {
        let bytes = encode_all(&packets).expect("valid packets");
        let decoded: Vec<Decoded> = PacketDecoder::new(&bytes, config)
            .collect::<Result<_, DecodeError>>()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let got: Vec<Packet> = decoded.iter().map(|d| d.packet).collect();
        prop_assert_eq!(&got, &packets);
        let mut offset = 0;
        for d in &decoded {
            prop_assert_eq!(d.offset, offset);
            prop_assert_eq!(d.ip.is_some(), d.packet.ip_payload().is_some());
            offset += d.packet.encoded_len();
        }
        prop_assert_eq!(offset, bytes.len());
    }

    /// Any sequence of IPs, compressed by the encoder side of LAST_LIP and sent as TIPs with
    /// PSBs in between, decodes to the same canonical IPs.
    #[test]
    fn ip_compression_round_trips(
        ips in prop::collection::vec(
            prop_oneof![
                any::<u64>(),
                (0u64..0x10_0000).prop_map(|o| 0x5555_5555_4000 + o),
                (0u64..0x1000).prop_map(|o| 0xffff_ffff_8100_0000 + o),
                0u64..0x1_0000,
            ],
            1..100,
        ),
        psb_every in 1usize..20,
    ) {
        let mut lip = LastLip::new();
        let mut packets = Vec::new();
        for (i, &ip) in ips.iter().enumerate() {
            if i % psb_every == 0 {
                packets.push(Packet::Psb);
            }
            packets.push(Packet::Tip(lip.compress(ip)));
        }
        let bytes = encode_all(&packets).expect("valid packets");
        let got: Vec<u64> = PacketDecoder::new(&bytes, DecoderConfig::default())
            .filter_map(|r| r.expect("decodes").ip)
            .collect();
        let want: Vec<u64> = ips.iter().map(|&ip| canonical(ip & ((1 << 48) - 1))).collect();
        prop_assert_eq!(got, want);
    }

    /// Random bytes (with PSBs spliced in so resynchronisation is exercised): no panic, offsets
    /// increase, every packet reported re-encodes to exactly the bytes at its offset.
    #[test]
    fn random_bytes_never_panic_nor_invent_packets(
        chunks in prop::collection::vec(
            prop_oneof![
                4 => prop::collection::vec(any::<u8>(), 0..64),
                1 => Just(PSB_BYTES.to_vec()),
            ],
            0..16,
        ),
        cycle_accurate in any::<bool>(),
    ) {
        let bytes: Vec<u8> = chunks.concat();
        let config = DecoderConfig { cycle_accurate };
        let mut last_end = 0;
        let mut items = 0;
        for item in PacketDecoder::new(&bytes, config) {
            items += 1;
            prop_assert!(items <= bytes.len() + 1, "more items than bytes");
            match item {
                Ok(d) => {
                    prop_assert!(d.offset >= last_end, "offset {} before {}", d.offset, last_end);
                    let end = d.offset + d.packet.encoded_len();
                    let encoded = encode_all([&d.packet]).expect("decoded packets encode");
                    prop_assert_eq!(&bytes[d.offset..end], &encoded[..]);
                    last_end = end;
                }
                Err(e) => {
                    prop_assert!(e.offset >= last_end && e.offset <= bytes.len(), "{}", e);
                    last_end = e.offset + 1;
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// The flow decoder's fast paths (`next_tnt`, `next_tip`) take a packet only where `next`
    /// would give that very packet, and leave the decoder untouched otherwise: a decoder that
    /// tries them first at every step follows one that only calls `next`, item by item, on
    /// valid streams, random bytes, lost stretches and both packet formats.
    #[test]
    fn fast_paths_take_exactly_what_next_takes(
        (config, packets) in config_and_stream(),
        junk in prop::collection::vec(
            prop_oneof![
                4 => prop::collection::vec(any::<u8>(), 0..24),
                1 => Just(PSB_BYTES.to_vec()),
            ],
            0..6,
        ),
        gap_at in prop::collection::vec(any::<prop::sample::Index>(), 0..3),
    ) {
        let mut bytes = encode_all(&packets).expect("valid packets");
        bytes.extend(junk.concat());
        bytes.extend(encode_all(&packets).expect("valid packets"));
        let mut gaps: Vec<(usize, Option<u64>)> =
            gap_at.iter().map(|i| (i.index(bytes.len() + 1), Some(7))).collect();
        gaps.sort_unstable();
        gaps.dedup();
        let mut reference = PacketDecoder::new(&bytes, config).with_gaps(&gaps);
        let mut fast = PacketDecoder::new(&bytes, config).with_gaps(&gaps);
        loop {
            let want = reference.next();
            let got = if let Some((offset, tnt)) = fast.next_tnt() {
                Some(Ok(Decoded { offset, packet: Packet::Tnt(tnt), ip: None }))
            } else if let Some((offset, payload, ip)) = fast.next_tip() {
                Some(Ok(Decoded { offset, packet: Packet::Tip(payload), ip: Some(ip) }))
            } else {
                fast.next()
            };
            prop_assert_eq!(&got, &want);
            prop_assert!(fast.same_state(&reference));
            prop_assert_eq!(fast.last_lip(), reference.last_lip());
            if want.is_none() {
                break;
            }
        }
    }
}

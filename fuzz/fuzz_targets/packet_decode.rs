//! Fuzzes the packet decoder in both formats: it must never panic, offsets must increase,
//! and every packet it reports must re-encode to exactly the bytes at its offset.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rtit_replay_core::packet::{encode, DecoderConfig, PacketDecoder};

fuzz_target!(|data: &[u8]| {
    for cycle_accurate in [false, true] {
        let mut next_free = 0;
        let mut bytes = Vec::new();
        for item in PacketDecoder::new(data, DecoderConfig { cycle_accurate }) {
            match item {
                Ok(d) => {
                    assert!(d.offset >= next_free, "packet at {} overlaps", d.offset);
                    bytes.clear();
                    encode(&d.packet, &mut bytes).expect("a decoded packet encodes");
                    assert_eq!(&data[d.offset..d.offset + bytes.len()], &bytes[..]);
                    next_free = d.offset + bytes.len();
                }
                Err(e) => {
                    assert!(e.offset >= next_free && e.offset <= data.len());
                    next_free = e.offset + 1;
                }
            }
        }
    }
});

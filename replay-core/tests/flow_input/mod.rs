//! One flow-decoder input as the fuzz target (`fuzz/fuzz_targets/flow_decode.rs`) and the
//! regression test (`flow_regressions.rs`) take it: trace bytes against a small fixed image
//! (tests/programs/guarded_spin.S: a loop whose never-taken branch guards `for (;;);`, a
//! call, returns; then an indirect jump and call) plus code the input supplies, with or
//! without an end of trace. The decoder must not panic, its events must lie inside the trace
//! and in order, and the history must stay within the bound the decoder documents: at most
//! three times the images' blocks per packet or TNT bit (so within (8 × trace bytes + 2) × 3 ×
//! code bytes), plus the end's count.
//!
//! Input: `[flags] [tnt_buff count_lo count_hi if flags & 1] [code_len] [code...] [trace...]`.

use rtit_replay_core::flow::{FlowConfig, FlowDecoder, FlowItem, TraceEnd};
use rtit_replay_core::image::{AddressSpace, Image};
use rtit_replay_core::packet::{DecoderConfig, Tnt};

/// tests/programs/guarded_spin.S at 0x401000, then `jmp rax; call rax; ret`.
const FIXED: [u8; 54] = [
    0xb9, 0x28, 0x00, 0x00, 0x00, 0x31, 0xc0, 0x81, 0xf9, 0xe8, 0x03, 0x00, 0x00, 0x74, 0x12, 0xe8, 0x0f, 0x00, 0x00,
    0x00, 0xff, 0xc9, 0x75, 0xef, 0xb8, 0x3c, 0x00, 0x00, 0x00, 0x31, 0xff, 0x0f, 0x05, 0xeb, 0xfe, 0xf7, 0xc1, 0x01,
    0x00, 0x00, 0x00, 0x75, 0x03, 0x01, 0xc8, 0xc3, 0x29, 0xc8, 0xc3, 0xff, 0xe0, 0xff, 0xd0, 0xc3,
];

/// Decodes one input and checks the decoder's promises; panics if one is broken.
pub fn check(data: &[u8]) {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let mut end = None;
    if flags & 1 != 0 {
        let Some((head, tail)) = rest.split_first_chunk::<3>() else {
            return;
        };
        end = Some(TraceEnd {
            tnt_buff: Tnt::from_header(head[0] & 0x7f),
            instructions: u64::from(u16::from_le_bytes([head[1], head[2]])),
        });
        rest = tail;
    }
    let Some((&code_len, rest)) = rest.split_first() else {
        return;
    };
    let code_len = usize::from(code_len).min(rest.len());
    let (code, trace) = rest.split_at(code_len);
    let mut space = AddressSpace::new();
    space
        .add(Image::from_raw("fixed", 0x401000, FIXED.to_vec()))
        .expect("fixed image");
    if !code.is_empty() {
        space
            .add(Image::from_raw("input", 0x1000, code.to_vec()))
            .expect("input image");
    }
    let code_bytes = (FIXED.len() + code.len()) as u64;
    for cycle_accurate in [false, true] {
        let config = FlowConfig {
            packets: DecoderConfig { cycle_accurate },
            ..FlowConfig::default()
        };
        let mut items = Vec::new();
        FlowDecoder::new(trace, config, &space).with_end(end).decode(&mut items);
        let mut instructions = 0u64;
        for item in &items {
            match item {
                FlowItem::Run { count, .. } => instructions += count,
                FlowItem::Event(e) => {
                    assert!(e.offset <= trace.len(), "event past the trace: {e}");
                    assert_eq!(e.position, instructions, "event out of place: {e}");
                }
            }
        }
        let bound = (8 * trace.len() as u64 + 2) * 3 * code_bytes + end.map_or(0, |e| e.instructions);
        assert!(
            instructions <= bound,
            "{instructions} instructions from {} trace bytes",
            trace.len()
        );
    }
}

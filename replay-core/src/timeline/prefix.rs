//! The history's beginning on its own (issue 40, "the end at once"): a dynamically linked
//! program stops gdb at every library the loader loads, in its first instructions, before
//! any `continue` can reach the end; decoding the trace's first bytes alone serves those
//! stops while the whole trace is decoded.

use super::parallel::Input;
use super::{Builder, Timeline};
use crate::flow::FlowDecoder;
use crate::packet::PacketDecoder;

/// Trace bytes decoded first; four times as many each time that is not enough.
const FIRST_BYTES: usize = 256 << 10;

/// The history's first positions, at least `positions` of them (perhaps more), decoded from
/// as little of the trace as it takes, cut at a PSB; `None` if that is most of the trace
/// (the whole decode is then as near). Each position is the whole decode's: the decoder
/// emits an instruction only once the packets before it settle it.
pub fn prefix(input: &Input<'_>, positions: u64) -> Option<Timeline> {
    let mut bytes = FIRST_BYTES;
    let mut scan = PacketDecoder::new(input.trace, input.config.packets);
    while bytes < input.trace.len() / 2 {
        scan.seek_cold(bytes);
        let cut = scan.sync_forward()?;
        let mut builder = Builder::new(input.space);
        FlowDecoder::new(&input.trace[..cut], input.config, input.space)
            .with_gaps(input.gaps)
            .decode(&mut builder);
        if builder.len() >= positions {
            return Some(builder.finish());
        }
        bytes *= 4;
    }
    None
}

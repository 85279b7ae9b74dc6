//! A stretch of the history on its own (issue 40, "the end at once", "a stop's values
//! first"): decoded from a recorder's sync point ([`crate::recording::sync_points`]) exactly
//! as the whole decode goes there, to the end of the trace or to a clean point past a trace
//! offset, so that a `continue` to the end of a long run that exited, or to a breakpoint far
//! in, need not wait for the whole trace.

use super::parallel::Input;
use super::{Builder, Timeline};
use crate::flow::{CleanPoint, FlowDecoder, TraceEnd, Watch};
use crate::recording::sync_points::SyncPoint;

/// The history from `point` to the end of the trace, its positions counted from the point's
/// (position 0 here is `point.position` in the whole).
pub fn suffix(input: &Input<'_>, point: &SyncPoint) -> Timeline {
    window(input, point, None)
}

/// The history from `point` on, to the first clean point where the decode has read the
/// trace past byte `stop`, or to the end of the trace (`None`, or a trace that ends first);
/// positions counted from the point's.
pub fn window(input: &Input<'_>, point: &SyncPoint, stop: Option<usize>) -> Timeline {
    let end = input.end.map(|e| TraceEnd {
        instructions: e.instructions.saturating_sub(point.position),
        ..e
    });
    let mut builder = Builder::new(input.space);
    let mut decoder = FlowDecoder::new(input.trace, input.config, input.space)
        .with_gaps(input.gaps)
        .with_end(end)
        .synced(point, 0);
    match stop {
        Some(stop) => {
            decoder.decode_watched(&mut builder, &mut Past(stop));
        }
        None => decoder.decode(&mut builder),
    }
    builder.finish()
}

/// Stops a decode at its first clean point past a trace offset.
struct Past(usize);

impl<S> Watch<'_, S> for Past {
    fn wants(&self, raw: usize) -> bool {
        raw > self.0
    }

    fn clean(&mut self, _: CleanPoint<'_>, _: &mut S) -> bool {
        true
    }
}

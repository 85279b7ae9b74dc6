//! The history's end on its own (issue 40, "the end at once"): decoded from a recorder's sync
//! point ([`crate::recording::sync_points`]) to the end of the trace, exactly as the whole
//! decode goes there, so that a `continue` to the end of a long run that exited, and `bt`
//! there, need not wait for the whole trace.

use super::parallel::Input;
use super::{Builder, Timeline};
use crate::flow::{FlowDecoder, TraceEnd};
use crate::recording::sync_points::SyncPoint;

/// The history from `point` to the end of the trace, its positions counted from the point's
/// (position 0 here is `point.position` in the whole).
pub fn suffix(input: &Input<'_>, point: &SyncPoint) -> Timeline {
    let end = input.end.map(|e| TraceEnd {
        instructions: e.instructions.saturating_sub(point.position),
        ..e
    });
    let mut builder = Builder::new(input.space);
    FlowDecoder::new(input.trace, input.config, input.space)
        .with_gaps(input.gaps)
        .with_end(end)
        .synced(point, 0)
        .decode(&mut builder);
    builder.finish()
}

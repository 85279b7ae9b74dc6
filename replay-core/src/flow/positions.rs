//! Trace offsets turned into history positions. The hardware tells rtit where in the trace
//! something happened — the trace had reached byte `m` when the target stopped for a change
//! of its memory map — but not how many instructions ran before it; decoding does.
//!
//! An offset is only marked while the target is off the CPU, so the packets before it end in
//! the FUP/TIP.PGD of the switch away (§4.2.8) and the packets after it start with the PSB
//! and TIP.PGE of the switch back (§4.2.1, §4.2.7): no instruction falls between. The
//! position of an offset is therefore that of the first event a packet at or after it tells,
//! or the number of instructions in the whole history when no packet follows.

use super::{FlowEvent, FlowSink};

/// A sink that counts instructions and finds the positions of ascending trace offsets.
#[derive(Debug)]
pub struct OffsetPositions<'a> {
    offsets: &'a [u64],
    found: Vec<u64>,
    count: u64,
}

impl<'a> OffsetPositions<'a> {
    /// Finds the positions of `offsets`, which must be in ascending order.
    pub fn new(offsets: &'a [u64]) -> Self {
        Self {
            offsets,
            found: Vec::with_capacity(offsets.len()),
            count: 0,
        }
    }

    /// The number of instructions decoded, and the position of each offset.
    pub fn finish(mut self) -> (u64, Vec<u64>) {
        self.found.resize(self.offsets.len(), self.count);
        (self.count, self.found)
    }
}

impl FlowSink for OffsetPositions<'_> {
    fn run(&mut self, _ip: u64, count: u64) {
        self.count += count;
    }

    fn event(&mut self, event: FlowEvent) {
        while let Some(&next) = self.offsets.get(self.found.len()) {
            if next > event.offset as u64 {
                break;
            }
            self.found.push(event.position);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::EventKind;

    fn event(offset: usize, position: u64) -> FlowEvent {
        FlowEvent {
            kind: EventKind::Enabled { ip: 0x1000 },
            offset,
            position,
        }
    }

    #[test]
    fn an_offset_takes_the_position_of_the_next_event_and_the_end_takes_the_count() {
        let offsets = [0, 10, 11, 40, 90];
        let mut sink = OffsetPositions::new(&offsets);
        sink.event(event(0, 0));
        sink.run(0x1000, 5);
        sink.event(event(10, 5));
        sink.run(0x1000, 7);
        sink.event(event(30, 12));
        sink.run(0x1000, 3);
        sink.event(event(60, 15));
        sink.run(0x1000, 4);
        assert_eq!(sink.finish(), (19, vec![0, 5, 12, 15, 19]));
    }
}

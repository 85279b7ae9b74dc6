//! The history as positions 0..N (DESIGN.md, layer 5), first cut: the runs and events of the
//! flow decoder indexed by position, so the instruction at a position is found by a binary
//! search over runs and a walk inside one run, not by decoding from the start. Checkpoints of
//! decoder state and the queries of reverse execution build on this.

use crate::flow::{decode_insn, BlockError, FlowEvent, FlowSink};
use crate::image::AddressSpace;

/// A run of sequential instructions at its position in the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    position: u64,
    ip: u64,
    count: u64,
}

/// The reconstructed history, indexed by position.
#[derive(Debug, Default, Clone)]
pub struct Timeline {
    runs: Vec<Run>,
    events: Vec<FlowEvent>,
    len: u64,
}

impl FlowSink for Timeline {
    fn run(&mut self, ip: u64, count: u64) {
        self.runs.push(Run {
            position: self.len,
            ip,
            count,
        });
        self.len += count;
    }

    fn event(&mut self, event: FlowEvent) {
        self.events.push(event);
    }
}

impl Timeline {
    /// An empty timeline, to be filled by a flow decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of instructions in the history.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the history holds no instruction.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The events, in order; each knows its position.
    pub fn events(&self) -> &[FlowEvent] {
        &self.events
    }

    /// The runs: (first position, first IP, number of instructions).
    pub fn runs(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.runs.iter().map(|r| (r.position, r.ip, r.count))
    }

    /// The first position of the run holding `position`, its first IP and its length.
    pub fn run_at(&self, position: u64) -> Option<(u64, u64, u64)> {
        let at = self.runs.partition_point(|r| r.position <= position);
        let r = self.runs[..at].last()?;
        (position < r.position + r.count).then_some((r.position, r.ip, r.count))
    }

    /// The address of the instruction at `position`, decoding inside its run only.
    pub fn ip_at(&self, position: u64, space: &AddressSpace) -> Result<Option<u64>, BlockError> {
        let Some((start, mut ip, _)) = self.run_at(position) else {
            return Ok(None);
        };
        for _ in start..position {
            ip = decode_insn(space, ip)?.next_ip();
        }
        Ok(Some(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::EventKind;
    use crate::image::Image;

    #[test]
    fn positions_map_to_instructions_through_runs() {
        // nop; add rax, rbx; nop | at 0x2000: nop; nop
        let mut space = AddressSpace::new();
        space
            .add(Image::from_raw("a", 0x1000, vec![0x90, 0x48, 0x01, 0xd8, 0x90]))
            .expect("add");
        space.add(Image::from_raw("b", 0x2000, vec![0x90, 0x90])).expect("add");
        let mut t = Timeline::new();
        t.event(FlowEvent {
            kind: EventKind::Enabled { ip: 0x1000 },
            offset: 9,
            position: 0,
        });
        t.run(0x1000, 3);
        t.run(0x2000, 2);
        assert_eq!(t.len(), 5);
        let ips: Vec<Option<u64>> = (0..6).map(|p| t.ip_at(p, &space).expect("decodes")).collect();
        assert_eq!(
            ips,
            [
                Some(0x1000),
                Some(0x1001),
                Some(0x1004),
                Some(0x2000),
                Some(0x2001),
                None
            ]
        );
        assert_eq!(t.run_at(4), Some((3, 0x2000, 2)));
        assert_eq!(t.events().len(), 1);
        assert!(Timeline::new().ip_at(0, &space).expect("empty").is_none());
    }
}

//! The address of the history's first position without decoding the history: a session
//! serves gdb at position 0 while the rest of its trace is decoded (issue 19, ready at once).

use super::parallel::Input;
use crate::flow::{FlowDecoder, FlowEvent, FlowSink};

/// Trace bytes decoded to find it: the first packets say where tracing began (TIP.PGE, or a
/// FUP in the first PSB+ when it was on already, §3.4.2.1); this much holds them many times.
const LOOK_BYTES: usize = 64 << 10;

/// The first instruction the history holds, as a plain decode of `input` would have it;
/// `None` if the start of the trace holds none (a trace that begins with tracing off for
/// long, or no instructions at all): then only the whole decode knows.
pub fn first_ip(input: &Input<'_>) -> Option<u64> {
    let end = input.trace.len().min(LOOK_BYTES);
    let gaps: Vec<_> = input.gaps.iter().copied().filter(|&(at, _)| at < end).collect();
    let mut first = First(None);
    // Cut short, the decode ends with an error at `end`; runs before it are a plain decode's.
    FlowDecoder::new(&input.trace[..end], input.config, input.space)
        .with_gaps(&gaps)
        .decode(&mut first);
    first.0
}

/// Keeps the address of the first run.
struct First(Option<u64>);

impl FlowSink for First {
    fn run(&mut self, ip: u64, count: u64) {
        if self.0.is_none() && count > 0 {
            self.0 = Some(ip);
        }
    }

    fn event(&mut self, _event: FlowEvent) {}
}

//! Catching a walk that cannot end. Between two things the trace says (a packet taken, a TNT
//! bit used) the walk is a function of the IP alone: straight-line code, direct jumps and
//! direct calls need nothing from the trace. If it comes back to a block it already entered
//! since the trace last said something, it will circle forever: the packet it waits for never
//! binds anywhere in that cycle (it would have bound on the first time round), so the trace
//! does not describe this code. A real spin loop (`for (;;);`) is left by an interrupt or a
//! disable whose FUP binds inside the loop on its first pass, so it never trips this.
//!
//! Detection is Brent's algorithm over block ids: no memory beyond a few counters, a compare
//! per block, and a cycle is caught within three times the number of distinct blocks the walk
//! entered since the trace last spoke (the blocks before the cycle plus the cycle's), so
//! within three times the number of blocks in the images. That is the bound the decoder
//! documents: per packet or TNT bit, the history grows by at most that much.

/// Brent's cycle detector, restarted whenever the trace makes progress.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spin {
    /// The trace's progress when the current stretch began: (packets taken, TNT bits left).
    mark: (u64, u32),
    tortoise: u32,
    power: u64,
    steps: u64,
}

impl Default for Spin {
    fn default() -> Self {
        Self {
            mark: (u64::MAX, u32::MAX),
            tortoise: u32::MAX,
            power: 1,
            steps: 0,
        }
    }
}

impl Spin {
    /// Whether the next [`Self::loops`] at `mark` restarts the detector (the trace moved on
    /// since it last looked): what it saw before does not matter then.
    #[inline]
    pub fn stale(&self, mark: (u64, u32)) -> bool {
        mark != self.mark
    }

    /// The walk enters block `block` while the trace's progress is `mark`. True when it has
    /// entered this block before with the trace where it is now: it is in a cycle.
    #[inline]
    pub fn loops(&mut self, mark: (u64, u32), block: u32) -> bool {
        if mark != self.mark {
            *self = Self {
                mark,
                tortoise: block,
                power: 1,
                steps: 0,
            };
            return false;
        }
        if block == self.tortoise {
            return true;
        }
        self.steps += 1;
        if self.steps == self.power {
            self.tortoise = block;
            self.power = self.power.saturating_mul(2);
            self.steps = 0;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks entered until the detector fires, for a walk `0, 1, ..., tail-1` then a cycle
    /// of `cycle` blocks, all with the trace standing still.
    fn entered_until_caught(tail: u32, cycle: u32) -> u32 {
        let mut s = Spin::default();
        let block = |i: u32| if i < tail { i } else { tail + (i - tail) % cycle };
        (0..10_000).find(|&i| s.loops((7, 0), block(i))).expect("caught")
    }

    #[test]
    fn a_cycle_is_caught_within_three_times_the_blocks_it_spans_and_progress_restarts_it() {
        for (tail, cycle) in [(0, 1), (0, 2), (3, 1), (5, 7), (100, 3), (1, 300)] {
            let n = entered_until_caught(tail, cycle);
            assert!(n >= tail + cycle, "not before one whole pass: {tail} {cycle} -> {n}");
            assert!(
                n <= 3 * (tail + cycle),
                "within three times the span: {tail} {cycle} -> {n}"
            );
        }
        // The same blocks again and again, but the trace moves on each time: no cycle.
        let mut s = Spin::default();
        assert!((0..1000u64).all(|i| !s.loops((i, 0), 5)));
        // A TNT bit used is progress too.
        let mut s = Spin::default();
        assert!((0..6u32).all(|i| !s.loops((1, 6 - i), 5)));
        // A straight walk through distinct blocks never trips it.
        let mut s = Spin::default();
        assert!((0..100_000u32).all(|i| !s.loops((1, 0), i)));
    }
}

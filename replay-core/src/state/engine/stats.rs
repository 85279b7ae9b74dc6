//! How the engine did: steps walked, states held and their memory, the background work's
//! progress (for `rtit check-values`, `monitor info` and the benches).

use std::sync::atomic::Ordering;

use super::super::memory::Footprint;
use super::super::State;
use super::Values;

/// How the engine did (for `rtit check-values` and the cost report).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ValuesStats {
    /// Instructions stepped forwards.
    pub forward_steps: u64,
    /// Instructions stepped backwards.
    pub backward_steps: u64,
    /// Values both passes knew and disagreed on (a model error; reported as unknown).
    pub conflicts: u64,
    /// Checkpoints held.
    pub checkpoints: usize,
    /// Bytes the checkpoints hold: their registers, and their memory counting what several
    /// share once.
    pub bytes: usize,
    /// Positions between checkpoints.
    pub interval: u64,
    /// Positions the chains walked so far, and in all.
    pub walked: (u64, u64),
    /// With anchors: the stretches between two exact states whose forward walk reached the
    /// state above knowing all of it (their backward walks are skipped), and those the
    /// background fill walked forwards so far.
    pub settled: (usize, usize),
}

impl Values {
    /// Positions the background passes walked so far, and in all ([`ValuesStats::walked`])
    /// without [`Self::stats`]'s count of the memory held, which goes over every state kept
    /// (a bench that polled it every 20 ms took a core from the fill it waited for).
    pub fn walked(&self) -> (u64, u64) {
        if let Some(a) = &self.anchored {
            return a.filled();
        }
        match &self.chains {
            Some(c) => (c.walked.load(Ordering::Relaxed), c.total),
            None if self.held.is_some() => (0, 0),
            None => {
                let all = self.chain_steps.forward + self.chain_steps.backward;
                (all, all)
            }
        }
    }

    /// How the engine did so far.
    pub fn stats(&self) -> ValuesStats {
        if let Some(a) = &self.anchored {
            let s = a.stats();
            return ValuesStats {
                forward_steps: s.forward_steps,
                backward_steps: s.backward_steps,
                conflicts: self.conflicts,
                checkpoints: s.states,
                bytes: s.bytes,
                interval: super::super::anchored::COARSE,
                walked: self.walked(),
                settled: s.settled,
            };
        }
        let states = self
            .forward
            .iter()
            .chain(self.backward.values())
            .chain(self.provisional.values())
            .chain(self.forward_seeded.values())
            .chain(self.backward_seeded.values());
        let mut footprint = Footprint::new();
        let mut checkpoints = 0;
        for s in states {
            checkpoints += 1;
            s.mem.footprint(&mut footprint);
        }
        let bytes = footprint.bytes() + checkpoints * size_of::<State>();
        let walked = self.walked();
        ValuesStats {
            forward_steps: self.walker.stats.forward + self.chain_steps.forward,
            backward_steps: self.walker.stats.backward + self.chain_steps.backward,
            conflicts: self.conflicts,
            checkpoints,
            bytes,
            interval: self.interval,
            walked,
            settled: (0, 0),
        }
    }
}

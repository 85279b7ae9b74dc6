//! A stop's values before gdb hears of it (issue 40): what [`Values::settle`] waits for, and
//! the whole states that answer at their own positions without any walk.

use std::time::Duration;

use super::super::State;
use super::Values;

impl Values {
    /// The snapshot at `p`, if the recording has one there (the start's, or the end's) with
    /// the registers: the answer there is what it holds, final before any pass has run.
    pub(super) fn snapshot_at(&self, p: u64) -> Option<State> {
        let st = match p {
            0 => Some(&self.forward[0]),
            p if p + 1 == self.len() => self.backward.get(&p),
            _ => None,
        }?;
        // A snapshot without the registers (an exit under QEMU: rip alone) is no answer.
        super::super::anchored::general_registers(st).then(|| st.clone())
    }

    /// Works out the values at `p` so that they are final when this returns true, waiting as
    /// long as that takes unless `interrupted` (polled every few milliseconds) says to stop:
    /// with anchors, the walks from the exact states on either side; without, the chains.
    /// What a stop does before it is reported, so that gdb never sees a provisional value.
    pub fn settle(&mut self, p: u64, interrupted: &mut dyn FnMut() -> bool) -> bool {
        if p >= self.len() {
            return true;
        }
        if let Some(a) = &mut self.anchored {
            return a.at(p, interrupted).is_some();
        }
        if self.snapshot_at(p).is_some() {
            return true;
        }
        self.release();
        while let Some(chains) = &self.chains {
            match chains.made.recv_timeout(Duration::from_millis(20)) {
                Ok(m) => self.take(m),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if interrupted() => return false,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => self.chains = None,
            }
        }
        true
    }

    /// Whether the values come from exact states along the history (the recording's anchors).
    pub fn anchored(&self) -> bool {
        self.anchored.is_some()
    }

    /// The positions of the exact states the values come from (with anchors), in order.
    pub fn exact_positions(&self) -> Vec<u64> {
        self.anchored
            .as_ref()
            .map_or_else(Vec::new, |a| a.exact_positions().collect())
    }
}

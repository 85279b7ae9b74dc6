//! The unit model one instruction at a time beside the engine's fast path (`rtit record
//! --check-fast-path`): it is fed every instruction and event the engine feeds its own model,
//! never a run at once, and each time the engine hands its packets over they are compared
//! with the oracle's, so a difference is found on real programs, with its byte offset
//! (issue 20: the fast path must write exactly what the model writes).

use crate::model::{Input, Retired, UnitModel};

/// The oracle and what the comparison found.
#[derive(Debug, Clone)]
pub struct Oracle {
    model: UnitModel,
    /// Bytes compared so far.
    compared: u64,
    /// The first difference, once found.
    mismatch: Option<String>,
}

/// What a check found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Checked {
    /// Bytes of trace compared.
    pub bytes: u64,
    /// The first difference, if any.
    pub mismatch: Option<String>,
}

impl Oracle {
    /// An oracle in the state of `model`, which was just programmed.
    pub fn new(model: UnitModel) -> Self {
        Self {
            model,
            compared: 0,
            mismatch: None,
        }
    }

    /// Feeds an event or instruction.
    pub fn apply(&mut self, input: &Input) {
        self.model.apply(input);
    }

    /// Feeds one retired instruction.
    pub fn retire(&mut self, r: &Retired) {
        self.model.retire(r);
    }

    /// Compares the bytes the fast path wrote since the last call (and how many
    /// instructions it traced in all) with the oracle's.
    pub fn compare(&mut self, fast: &[u8], traced: u64) {
        let own = self.model.take_output();
        if self.mismatch.is_none() {
            if let Some(i) = (0..own.len().max(fast.len())).find(|&i| own.get(i) != fast.get(i)) {
                let byte = |b: Option<&u8>| b.map_or("nothing".to_string(), |b| format!("{b:#04x}"));
                self.mismatch = Some(format!(
                    "at byte {} of the trace the fast path wrote {} where the unit model wrote {}",
                    self.compared + i as u64,
                    byte(fast.get(i)),
                    byte(own.get(i))
                ));
            } else if traced != self.model.traced() {
                self.mismatch = Some(format!(
                    "after byte {} of the trace the fast path counted {traced} instructions, the unit model {}",
                    self.compared + own.len() as u64,
                    self.model.traced()
                ));
            }
        }
        self.compared += fast.len() as u64;
    }

    /// What the comparison found so far.
    pub fn checked(&self) -> Checked {
        Checked {
            bytes: self.compared,
            mismatch: self.mismatch.clone(),
        }
    }
}

//! Translated blocks on their way from the vCPU to the engine (issue 20): the vCPU numbers
//! each block by the bytes QEMU reported where QEMU translates it
//! (`rtit_recorder::qemu::translations`) and queues the new ones here, without the plugin's
//! lock, which the feeder holds while it runs the engine (waiting for it took a third of the
//! vCPU's time at translation on python3's startup), and without decoding them, which the
//! feeder does; whoever feeds the engine takes them first ([`take`]).
//!
//! Every block in the ring was queued here before it was pushed there (QEMU runs a block
//! only after its translation returned), so a feeder that reads how far the ring goes and
//! then takes this queue has every block it will meet.

use std::sync::{Mutex, MutexGuard};

use rtit_recorder::qemu::translations::{RawBlock, Translations};

/// What the vCPU hands over at a translation.
pub enum Translated {
    /// A new block: its id, its instructions, and how many of them the vCPU counts (the
    /// inline add is before the last of those).
    Block {
        /// Its id.
        id: u32,
        /// Its instructions as QEMU reported them.
        raw: RawBlock,
        /// Instructions kept (`translations::kept`).
        kept: usize,
    },
    /// A block at this address with no decodable instruction (it runs uninstrumented).
    Untranslatable(u64),
}

/// The vCPU's numbering (only the vCPU takes this lock).
static NUMBERS: Mutex<Option<Translations>> = Mutex::new(None);
/// What the engine has still to take.
static QUEUE: Mutex<Vec<Translated>> = Mutex::new(Vec::new());

fn held<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The id of the block QEMU translated from `insns`, of which the vCPU counts `kept` (on
/// the vCPU).
pub fn number(insns: &[(u64, &[u8])], kept: usize) -> u32 {
    let (id, new) = held(&NUMBERS).get_or_insert_with(Translations::default).number(insns);
    if let Some(raw) = new {
        held(&QUEUE).push(Translated::Block { id, raw, kept });
    }
    id
}

/// QEMU translated a block at `ip` with no decodable instruction (on the vCPU).
pub fn untranslatable(ip: u64) {
    held(&QUEUE).push(Translated::Untranslatable(ip));
}

/// The translations queued so far, in order.
pub fn take() -> Vec<Translated> {
    std::mem::take(&mut *held(&QUEUE))
}

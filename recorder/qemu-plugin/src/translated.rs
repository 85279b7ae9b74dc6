//! Translated blocks on their way from the vCPU to the engine (issue 20): the vCPU numbers
//! each block where QEMU translates it (`rtit_recorder::qemu::translations`) and queues the
//! new ones here, without the plugin's lock, which the feeder holds while it runs the engine
//! (waiting for it took a third of the vCPU's time at translation on python3's startup);
//! whoever feeds the engine takes them first ([`take`]).
//!
//! Every block in the ring was queued here before it was pushed there (QEMU runs a block
//! only after its translation returned), so a feeder that reads how far the ring goes and
//! then takes this queue has every block it will meet.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use rtit_recorder::qemu::block::Block;
use rtit_recorder::qemu::translations::Translations;

/// What the vCPU hands over at a translation.
pub enum Translated {
    /// A new block, with its instructions as QEMU reported them where they are captured
    /// ([`CAPTURING`]).
    Block {
        /// Its id.
        id: u32,
        /// The block.
        block: Block,
        /// `(address, bytes)` of each instruction.
        raw: Option<Vec<(u64, Vec<u8>)>>,
    },
    /// A block at this address with no decodable instruction (it runs uninstrumented).
    Untranslatable(u64),
}

/// The vCPU's numbering (only the vCPU takes this lock).
static NUMBERS: Mutex<Option<Translations>> = Mutex::new(None);
/// What the engine has still to take.
static QUEUE: Mutex<Vec<Translated>> = Mutex::new(Vec::new());
/// Whether the translations' bytes go along for the capture (`capture`).
pub static CAPTURING: AtomicBool = AtomicBool::new(false);

fn held<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The id of `block`, which QEMU translated from `insns` (on the vCPU).
pub fn number(block: Block, insns: &[(u64, &[u8])]) -> u32 {
    let (id, new) = held(&NUMBERS).get_or_insert_with(Translations::default).number(block);
    if let Some(block) = new {
        let raw = CAPTURING
            .load(Ordering::Relaxed)
            .then(|| insns.iter().map(|&(ip, b)| (ip, b.to_vec())).collect());
        held(&QUEUE).push(Translated::Block { id, block, raw });
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

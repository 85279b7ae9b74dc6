//! An anchor taken without QEMU's gdbstub (issue 43): while a thread of the program waits
//! for its turn inside QEMU's execution loop (`threads::preempt`), a stop of the gdbstub
//! would never end (QEMU 10.0 flushes its translations at a stop, in an exclusive section
//! that waits for that thread). `rtit record` then asks for a park ([`PARK`]): the running
//! thread, the only one that runs, stops at its next block, publishes where it is and its
//! registers, and waits there while `rtit record` reads the pages written since the last
//! anchor; the program's other threads wait for their turn meanwhile, so its memory is
//! that of one position.
#![allow(unsafe_code)]

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rtit_recorder::qemu::engine::Started;

use crate::published::{close, open, GATE, PARK, PARKED, PARKED_AT, PARKED_REGISTERS, PARKING};

/// The feeder's look at [`PARK`]: the vCPU's callback reads only the gate, which is
/// written only when it changes (the vCPU reads its line at every block).
pub fn mirror() {
    let wanted = PARK.load(Ordering::Relaxed) != 0;
    if wanted != (GATE.load(Ordering::Relaxed) & PARKING != 0) {
        match wanted {
            true => close(PARKING),
            false => open(PARKING),
        }
    }
}

/// The longest a park lasts, whatever `rtit record` does.
const LONGEST: Duration = Duration::from_secs(5);

/// Block `block` is about to start on the running thread and `rtit record` asked for a
/// park: the engine is brought up to date, and unless the block before was cut short
/// (its position would need where it stopped), the thread publishes the position of the
/// block's first instruction and its registers there, and waits until `rtit record` is done.
pub fn park(block: Started) {
    open(PARKING);
    let at = crate::shared::with_plugin(|p| p.parked_at(block)).flatten();
    let Some((position, ip)) = at else { return };
    let mut registers = crate::registers::state_in_loop();
    // QEMU's rip at a block's start can be stale (a chained jump does not store it).
    registers.insert("rip".into(), format!("{ip:#x}"));
    let Ok(text) = serde_json::to_vec(&registers) else {
        return;
    };
    if text.len() > PARKED_REGISTERS.len() {
        return;
    }
    for (slot, byte) in PARKED_REGISTERS.iter().zip(&text) {
        slot.store(*byte, Ordering::Relaxed);
    }
    PARKED_AT[0].store(position, Ordering::Relaxed);
    PARKED_AT[1].store(text.len() as u64, Ordering::Relaxed);
    PARKED.store(1, Ordering::SeqCst);
    let deadline = Instant::now() + LONGEST;
    while PARK.load(Ordering::SeqCst) != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
    PARKED.store(0, Ordering::SeqCst);
}

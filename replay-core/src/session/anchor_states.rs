//! The states at the recording's anchors (issue 40), built from the start snapshot: each
//! anchor's state is the one before it, with the memory-map changes between them applied and
//! the pages the anchor holds written over it. Every register the recorder read is set; a
//! register it did not read (QEMU's gdbstub gives no ymm upper halves) is unknown there.
//!
//! What the anchors cannot vouch for is forgotten: a page the recorder could not read, and
//! every range that was ever a shared mapping (the recorder tracks private mappings only:
//! another process, or the program through a second mapping, may write a shared one
//! without a page of the program's showing it written).

use crate::image::AddressSpace;
use crate::recording::anchors::{Anchors, PAGE};
use crate::recording::{Maps, RecordingError};
use crate::state::maps::MapEffect;
use crate::state::{self, State};

/// The state at each anchor, in order of position: from `start` (position 0's), the map
/// changes `effects` (by position, in order) and the anchors' pages and registers (of which
/// the caller kept what the recording can vouch for); an error if the pages' file is not
/// as the recorder wrote it.
pub(super) fn anchor_states(
    anchors: &Anchors,
    maps: &Maps,
    start: &State,
    effects: &[(u64, MapEffect)],
    space: &AddressSpace,
) -> Result<Vec<(u64, State)>, RecordingError> {
    anchor_states_at(anchors, maps, start, effects, space, |_| true)
}

/// [`anchor_states`] for the anchors whose position `wanted` says: the pages of every anchor
/// before them still make their memory, but no state is made for the others (a window
/// wants two of dozens).
pub(super) fn anchor_states_at(
    anchors: &Anchors,
    maps: &Maps,
    start: &State,
    effects: &[(u64, MapEffect)],
    space: &AddressSpace,
    wanted: impl Fn(u64) -> bool,
) -> Result<Vec<(u64, State)>, RecordingError> {
    let shared: Vec<(u64, u64)> = (maps.initial.iter())
        .chain(maps.changes.iter().flat_map(|c| &c.added))
        .filter(|m| m.perms.ends_with('s'))
        .map(|m| (m.start, m.end - m.start))
        .collect();
    let mut memory = start.mem.clone();
    let mut effects = effects.iter().peekable();
    let mut states = Vec::with_capacity(anchors.list.len());
    for (i, a) in anchors.list.iter().enumerate() {
        if a.position == 0 {
            continue;
        }
        // A change at the anchor's position took effect before its instruction.
        while let Some((_, e)) = effects.next_if(|(p, _)| *p <= a.position) {
            e.apply(&mut memory, space);
        }
        for (address, page) in anchors.pages(i)?.iter() {
            match page {
                Some(bytes) => memory.write(address, bytes),
                None => memory.forget(address, PAGE),
            }
        }
        if !wanted(a.position) {
            continue;
        }
        let mut st = State {
            cpu: start.cpu,
            mem: memory.clone(),
            ..State::unknown()
        };
        shared.iter().for_each(|&(a, n)| st.mem.forget(a, n));
        state::set_named(&mut st, &a.registers);
        states.push((a.position, st));
    }
    Ok(states)
}

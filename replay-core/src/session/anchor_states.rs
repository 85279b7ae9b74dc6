//! The states at the recording's anchors (issue 40), built from the start snapshot: each
//! anchor's state is the one before it, with the memory-map changes between them applied and
//! the pages the anchor holds written over it. Every register the recorder read is set; a
//! register it did not read (QEMU's gdbstub gives no ymm upper halves) is unknown there.
//!
//! What the anchors cannot vouch for is forgotten: a page the recorder could not read, and
//! every range that was ever a shared mapping (the recorder tracks private mappings only:
//! another process, or the program through a second mapping, may write a shared one
//! without a page of the program's showing it written).

use rustc_hash::FxHashSet;

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
/// wants two of dozens), and a page a later anchor holds again before the next wanted one
/// is neither read nor written ([`replaced`]): a window at the end of a long sort reads
/// 19,645 of its 155,237 pages of data.
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
    let replaced = replaced(anchors, |i| wanted(anchors.list[i].position));
    let mut memory = start.mem.clone();
    let mut effects = effects.iter().peekable();
    let mut states = Vec::with_capacity(anchors.list.len());
    for (i, a) in anchors.list.iter().enumerate() {
        if a.position == 0 {
            continue;
        }
        if !wanted(a.position) && anchors.list[i..].iter().all(|a| !wanted(a.position)) {
            break;
        }
        // A change at the anchor's position took effect before its instruction.
        while let Some((_, e)) = effects.next_if(|(p, _)| *p <= a.position) {
            e.apply(&mut memory, space);
        }
        let pages = anchors.pages_kept(i, |k| !replaced[i].contains(&k))?;
        for (address, page) in pages.iter() {
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

/// For each anchor, the indices of its pages that a later anchor holds again before the
/// next anchor `wanted` says yes to (or at all, after the last): a state built from the
/// anchors in order would write each of them and then write the whole page over it, or
/// forget it whole, whatever the map changes between did to it, so they need not be read.
fn replaced(anchors: &Anchors, wanted: impl Fn(usize) -> bool) -> Vec<FxHashSet<usize>> {
    let n = anchors.list.len();
    let mut out = vec![FxHashSet::default(); n];
    // The pages held from each anchor on, up to the next wanted one, from the last back.
    let mut later: FxHashSet<u64> = FxHashSet::default();
    for i in (0..n).rev() {
        if wanted(i) {
            later.clear();
        }
        let addresses: Vec<u64> = anchors.addresses(i).collect();
        for (k, a) in addresses.iter().enumerate().rev() {
            if !later.insert(*a) {
                out[i].insert(k);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::recording::anchors::{encode_page, Anchor};

    /// A page an anchor holds: its address and bytes (`None`: unreadable).
    type Held = (u64, Option<Vec<u8>>);

    /// Anchors at positions 10, 20, 30, 40 over a pages' file written here, with a map
    /// change between the first two that forgets part of a page and zeroes another.
    fn fixture() -> (Anchors, Vec<(u64, MapEffect)>) {
        let data = |b: u8| vec![b; PAGE as usize];
        let held: [&[Held]; 4] = [
            &[
                (0x1000, Some(data(1))),
                (0x2000, Some(data(0))),
                (0x3000, Some(data(2))),
            ],
            &[(0x1000, Some(data(3))), (0x4000, None), (0x6000, Some(data(7)))],
            &[
                (0x3000, Some(data(4))),
                (0x2000, Some(data(5))),
                (0x6000, Some(data(8))),
            ],
            &[(0x5000, Some(data(6))), (0x1000, None)],
        ];
        let (mut bytes, mut list) = (Vec::new(), Vec::new());
        for (i, pages) in held.iter().enumerate() {
            let offset = bytes.len() as u64;
            pages
                .iter()
                .for_each(|(a, b)| encode_page(*a, b.as_deref(), &mut bytes));
            list.push(Anchor {
                position: 10 * (i as u64 + 1),
                registers: BTreeMap::from([("rip".to_string(), format!("{:#x}", 0x400000 + i))]),
                pages: pages.len() as u64,
                offset,
            });
        }
        let dir = std::env::temp_dir().join(format!("rtit-anchor-states-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let path = dir.join("anchor-pages.bin");
        std::fs::write(&path, bytes).expect("the pages written");
        let anchors = Anchors::over_file(list, &path).expect("anchors");
        let effect = MapEffect {
            forget: vec![(0x1000 + 100, 200)],
            zero: vec![(0x4000, PAGE)],
            ..MapEffect::default()
        };
        (anchors, vec![(15, effect)])
    }

    #[test]
    fn a_state_leaves_out_only_the_pages_a_later_anchor_replaces() {
        let (anchors, effects) = fixture();
        let space = AddressSpace::new();
        let start = State::unknown();
        let maps = Maps::default();
        let all = anchor_states(&anchors, &maps, &start, &effects, &space).expect("every state");
        assert_eq!(all.len(), 4);
        // Any choice of anchors gives the states every anchor's pages give.
        for wanted in [vec![20], vec![40], vec![20, 40], vec![10, 30], vec![30]] {
            let some = anchor_states_at(&anchors, &maps, &start, &effects, &space, |q| wanted.contains(&q))
                .expect("the wanted states");
            assert_eq!(some.iter().map(|s| s.0).collect::<Vec<_>>(), wanted);
            for (q, st) in &some {
                let whole = &all.iter().find(|s| s.0 == *q).expect("the same anchor").1;
                assert!(st.covers(whole) && whole.covers(st), "at {q} for {wanted:?}");
            }
        }
        // What a reader would find: the state at 20 knows the second anchor's 0x1000, the
        // first's 0x3000 (replaced only at 30) and the zeros of its map change at 0x4000
        // made unknown by the anchor.
        let at20 = &all[1].1.mem;
        assert_eq!(at20.read(0x1000, 4, &space), Some(vec![3; 4]));
        assert_eq!(at20.read(0x3000, 4, &space), Some(vec![2; 4]));
        assert_eq!(at20.read(0x4000, 4, &space), None);
        assert_eq!(all[3].1.mem.read(0x1000, 1, &space), None);
        assert_eq!(all[3].1.mem.read(0x2000, 2, &space), Some(vec![5; 2]));
        // Which pages each choice leaves out.
        let left_out = |wanted: &[usize]| {
            let r = replaced(&anchors, |i| wanted.contains(&i));
            r.iter()
                .map(|s| s.iter().copied().collect::<Vec<_>>())
                .collect::<Vec<_>>()
        };
        let mut at_last = left_out(&[3]);
        at_last.iter_mut().for_each(|v| v.sort_unstable());
        assert_eq!(at_last, [vec![0, 1, 2], vec![0, 2], vec![], vec![]]);
        assert_eq!(left_out(&[1, 3])[0], [0], "0x1000 alone, replaced at the second");
        assert!(left_out(&[0, 1, 2, 3]).iter().all(|s| s.is_empty()));
    }
}

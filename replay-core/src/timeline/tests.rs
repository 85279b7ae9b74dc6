//! The timeline against the plain list of every position's address it replaces.

use std::collections::HashSet;

use proptest::prelude::*;

use super::*;
use crate::flow::{EventKind, FlowSink};
use crate::image::{AddressSpace, Image};

/// nop; add rax, rbx; nop at 0x1000, then nop; nop at 0x2000.
fn space() -> AddressSpace {
    let mut space = AddressSpace::new();
    space
        .add(Image::from_raw("a", 0x1000, vec![0x90, 0x48, 0x01, 0xd8, 0x90]))
        .expect("add");
    space.add(Image::from_raw("b", 0x2000, vec![0x90, 0x90])).expect("add");
    space
}

#[test]
fn positions_map_to_instructions_through_runs() {
    let space = space();
    let mut b = Builder::new(&space);
    b.event(FlowEvent {
        kind: EventKind::Enabled { ip: 0x1000 },
        offset: 9,
        position: 0,
    });
    b.run(0x1000, 3);
    b.run(0x2000, 2);
    b.run(0x1000, 3);
    b.run(0x1001, 2);
    let mut t = b.finish();
    t.push_ip(0x0);
    assert_eq!(t.len(), 11);
    let ips: Vec<Option<u64>> = (0..12).map(|p| t.ip_at(p)).collect();
    let want = [
        0x1000, 0x1001, 0x1004, 0x2000, 0x2001, 0x1000, 0x1001, 0x1004, 0x1001, 0x1004, 0x0,
    ];
    let want: Vec<Option<u64>> = want.iter().map(|&ip| Some(ip)).chain([None]).collect();
    assert_eq!(ips, want);
    assert_eq!(t.counts(), (5, 4), "the repeated run is one block");
    assert_eq!(t.events().len(), 1);
    assert!(Timeline::default().ip_at(0).is_none());
}

#[test]
fn a_run_cut_short_by_an_undecodable_instruction_ends_there() {
    // 0x1004 is the last byte of image a: the run of 4 from 0x1001 decodes 2.
    let space = space();
    let mut b = Builder::new(&space);
    b.run(0x1001, 4);
    b.run(0x2000, 1);
    let t = b.finish();
    assert_eq!(
        t.len(),
        4,
        "two of the first run (the third is past the image), one of 0x2000"
    );
    assert_eq!(t.ip_at(3), Some(0x2000));
}

/// A history of `runs` over a few distinct blocks, as addresses and as a timeline.
fn history(runs: &[(u8, u8)]) -> (Vec<u64>, Timeline) {
    let mut ips = Vec::new();
    let mut t = Timeline::default();
    let mut blocks = std::collections::HashMap::new();
    for &(start, len) in runs {
        let block: Vec<u64> = (0..u64::from(len % 7) + 1)
            .map(|i| 0x100 * u64::from(start % 9) + i)
            .collect();
        ips.extend_from_slice(&block);
        let b = *blocks.entry(block.clone()).or_insert_with(|| t.blocks.add(&block));
        t.push_run(b, block.len() as u32);
    }
    (ips, t)
}

proptest! {
    #[test]
    fn lookups_cursors_and_searches_agree_with_the_list_of_addresses(
        runs in proptest::collection::vec((any::<u8>(), any::<u8>()), 1..300),
        moves in proptest::collection::vec(any::<u16>(), 1..60),
        set in proptest::collection::hash_set((0u64..9, 0u64..7), 0..4),
        range in (any::<u16>(), any::<u16>()),
    ) {
        let (ips, t) = history(&runs);
        let n = ips.len() as u64;
        prop_assert_eq!(t.len(), n);
        let mut cursor = Cursor::default();
        let mut pair = Cursor::default();
        let mut p = 0u64;
        for m in moves {
            // Mostly single steps either way, sometimes a jump.
            p = match m % 4 {
                0 => (p + 1).min(n),
                1 => p.saturating_sub(1),
                2 => u64::from(m) % (n + 2),
                _ => p,
            };
            prop_assert_eq!(t.ip_at(p), ips.get(p as usize).copied(), "ip_at({})", p);
            prop_assert_eq!(cursor.ip(&t, p), ips.get(p as usize).copied(), "cursor at {}", p);
            let ip = |slot: usize| t.slot_ips()[slot];
            let both = pair.slots(&t, p).map(|(slot, next)| (ip(slot), next.map(ip)));
            let want = ips.get(p as usize).map(|&ip| (ip, ips.get(p as usize + 1).copied()));
            prop_assert_eq!(both, want, "slots({})", p);
        }
        let set: HashSet<u64> = set.iter().map(|&(b, i)| 0x100 * b + i).collect();
        let (a, b) = (u64::from(range.0) % (n + 1), u64::from(range.1) % (n + 1));
        let (from, until) = (a.min(b), a.max(b));
        let next = (from..until).find(|&p| set.contains(&ips[p as usize]));
        prop_assert_eq!(t.next_hit(from, until, &set, || false), next.map_or(Hit::None, Hit::At));
        let previous = (from..until).rev().find(|&p| set.contains(&ips[p as usize]));
        prop_assert_eq!(t.previous_hit(until, from, &set, || false), previous.map_or(Hit::None, Hit::At));
    }
}

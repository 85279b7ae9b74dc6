//! Flow decoder tests on hand-encoded packets: errata workarounds and inconsistencies. (The
//! golden tests against the unit model are in `recorder/tests/flow_golden`.)

use super::*;
use crate::image::{AddressSpace, Image};
use crate::ip::LastLip;
use crate::packet::{encode, FupEvent, Packet, Tnt, PSB_BYTES};

/// ```text
/// 1000: 90               nop
/// 1001: 74 02            je 1005
/// 1003: 90               nop
/// 1004: 90               nop
/// 1005: ff e0            jmp rax
/// 1007: 0f 05            syscall
/// 1009: c3               ret
/// 100a: e8 f1 ff ff ff   call 1000
/// 100f: 0f 0b            ud2
/// ```
fn space() -> AddressSpace {
    let code = [
        0x90, 0x74, 0x02, 0x90, 0x90, 0xff, 0xe0, 0x0f, 0x05, 0xc3, 0xe8, 0xf1, 0xff, 0xff, 0xff, 0x0f, 0x0b,
    ];
    let mut s = AddressSpace::new();
    s.add(Image::from_raw("code", 0x1000, code.to_vec())).expect("add");
    s
}

/// Encodes packets, compressing IPs as the unit does.
struct Trace {
    bytes: Vec<u8>,
    lip: LastLip,
}

impl Trace {
    fn new() -> Self {
        let mut t = Self {
            bytes: Vec::new(),
            lip: LastLip::new(),
        };
        t.bytes.extend_from_slice(&PSB_BYTES);
        t
    }
    fn fup(mut self, e: FupEvent, ip: u64) -> Self {
        let p = self.lip.compress(ip);
        encode(&Packet::Fup(e, p), &mut self.bytes).expect("valid");
        self
    }
    fn tip(mut self, ip: u64) -> Self {
        let p = self.lip.compress(ip);
        encode(&Packet::Tip(p), &mut self.bytes).expect("valid");
        self
    }
    fn tnt(mut self, bits: &[bool]) -> Self {
        encode(&Packet::Tnt(Tnt::from_bits(bits).expect("bits")), &mut self.bytes).expect("valid");
        self
    }
}

fn decode(trace: &Trace) -> Vec<FlowItem> {
    let space = space();
    let mut items = Vec::new();
    FlowDecoder::new(&trace.bytes, FlowConfig::default(), &space).decode(&mut items);
    items
}

fn run(ip: u64, count: u64) -> FlowItem {
    FlowItem::Run { ip, count }
}

fn kinds(items: &[FlowItem]) -> Vec<EventKind> {
    items
        .iter()
        .filter_map(|i| match i {
            FlowItem::Event(e) => Some(e.kind.clone()),
            FlowItem::Run { .. } => None,
        })
        .collect()
}

fn enabled(ip: u64, offset: usize) -> FlowItem {
    FlowItem::Event(FlowEvent {
        kind: EventKind::Enabled { ip },
        offset,
        position: 0,
    })
}

#[test]
fn a_branchy_walk_and_a_quiet_end() {
    // je taken to 1005; jmp rax to 100a; call 1000; nop; je not taken; nop nop; jmp rax ...
    let t = Trace::new()
        .fup(FupEvent::PacketGenEnable, 0x1000)
        .tnt(&[true])
        .tip(0x100a)
        .tnt(&[false]);
    // The trace ends at the boundary after the second je: the nops after it are not shown,
    // since nothing says they ran.
    assert_eq!(
        decode(&t),
        [
            enabled(0x1000, 9),
            run(0x1000, 2),
            run(0x1005, 1),
            run(0x100a, 1),
            run(0x1000, 2),
        ]
    );
}

#[test]
fn errata_e1_fup_far_inside_the_far_transfer_counts_as_its_nlip() {
    let t = Trace::new()
        .fup(FupEvent::PacketGenEnable, 0x1007)
        .fup(FupEvent::FarTransfer, 0x1008) // inside the 2-byte syscall
        .tip(0x1009);
    let items = decode(&t);
    assert_eq!(items[1..], [run(0x1007, 1)], "syscall, then ret needs a packet: end");
    assert!(kinds(&items).iter().all(|k| !matches!(k, EventKind::Error { .. })));
    // A FUP.FAR elsewhere does not belong to the syscall.
    let t = Trace::new()
        .fup(FupEvent::PacketGenEnable, 0x1007)
        .fup(FupEvent::FarTransfer, 0x1003)
        .tip(0x1009);
    let k = kinds(&decode(&t));
    assert!(
        matches!(&k[1], EventKind::Error { ip: Some(0x1007), message } if message.contains("FUP.FAR")),
        "{k:?}"
    );
}

#[test]
fn errata_e2_an_extra_fup_pgd_is_ignored() {
    let t = Trace::new()
        .fup(FupEvent::PacketGenEnable, 0x1007)
        .fup(FupEvent::PacketGenDisable, 0x1009)
        .fup(FupEvent::PacketGenDisable, 0x1009)
        .fup(FupEvent::PacketGenEnable, 0x1009)
        .tip(0x100a);
    let k = kinds(&decode(&t));
    assert_eq!(
        k,
        [
            EventKind::Enabled { ip: 0x1007 },
            EventKind::Disabled { ip: Some(0x1009) },
            EventKind::Enabled { ip: 0x1009 },
        ]
    );
}

#[test]
fn errata_e5_a_tip_to_the_overflow_address_is_dropped() {
    let t = Trace::new()
        .fup(FupEvent::BufferOverflow, 0x1005)
        .tip(0x1005) // spurious (E5)
        .tip(0x1009);
    let items = decode(&t);
    assert_eq!(items[1..], [run(0x1005, 1)], "jmp rax to 1009; ret needs a packet: end");
    assert_eq!(kinds(&items), [EventKind::Gap { ip: 0x1005 }]);
}

#[test]
fn a_tip_where_a_tnt_bit_is_due_is_an_error_with_offset_and_position() {
    let t = Trace::new().fup(FupEvent::PacketGenEnable, 0x1000).tip(0x1009);
    let items = decode(&t);
    let FlowItem::Event(e) = &items[2] else {
        panic!("{items:?}")
    };
    assert_eq!((e.offset, e.position), (12, 1), "{e}");
    assert!(
        matches!(&e.kind, EventKind::Error { ip: Some(0x1001), message } if message.contains("TNT bit") && message.contains("tip")),
        "{e}"
    );
    // Lost, it resumes at the TIP it could not use: 1009, a ret, then the end.
    assert_eq!(
        items[3..],
        [enabled(0x1009, 12)].map(|mut i| {
            if let FlowItem::Event(e) = &mut i {
                e.position = 1;
            }
            i
        })
    );
}

#[test]
fn an_address_outside_every_image_is_an_error_naming_it() {
    let t = Trace::new().fup(FupEvent::PacketGenEnable, 0x5000).tnt(&[true]);
    let k = kinds(&decode(&t));
    assert!(
        matches!(&k[1], EventKind::Error { ip: Some(0x5000), message } if message == "no image holds address 0x5000"),
        "{k:?}"
    );
}

#[test]
fn a_fault_binds_at_the_faulting_instruction() {
    // call 1000 from 100a: nop, je taken, jmp rax to 100f: ud2 faults (FUP.FAR with its own IP).
    let t = Trace::new()
        .fup(FupEvent::PacketGenEnable, 0x100a)
        .tnt(&[true])
        .tip(0x100f)
        .fup(FupEvent::FarTransfer, 0x100f)
        .tip(0x1007)
        .fup(FupEvent::PacketGenDisable, 0x1009);
    let items = decode(&t);
    let k = kinds(&items);
    assert_eq!(
        k,
        [
            EventKind::Enabled { ip: 0x100a },
            EventKind::Interrupt {
                ip: 0x100f,
                target: 0x1007
            },
            EventKind::Disabled { ip: Some(0x1009) },
        ]
    );
    let runs: Vec<&FlowItem> = items.iter().filter(|i| matches!(i, FlowItem::Run { .. })).collect();
    assert_eq!(
        runs,
        [&run(0x100a, 1), &run(0x1000, 2), &run(0x1005, 1), &run(0x1007, 1)]
    );
}

#[test]
fn fup_pge_while_tracing_means_tracing_was_stopped_silently() {
    let t = Trace::new()
        .fup(FupEvent::PacketGenEnable, 0x1000)
        .tnt(&[true])
        .fup(FupEvent::PacketGenEnable, 0x1009)
        .tip(0x100f);
    let k = kinds(&decode(&t));
    assert_eq!(
        k,
        [
            EventKind::Enabled { ip: 0x1000 },
            EventKind::Disabled { ip: None },
            EventKind::Enabled { ip: 0x1009 },
        ]
    );
}

#[test]
fn undecodable_packets_are_errors_then_the_decoder_waits_for_an_ip() {
    let mut t = Trace::new().fup(FupEvent::PacketGenEnable, 0x1000);
    t.bytes.push(0xc9); // reserved header
    let t = t.tnt(&[true]).fup(FupEvent::PacketGenEnable, 0x1007);
    let k = kinds(&decode(&t));
    assert!(
        matches!(&k[1], EventKind::Error { message, .. } if message.contains("reserved")),
        "{k:?}"
    );
    // Everything up to the next PSB is skipped: there is none, so nothing follows.
    assert_eq!(k.len(), 2, "{k:?}");
}

/// PIP switches the address space: 0x1004 holds `jmp rax` under one CR3 and `syscall` under
/// the other.
#[test]
fn pip_switches_between_address_spaces() {
    let mut a = AddressSpace::new();
    a.add(Image::from_raw("a", 0x1000, vec![0xff, 0xe0, 0x90, 0x90, 0xff, 0xe0]))
        .expect("add");
    let mut b = AddressSpace::new();
    b.add(Image::from_raw("b", 0x1004, vec![0x0f, 0x05])).expect("add");
    let mut t = Trace::new().fup(FupEvent::PacketGenEnable, 0x1000).tip(0x1004);
    let pip = Packet::Pip(crate::packet::Pip { cr3: 0xb000, pg: true });
    encode(&pip, &mut t.bytes).expect("valid");
    let t = t.fup(FupEvent::PacketGenDisable, 0x1006);
    let mut items = Vec::new();
    let spaces = vec![(Some(0xa000), &a), (Some(0xb000), &b)];
    FlowDecoder::with_spaces(&t.bytes, FlowConfig::default(), spaces).decode(&mut items);
    assert_eq!(
        items[1..3],
        [run(0x1000, 1), run(0x1004, 1)],
        "jmp rax in a, then syscall in b"
    );
    assert_eq!(kinds(&items)[1], EventKind::Disabled { ip: Some(0x1006) });
}

/// ```text
/// 2000: 74 02   je 2004
/// 2002: eb fe   jmp 2002      (for (;;);)
/// 2004: e8 fb ff ff ff   call 2004   (recursion with no branch between: never ends)
/// 2009: 0f 05   syscall
/// ```
fn spin_space() -> AddressSpace {
    let code = [0x74, 0x02, 0xeb, 0xfe, 0xe8, 0xfb, 0xff, 0xff, 0xff, 0x0f, 0x05];
    let mut s = AddressSpace::new();
    s.add(Image::from_raw("spin", 0x2000, code.to_vec())).expect("add");
    s
}

fn decode_in(space: &AddressSpace, t: &Trace) -> Vec<FlowItem> {
    let mut items = Vec::new();
    FlowDecoder::new(&t.bytes, FlowConfig::default(), space).decode(&mut items);
    items
}

fn instructions(items: &[FlowItem]) -> u64 {
    items
        .iter()
        .map(|i| match i {
            FlowItem::Run { count, .. } => *count,
            FlowItem::Event(_) => 0,
        })
        .sum()
}

/// A wrong TNT bit sends the walk into `for (;;);` (or into a recursion that needs nothing
/// from the trace) while the next packet binds elsewhere: an error at that packet's offset,
/// a short history, and decoding goes on from the next IP the trace gives.
#[test]
fn a_walk_the_trace_can_never_end_is_an_error_at_the_next_packet() {
    let spinning = spin_space();
    for (bit, what) in [(false, "jmp 2002"), (true, "call 2004")] {
        let t = Trace::new()
            .fup(FupEvent::PacketGenEnable, 0x2000)
            .tnt(&[bit])
            .fup(FupEvent::PacketGenDisable, 0x200b);
        let pgd_offset = PSB_BYTES.len() + 3 + 1;
        let items = decode_in(&spinning, &t);
        let k = kinds(&items);
        assert!(
            matches!(&k[1], EventKind::Error { message, .. } if message.contains("loops") && message.contains("pgd")),
            "{what}: {k:?}"
        );
        let error_offset = items.iter().find_map(|i| match i {
            FlowItem::Event(e) if matches!(e.kind, EventKind::Error { .. }) => Some(e.offset),
            _ => None,
        });
        assert_eq!(
            error_offset,
            Some(pgd_offset),
            "{what}: the offset of the packet that never binds"
        );
        assert!(instructions(&items) < 10, "{what}: {items:?}");
    }
    // A real spin: the interrupt's FUP binds inside the loop on its first pass, and the
    // history says the loop may have run any number of times before it.
    let t = Trace::new()
        .fup(FupEvent::PacketGenEnable, 0x2000)
        .tnt(&[false])
        .fup(FupEvent::PacketGenDisable, 0x2002);
    let items = decode_in(&spinning, &t);
    assert_eq!(
        kinds(&items),
        [
            EventKind::Enabled { ip: 0x2000 },
            EventKind::Spins {
                ip: 0x2002,
                instructions: None
            },
            EventKind::Disabled { ip: Some(0x2002) }
        ]
    );
    assert_eq!(items[1], run(0x2000, 1));
    // An interrupt in code that does not loop back (nop; nop; jmp rax) says nothing of the
    // kind.
    let t = Trace::new()
        .fup(FupEvent::PacketGenEnable, 0x1000)
        .tnt(&[false])
        .fup(FupEvent::PacketGenDisable, 0x1003);
    assert_eq!(
        kinds(&decode_in(&space(), &t)),
        [
            EventKind::Enabled { ip: 0x1000 },
            EventKind::Disabled { ip: Some(0x1003) }
        ]
    );
}

/// The trace ends with bits still in RTIT_TNT_BUFF and more instructions than its packets
/// show (tracing was stopped without FUP.PGD, §4.2.8): with the recording's end the decoder
/// uses those bits and stops at exactly the recorder's count; never past a branch that needs
/// a packet.
#[test]
fn past_the_last_packet_the_end_of_the_trace_gives_the_bits_and_the_count() {
    let space = space();
    let t = Trace::new().fup(FupEvent::PacketGenEnable, 0x1000);
    let with_end = |tnt: &[bool], instructions: u64| {
        let end = TraceEnd {
            tnt_buff: Tnt::from_bits(tnt),
            instructions,
        };
        let mut items = Vec::new();
        FlowDecoder::new(&t.bytes, FlowConfig::default(), &space)
            .with_end(Some(end))
            .decode(&mut items);
        instructions_of(&items)
    };
    fn instructions_of(items: &[FlowItem]) -> Vec<FlowItem> {
        items
            .iter()
            .filter(|i| matches!(i, FlowItem::Run { .. }))
            .cloned()
            .collect()
    }
    // Without the end: nothing after the last packet is known.
    assert_eq!(instructions_of(&decode_in(&space, &t)), []);
    // nop; je (not taken); nop; nop — stops at the count.
    assert_eq!(with_end(&[false], 4), [run(0x1000, 4)]);
    assert_eq!(with_end(&[false], 3), [run(0x1000, 3)]);
    // Taken: nop; je 1005; then `jmp rax` needs a TIP: the history stops before it.
    assert_eq!(with_end(&[true], 10), [run(0x1000, 2)]);
    // No bits left but a count: up to the branch that needs one.
    assert_eq!(with_end(&[], 10), [run(0x1000, 1)]);
}

/// A trace that ends while the program spins in `for (;;);` (a hang, stopped by a signal):
/// past the last packet the walk shows its first passes and counts the rest as spinning, so no count
/// (right or wrong) makes the history circle without bound.
#[test]
fn past_the_last_packet_a_loop_is_shown_once_and_the_rest_counted() {
    let space = spin_space();
    let t = Trace::new().fup(FupEvent::PacketGenEnable, 0x2000);
    for count in [1000, u64::MAX] {
        let end = TraceEnd {
            tnt_buff: Tnt::from_bits(&[false]),
            instructions: count,
        };
        let mut items = Vec::new();
        FlowDecoder::new(&t.bytes, FlowConfig::default(), &space)
            .with_end(Some(end))
            .decode(&mut items);
        let shown = instructions(&items);
        assert!(shown < 10, "{items:?}");
        let spins = kinds(&items).into_iter().find_map(|k| match k {
            EventKind::Spins { ip, instructions } => Some((ip, instructions)),
            _ => None,
        });
        assert_eq!(spins, Some((0x2002, Some(count - shown))), "{items:?}");
    }
}

/// The bits RTIT_TNT_BUFF held are progress like any other: a loop with a branch per pass
/// (`3000: nop; jne 3000`) walks on with them and stops at the count, not taken for a spin.
#[test]
fn the_end_of_trace_bits_are_progress_through_a_branching_loop() {
    let mut space = AddressSpace::new();
    space
        .add(Image::from_raw("loop", 0x3000, vec![0x90, 0x75, 0xfd, 0x0f, 0x05]))
        .expect("add");
    let t = Trace::new().fup(FupEvent::PacketGenEnable, 0x3000).tnt(&[true, true]);
    let end = TraceEnd {
        tnt_buff: Tnt::from_bits(&[true]),
        instructions: 7,
    };
    let mut items = Vec::new();
    FlowDecoder::new(&t.bytes, FlowConfig::default(), &space)
        .with_end(Some(end))
        .decode(&mut items);
    assert_eq!(instructions(&items), 7, "{items:?}");
    assert_eq!(kinds(&items), [EventKind::Enabled { ip: 0x3000 }], "{items:?}");
}

/// A taken `jne` whose target jumps back to the `jne`'s NLIP, then an interrupt there:
/// TNT(T), FUP.PGD with that NLIP. That reads as the branch leaving the IP filter range only
/// if the target is outside it; otherwise (no filter: RTIT_EVENTS' filter event "always", or
/// a range that holds the target) it is the interrupt, after the two instructions there.
///
/// ```text
/// 2000: 75 03   jne 2005
/// 2002: 90      nop
/// 2003: 90      nop
/// 2004: c3      ret
/// 2005: 90      nop
/// 2006: eb fa   jmp 2002
/// ```
#[test]
fn an_interrupt_at_a_taken_branchs_nlip_is_a_filter_exit_only_if_the_target_is_outside() {
    let mut space = AddressSpace::new();
    let code = [0x75, 0x03, 0x90, 0x90, 0xc3, 0x90, 0xeb, 0xfa];
    space.add(Image::from_raw("code", 0x2000, code.to_vec())).expect("add");
    let t = Trace::new()
        .fup(FupEvent::PacketGenEnable, 0x2000)
        .tnt(&[true])
        .fup(FupEvent::PacketGenDisable, 0x2002);
    let decode = |config: FlowConfig| {
        let mut items = Vec::new();
        FlowDecoder::new(&t.bytes, config, &space).decode(&mut items);
        let runs: Vec<FlowItem> = items
            .iter()
            .filter(|i| matches!(i, FlowItem::Run { .. }))
            .cloned()
            .collect();
        (kinds(&items), runs)
    };
    let interrupt = [run(0x2000, 1), run(0x2005, 2)];
    let (k, runs) = decode(FlowConfig::from_rtit(0, 0b110_111, [0; 4]));
    assert_eq!(
        k,
        [
            EventKind::Enabled { ip: 0x2000 },
            EventKind::Disabled { ip: Some(0x2002) }
        ]
    );
    assert_eq!(runs, interrupt, "the branch, then its target's two");
    // A filter range that holds the target: the branch stayed in it, the same.
    let range0 = |limit| FlowConfig::from_rtit(0, 0b110_000, [0x2000, 0, limit, 0]);
    assert_eq!(decode(range0(0x3000)).1, interrupt);
    // One that ends before the target: the same packets are the branch leaving it.
    assert_eq!(decode(range0(0x2005)).1, [run(0x2000, 1)]);
    // The filter unknown: read as leaving, as before.
    assert_eq!(decode(FlowConfig::from_rtit_ctl(0)).1, [run(0x2000, 1)]);
}

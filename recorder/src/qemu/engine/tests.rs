//! The retirement rules on hand-made blocks: the truth the engine records is what retired.

use super::*;
use crate::qemu::block::Block;
use rtit_replay_core::packet::{DecoderConfig, FupEvent, Packet, PacketDecoder};

/// A block of `(ip, bytes)` instructions.
fn block(insns: &[(u64, &[u8])]) -> Block {
    Block::translate(insns.iter().copied()).expect("translates")
}

fn engine() -> Engine {
    Engine::new(
        ModelOptions::default(),
        RtitConfig::user_process(0x1000),
        Start::Entry,
        true,
    )
}

fn full(n: u64) -> Counts {
    Counts { started: n }
}

const NOP: &[u8] = &[0x90];
/// rep stosb
const REP_STOSB: &[u8] = &[0xf3, 0xaa];
/// mov [rax], ecx (a store)
const STORE: &[u8] = &[0x89, 0x08];
/// jmp rel8 back to 0x1000 from 0x1003
const JMP_BACK: &[u8] = &[0xeb, 0xfb];

#[test]
fn a_rep_instruction_retires_once_however_many_iterations() {
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, REP_STOSB)]));
    let r = e.add_block(block(&[(0x1001, REP_STOSB)]));
    let b = e.add_block(block(&[(0x1003, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    e.executed(r, full(2)).expect("iteration");
    e.executed(r, full(1)).expect("iteration");
    e.executed(b, full(1)).expect("done");
    assert_eq!(e.take_truth(), [0x1000, 0x1001]);
}

#[test]
fn a_fault_in_the_middle_of_a_block_retires_what_came_before() {
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, STORE), (0x1003, NOP)]));
    let handler = e.add_block(block(&[(0x5000, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    e.executed(handler, Counts { started: 2 }).expect("handler");
    assert_eq!(e.take_truth(), [0x1000]);
    assert_eq!((e.stats.faults, e.last_fault()), (1, Some(0x1001)));
}

#[test]
fn a_store_into_the_block_re_runs_from_the_store() {
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, STORE), (0x1003, NOP)]));
    let again = e.add_block(block(&[(0x1001, STORE), (0x1003, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    e.executed(again, Counts { started: 2 }).expect("re-run");
    assert_eq!(
        e.stats,
        Stats {
            blocks: 1,
            restarts: 1,
            ..Stats::default()
        }
    );
    assert_eq!(e.take_truth(), [0x1000]);
}

/// A block ending in a store at 0x1001, then a signal handler at 0x5000 whose frame resumes
/// at `resume` (none: a signal `rtit record` did not log).
fn store_then_handler(resume: Option<u64>) -> Engine {
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, STORE)]));
    let handler = e.add_block(block(&[(0x5000, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    if let Some(resume) = resume {
        e.signal_delivered(0x5000, resume, 0);
    }
    e.executed(handler, full(2)).expect("handler");
    e
}

#[test]
fn a_signal_frame_says_whether_the_last_store_retired() {
    // The frame resumes after it: it retired, and the signal interrupted after it.
    let mut e = store_then_handler(Some(0x1003));
    assert_eq!(e.take_truth(), [0x1000, 0x1001]);
    assert_eq!((e.stats.faults, e.stats.interrupts, e.stats.gaps), (0, 1, 0));
    // It resumes at the store itself: the store faulted.
    let mut e = store_then_handler(Some(0x1001));
    assert_eq!(e.take_truth(), [0x1000]);
    assert_eq!((e.stats.faults, e.last_fault()), (1, Some(0x1001)));
    // No frame: whether the store retired is unknown, and the trace says so.
    let e = store_then_handler(None);
    assert_eq!((e.stats.faults, e.stats.interrupts, e.stats.gaps), (0, 0, 1));
}

#[test]
fn a_death_by_sigsegv_after_a_store_is_its_fault() {
    for (signal, faults) in [(11, 1), (7, 1), (15, 0)] {
        let mut e = engine();
        let a = e.add_block(block(&[(0x1000, NOP), (0x1001, STORE)]));
        e.executed(a, Counts::default()).expect("starts");
        let fault = e.finish(full(2), Some(signal));
        assert_eq!(e.stats.faults, faults, "signal {signal}");
        assert_eq!(fault, (faults == 1).then_some(0x1001), "signal {signal}");
        let truth = e.take_truth();
        assert_eq!(truth.len(), 2 - faults as usize, "signal {signal}: {truth:x?}");
    }
    // Which signal is unknown: so is whether the store retired.
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, STORE)]));
    e.executed(a, Counts::default()).expect("starts");
    assert_eq!(e.finish(full(2), None), None);
    assert_eq!((e.stats.faults, e.stats.gaps), (0, 1));
}

#[test]
fn a_loop_retires_its_branch_every_time() {
    let mut e = engine();
    let a = e.add_block(block(&[
        (0x1000, NOP),
        (0x1001, NOP),
        (0x1002, NOP),
        (0x1003, JMP_BACK),
    ]));
    e.executed(a, Counts::default()).expect("starts");
    e.executed(a, full(4)).expect("again");
    e.executed(a, full(4)).expect("again");
    assert_eq!(e.take_truth().len(), 8);
    assert_eq!(e.stats.anomalies, 0);
}

#[test]
fn an_unknown_branch_outcome_before_a_signal_is_a_gap_not_a_guess() {
    let mut e = engine();
    // jne +2 at 0x1000: either 0x1002 or 0x1004; the next block is a signal handler.
    let a = e.add_block(block(&[(0x1000, &[0x75, 0x02])]));
    let handler = e.add_block(block(&[(0x5000, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    e.executed(handler, full(1)).expect("handler");
    assert_eq!(e.stats.gaps, 1);
    let trace = e.take_trace();
    // FUP.BuffOvf (§4.2.5) carrying the handler: tracing resumes there after a gap.
    let packets: Vec<_> = PacketDecoder::new(&trace, DecoderConfig::default())
        .filter_map(Result::ok)
        .collect();
    assert!(
        packets
            .iter()
            .any(|d| matches!(d.packet, Packet::Fup(FupEvent::BufferOverflow, _)) && d.ip == Some(0x5000)),
        "{packets:?}"
    );
}

#[test]
fn the_signal_frame_tells_where_an_unknown_branch_went() {
    // jne +2 at 0x1000: 0x1002 or 0x1004. The frame at the handler's entry says the
    // interrupted code resumes at 0x1004: the branch was taken, then the signal came.
    let run = |delivered: Option<(u64, u64)>| {
        let mut e = engine();
        let a = e.add_block(block(&[(0x1000, &[0x75, 0x02])]));
        let handler = e.add_block(block(&[(0x5000, NOP)]));
        e.executed(a, Counts::default()).expect("starts");
        if let Some((at, resume)) = delivered {
            e.signal_delivered(at, resume, 0);
        }
        e.executed(handler, full(1)).expect("handler");
        e
    };
    let mut e = run(Some((0x5000, 0x1004)));
    assert_eq!((e.stats.gaps, e.stats.interrupts), (0, 1));
    assert_eq!(e.take_truth(), [0x1000]);
    let written = packets(&e.take_trace());
    assert!(written.iter().any(|(p, _)| matches!(p, Packet::Tnt(_))), "{written:?}");
    assert!(
        written
            .iter()
            .any(|(p, ip)| matches!(p, Packet::Fup(FupEvent::PacketGenDisable, _)) && *ip == Some(0x1004)),
        "the interrupt's FUP.PGD carries where the code resumes: {written:?}"
    );
    assert!(
        !written
            .iter()
            .any(|(p, _)| matches!(p, Packet::Fup(FupEvent::BufferOverflow, _))),
        "{written:?}"
    );
    // A resume address the branch cannot go to, or a delivery to another handler, is no
    // answer: a gap, as without one.
    assert_eq!(run(Some((0x5000, 0x1003))).stats.gaps, 1);
    assert_eq!(run(Some((0x6000, 0x1004))).stats.gaps, 1);
}

#[test]
fn a_signal_delivery_is_good_for_the_next_block_only() {
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, &[0x75, 0x02])]));
    let b = e.add_block(block(&[(0x1004, NOP), (0x1005, &[0xeb, 0xf9])]));
    let handler = e.add_block(block(&[(0x5000, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    e.signal_delivered(0x5000, 0x1004, 0);
    e.executed(b, full(1)).expect("taken, no signal after all");
    e.executed(a, full(2)).expect("again");
    e.executed(handler, full(1)).expect("a signal rtit did not log");
    assert_eq!(e.stats.gaps, 1, "{:?}", e.stats);
}

/// The packets of a trace with their (decompressed) IPs.
fn packets(trace: &[u8]) -> Vec<(Packet, Option<u64>)> {
    PacketDecoder::new(trace, DecoderConfig::default())
        .map(|d| d.expect("the unit model's bytes decode"))
        .map(|d| (d.packet, d.ip))
        .collect()
}

#[test]
fn a_stop_between_blocks_leaves_the_last_branches_in_tnt_buff() {
    let mut e = engine();
    // nop; jne 0x1000: a loop whose every turn is a taken conditional branch.
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, &[0x75, 0xfd])]));
    e.executed(a, Counts::default()).expect("starts");
    e.executed(a, full(2)).expect("again");
    e.executed(a, full(2)).expect("again");
    let written = packets(&e.take_trace());
    e.stop_before(a, full(2));
    assert!(e.ended());
    assert_eq!(e.take_truth().len(), 6, "three turns retired");
    assert_eq!(e.position(), 6);
    assert!(e.take_trace().is_empty(), "nothing written at the stop: {written:?}");
    assert_eq!(e.tnt_buff(), 0b1111, "three taken bits behind the leading 1 (§3.3.13)");
    // Blocks after the stop change nothing.
    e.executed(a, full(2)).expect("ignored");
    assert_eq!(e.position(), 6);
}

#[test]
fn a_stop_inside_a_system_call_counts_the_call_and_adds_nothing() {
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, &[0x0f, 0x05])]));
    e.executed(a, Counts::default()).expect("starts");
    assert_eq!(e.syscall(35, Call::Returns, full(2)), SyscallAction::Continue);
    let before = e.take_trace();
    e.stop();
    assert!(e.ended());
    assert_eq!(e.finish(full(0), None), None, "nothing left to settle");
    assert_eq!(e.position(), 2, "the nop and the syscall");
    assert!(e.take_trace().is_empty(), "no packet after the call's");
    assert_eq!(e.tnt_buff(), 1, "empty: the call's FUP flushed the TNT bits");
    assert!(
        matches!(
            packets(&before).last(),
            Some((Packet::Fup(FupEvent::PacketGenDisable, _), Some(0x1003)))
        ),
        "the call's FUP.PGD (the IP after it) ends the trace: {:?}",
        packets(&before)
    );
}

#[test]
fn a_stop_during_a_block_leaves_the_block_out() {
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, &[0x75, 0xfd])]));
    e.executed(a, Counts::default()).expect("starts");
    e.executed(a, full(2)).expect("again");
    e.stop();
    assert_eq!(e.position(), 2, "the first turn only: the second one's end is unknown");
    assert_eq!(e.finish(full(1), None), None);
    assert_eq!(e.position(), 2);
}

#[test]
fn a_block_translated_again_keeps_its_id() {
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, JMP_BACK)]));
    let b = e.add_block(block(&[(0x1003, NOP)]));
    assert_eq!(
        e.add_block(block(&[(0x1000, NOP), (0x1001, JMP_BACK)])),
        a,
        "the same code again"
    );
    // Other code at the same address (the program rewrote it) is another block.
    let c = e.add_block(block(&[(0x1000, NOP), (0x1001, NOP)]));
    assert!(c != a && c != b);
    assert_eq!(e.add_block(block(&[(0x1000, NOP), (0x1001, NOP)])), c);
    assert_eq!(e.block(c).kept(), 2);
}

/// The batch loop (`executed_all`, whose stretches settle common blocks with what holds for
/// the whole stretch checked once) writes what settling one block at a time writes, on a
/// random walk through conditional branches, calls, returns (compressed or not) and
/// indirect jumps, with and without a signal handler among the targets.
#[test]
fn batches_write_what_one_block_at_a_time_writes() {
    const JNE_B: &[u8] = &[0x0f, 0x85, 0xf9, 0x0f, 0x00, 0x00]; // 0x1001 -> 0x2000
    const CALL_D: &[u8] = &[0xe8, 0xf4, 0x1f, 0x00, 0x00]; // 0x1007 -> 0x3000
    const RET: &[u8] = &[0xc3];
    const JMP_RAX: &[u8] = &[0xff, 0xe0];
    const JMP_A: &[u8] = &[0xe9, 0xfa, 0xef, 0xff, 0xff]; // 0x2001 -> 0x1000
    for handler in [false, true] {
        let build = || {
            let mut e = Engine::new(
                ModelOptions::default(),
                RtitConfig::user_process(0x1000),
                Start::Entry,
                false,
            );
            if handler {
                e.note_handler(0x2000);
            }
            let ids = [
                e.add_block(block(&[(0x1000, NOP), (0x1001, JNE_B)])), // A
                e.add_block(block(&[(0x1007, CALL_D)])),               // C
                e.add_block(block(&[(0x3000, NOP), (0x3001, RET)])),   // D
                e.add_block(block(&[(0x100c, JMP_RAX)])),              // E
                e.add_block(block(&[(0x2000, NOP), (0x2001, JMP_A)])), // B
            ];
            (e, ids)
        };
        let (mut batched, ids) = build();
        let (mut single, _) = build();
        let (a, c, d, e_, b) = (ids[0], ids[1], ids[2], ids[3], ids[4]);
        let kept = |id: u32| batched.block(id).kept() as u64;
        // A walk: each block with the count of the one before it.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut coin = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x & 1 != 0
        };
        let mut walk = vec![(a, Counts::default())];
        let mut at = a;
        for _ in 0..20_000 {
            let next = match at {
                _ if at == a => [b, c][usize::from(coin())],
                _ if at == c => d,
                // A return to its call's NLIP (compressed) or elsewhere (a TIP).
                _ if at == d => [e_, a][usize::from(coin() && coin())],
                _ if at == e_ => [a, b][usize::from(coin())],
                _ => a,
            };
            walk.push((next, full(kept(at))));
            at = next;
        }
        for &(id, counts) in &walk {
            single.executed(id, counts).expect("settles");
        }
        batched.executed(walk[0].0, walk[0].1).expect("starts");
        let mut rest = &walk[1..];
        let mut size = 1;
        while !rest.is_empty() {
            let n = size.min(rest.len());
            batched.executed_all(rest[..n].iter().copied());
            rest = &rest[n..];
            size = size * 3 % 1000 + 1;
        }
        assert!(batched.stats.blocks > 19_000, "{:?}", batched.stats);
        assert_eq!(
            (batched.position(), batched.stats),
            (single.position(), single.stats),
            "handler {handler}"
        );
        let (bytes, one) = (batched.take_trace(), single.take_trace());
        assert!(bytes.len() > 1000, "a trace was written: {} bytes", bytes.len());
        assert!(bytes == one, "handler {handler}: the same bytes");
    }
}

/// After a system call, until the next block starts, the running block's base is where the
/// block that made the call began: `rtit record` adds the block's started instructions to it
/// at a stop between the two (a signal on the call's return), so the base after the call
/// would place the signal a block late.
#[test]
fn the_base_after_a_system_call_is_its_blocks() {
    const SYSCALL: &[u8] = &[0x0f, 0x05];
    let mut e = Engine::new(
        ModelOptions::default(),
        RtitConfig::user_process(0x1000),
        Start::Entry,
        false,
    );
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, NOP), (0x1002, SYSCALL)]));
    let b = e.add_block(block(&[(0x1004, NOP), (0x1005, SYSCALL)]));
    e.executed(a, Counts::default()).expect("starts");
    assert_eq!(e.block_base(), Some(0));
    assert_eq!(e.syscall(39, Call::Returns, full(3)), SyscallAction::Continue);
    assert_eq!((e.position(), e.block_base()), (3, Some(0)));
    e.executed(b, full(3)).expect("after the call");
    assert_eq!(e.block_base(), Some(3));
    assert_eq!(e.syscall(39, Call::Returns, full(2)), SyscallAction::Continue);
    assert_eq!((e.position(), e.block_base()), (5, Some(3)));
}

/// What a plugin that counts a block at once says of a block cut short before its last
/// instruction.
const CUT: Counts = Counts { started: 0 };

#[test]
fn a_block_cut_short_by_a_fault_stops_where_the_frame_resumes() {
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, STORE), (0x1003, NOP)]));
    let handler = e.add_block(block(&[(0x5000, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    e.signal_delivered(0x5000, 0x1001, 0);
    e.executed(handler, CUT).expect("handler");
    assert_eq!(e.take_truth(), [0x1000]);
    assert_eq!((e.stats.faults, e.last_fault(), e.stats.gaps), (1, Some(0x1001), 0));
}

#[test]
fn a_block_cut_short_by_a_store_into_it_re_runs_from_the_store() {
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, STORE), (0x1003, NOP)]));
    let again = e.add_block(block(&[(0x1001, STORE), (0x1003, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    e.executed(again, CUT).expect("re-run");
    assert_eq!((e.stats.restarts, e.stats.gaps), (1, 0));
    assert_eq!(e.take_truth(), [0x1000]);
}

#[test]
fn a_death_within_a_block_is_where_the_signal_found_it() {
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, STORE), (0x1003, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    e.signal_at(0x1001);
    assert_eq!(e.finish(CUT, Some(11)), Some(0x1001));
    assert_eq!(e.take_truth(), [0x1000]);
}

#[test]
fn a_block_cut_short_where_nothing_tells_is_a_gap() {
    // A handler without a frame: what the block ran is lost, up to the handler.
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, STORE), (0x1003, NOP)]));
    let handler = e.add_block(block(&[(0x5000, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    e.executed(handler, CUT).expect("handler");
    assert_eq!((e.stats.gaps, e.stats.faults), (1, 0));
    assert!(e.take_truth().is_empty(), "nothing of the cut block is claimed");
    // A frame that resumes outside the block says nothing of it either.
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, STORE), (0x1003, NOP)]));
    let handler = e.add_block(block(&[(0x5000, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    e.signal_delivered(0x5000, 0x7000, 0);
    e.executed(handler, CUT).expect("handler");
    assert_eq!(e.stats.gaps, 1);
    // The process died, and no signal report said where.
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, STORE), (0x1003, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    assert_eq!(e.finish(CUT, Some(11)), None);
    assert_eq!(e.stats.gaps, 1);
    assert!(e.take_truth().is_empty());
}

#[test]
fn an_indirect_branch_resuming_at_itself_faulted_when_sigsegv_came() {
    // jmp *(%rax): it may have gone to itself; SIGSEGV says its memory read faulted.
    const JMP_MEM: &[u8] = &[0xff, 0x20];
    let run = |signal: i32| {
        let mut e = engine();
        let a = e.add_block(block(&[(0x1000, NOP), (0x1001, JMP_MEM)]));
        let handler = e.add_block(block(&[(0x5000, NOP)]));
        e.note_handler(0x5000);
        e.executed(a, Counts::default()).expect("starts");
        e.signal_delivered(0x5000, 0x1001, signal);
        e.executed(handler, full(2)).expect("handler");
        e
    };
    let mut e = run(11);
    assert_eq!((e.stats.faults, e.last_fault()), (1, Some(0x1001)));
    assert_eq!(e.take_truth(), [0x1000], "the jump did not retire");
    assert_eq!(e.deliveries(), [Some(1)], "the handler's entry after the nop");
    // Another signal: the jump went to itself, then the signal came.
    let mut e = run(10);
    assert_eq!(e.stats.faults, 0);
    assert_eq!(e.take_truth(), [0x1000, 0x1001]);
    assert_eq!(e.deliveries(), [Some(2)]);
}

#[test]
fn each_stretch_lists_the_pages_its_code_ran_on() {
    use rtit_replay_core::recording::code_ran::{CodeRan, STRETCH};
    const JNE_A: &[u8] = &[0x0f, 0x85, 0xf9, 0xff, 0xff, 0xff]; // 0x1001 -> 0x1000
    const JMP_B: &[u8] = &[0xe9, 0xf4, 0x3f, 0x00, 0x00]; // 0x1007 -> 0x5000
    const JMP_A: &[u8] = &[0xe9, 0xfa, 0xbf, 0xff, 0xff]; // 0x5001 -> 0x1000
                                                          // On the fast path (no truth) and one block at a time (with the truth).
    for truth in [false, true] {
        let mut e = Engine::new(
            ModelOptions::default(),
            RtitConfig::user_process(0x1000),
            Start::Entry,
            truth,
        );
        let a = e.add_block(block(&[(0x1000, NOP), (0x1001, JNE_A)]));
        let c = e.add_block(block(&[(0x1007, JMP_B)]));
        let b = e.add_block(block(&[(0x5000, NOP), (0x5001, JMP_A)]));
        e.executed(a, Counts::default()).expect("starts");
        // A loops past a stretch's length (two positions a round), then C and B run once and A
        // a few times more: page 5 runs only in the second stretch.
        let rounds = STRETCH / 2 + 1000;
        let mut walk: Vec<(u32, Counts)> = (0..rounds).map(|_| (a, full(2))).collect();
        walk.extend([(c, full(2)), (b, full(1)), (a, full(2))]);
        walk.extend((0..10).map(|_| (a, full(2))));
        for batch in walk.chunks(1024) {
            e.executed_all(batch.iter().copied());
        }
        e.stop();
        let mut bytes = Vec::new();
        bytes.extend(e.take_code(false));
        bytes.extend(e.take_code(true));
        let code = CodeRan::decode(&bytes).expect("a list");
        assert_eq!(code.covers(), e.position());
        assert_eq!(code.stretch_of(e.position() - 1), Some(1), "two stretches");
        let first = code.end_of(0);
        assert!(
            (STRETCH..STRETCH + 2 * 1024).contains(&first),
            "cut at the batch past {STRETCH}: {first}"
        );
        assert!(!code.may_run(0, first, [0x5000]), "B did not run in the first stretch");
        assert!(code.may_run(first, code.covers(), [0x5001]), "it ran in the second");
        assert!(code.may_run(0, first, [0x1000]) && code.may_run(first, code.covers(), [0x1001]));
        assert!(!code.may_run(0, code.covers(), [0x9000]), "nothing ran on page 9");
    }
}

/// syscall
const SYSCALL: &[u8] = &[0x0f, 0x05];

#[test]
fn a_switch_at_a_system_call_retires_the_call_when_its_thread_runs_again() {
    let mut e = engine();
    e.set_threaded();
    // Thread 1: nop; syscall, then nop after it. Thread 2: nop; syscall.
    let one = e.add_block(block(&[(0x1000, NOP), (0x1001, SYSCALL)]));
    let after = e.add_block(block(&[(0x1003, NOP), (0x1004, SYSCALL)]));
    let two = e.add_block(block(&[(0x2000, NOP), (0x2001, SYSCALL)]));
    e.executed(one, Counts::default()).expect("starts");
    let at = |from, left, to, resume| Switch { from, left, to, resume };
    // Thread 1 waits in its call; thread 2 starts.
    assert_eq!(
        e.switch(at(1, Left::Syscall(full(2)), 2, Resume::Fresh(0x2000))),
        Some((1, 0x2000))
    );
    e.executed(two, Counts::default()).expect("thread 2");
    // Thread 2 waits in its call; thread 1's call retires, then it goes on.
    assert_eq!(
        e.switch(at(2, Left::Syscall(full(2)), 1, Resume::Syscall)),
        Some((2, 0x1001))
    );
    assert_eq!(e.waiting_at(2), Some(0x2001));
    assert_eq!(e.syscall(0, Call::Returns, full(2)), SyscallAction::Continue);
    e.executed(after, full(2)).expect("after the call");
    assert_eq!(e.stats.anomalies, 0);
    assert_eq!(e.take_truth(), [0x1000, 0x2000, 0x1001]);
    let written = packets(&e.take_trace());
    let at_ip = |event, ip| {
        written
            .iter()
            .any(|(p, at)| matches!(p, Packet::Fup(e, _) if *e == event) && *at == Some(ip))
    };
    assert!(
        at_ip(FupEvent::PacketGenDisable, 0x1001),
        "thread 1 leaves at its call: {written:?}"
    );
    assert!(at_ip(FupEvent::PacketGenEnable, 0x2000), "thread 2 starts: {written:?}");
    assert!(
        at_ip(FupEvent::PacketGenDisable, 0x2001),
        "thread 2 leaves at its call: {written:?}"
    );
    assert!(
        at_ip(FupEvent::PacketGenEnable, 0x1001),
        "thread 1 resumes at its call: {written:?}"
    );
    assert!(
        at_ip(FupEvent::PacketGenEnable, 0x1003),
        "and returns from it: {written:?}"
    );
}

#[test]
fn a_switch_after_an_exit_and_one_that_does_not_fit_are_told_apart() {
    let mut e = engine();
    e.set_threaded();
    let one = e.add_block(block(&[(0x1000, NOP), (0x1001, SYSCALL)]));
    let two = e.add_block(block(&[(0x2000, NOP), (0x2001, SYSCALL)]));
    e.executed(one, Counts::default()).expect("starts");
    // Thread 1's `exit` does not end a recording with threads.
    assert_eq!(e.syscall(60, Call::Returns, full(2)), SyscallAction::Continue);
    assert!(!e.ended());
    let exited = Switch {
        from: 1,
        left: Left::Exited,
        to: 2,
        resume: Resume::Fresh(0x2000),
    };
    assert_eq!(e.switch(exited), Some((2, 0x2000)));
    e.executed(two, Counts::default()).expect("thread 2");
    // Thread 3 never waited in a call: nothing to resume.
    let unknown = Switch {
        from: 2,
        left: Left::Syscall(full(2)),
        to: 3,
        resume: Resume::Syscall,
    };
    assert_eq!(e.switch(unknown), None);
    assert_eq!(e.stats.anomalies, 1);
    assert_eq!(e.take_truth(), [0x1000, 0x1001, 0x2000]);
}

#[test]
fn a_thread_interrupted_before_a_block_resumes_there() {
    let mut e = engine();
    e.set_threaded();
    // Thread 1 loops: nop; jmp back. Thread 2: nop; syscall.
    let one = e.add_block(block(&[(0x1000, NOP), (0x1001, &[0xeb, 0xfd])]));
    let two = e.add_block(block(&[(0x2000, NOP), (0x2001, SYSCALL)]));
    e.executed(one, Counts::default()).expect("starts");
    e.executed(one, full(2)).expect("again");
    let preempted = Left::Preempted {
        counts: full(2),
        next: one,
    };
    let s = Switch {
        from: 1,
        left: preempted,
        to: 2,
        resume: Resume::Fresh(0x2000),
    };
    assert_eq!(e.switch(s), Some((4, 0x2000)));
    e.executed(two, Counts::default()).expect("thread 2");
    let back = Switch {
        from: 2,
        left: Left::Syscall(full(2)),
        to: 1,
        resume: Resume::Block(one),
    };
    assert_eq!(e.switch(back), Some((5, 0x1000)));
    e.executed(one, Counts::default()).expect("thread 1 again");
    e.executed(one, full(2)).expect("and on");
    assert_eq!(e.stats.anomalies, 0);
    assert_eq!(e.take_truth(), [0x1000, 0x1001, 0x1000, 0x1001, 0x2000, 0x1000, 0x1001]);
    let written = packets(&e.take_trace());
    assert!(
        written
            .iter()
            .any(|(p, ip)| matches!(p, Packet::Fup(FupEvent::PacketGenDisable, _)) && *ip == Some(0x1000)),
        "thread 1 leaves before its block: {written:?}"
    );
}

/// A thread's call retires when the thread runs again, maybe in a later stretch of
/// `code-ran.bin` than the one its block was noted in: that stretch lists its page too (a
/// park cut a stretch while a worker waited in `rt_sigprocmask`, and replay refused the list).
#[test]
fn a_call_that_retires_after_a_cut_is_listed_in_the_stretch_it_retires_in() {
    use rtit_replay_core::recording::code_ran::{CodeRan, STRETCH};
    const LOOP: &[u8] = &[0xeb, 0xfd]; // 0x5001 -> 0x5000
    let mut e = engine();
    e.set_threaded();
    // The call alone on its page: the block after it is on the next.
    let one = e.add_block(block(&[(0x1ffd, NOP), (0x1ffe, SYSCALL)]));
    let after = e.add_block(block(&[(0x2000, NOP), (0x2001, SYSCALL)]));
    let two = e.add_block(block(&[(0x5000, NOP), (0x5001, LOOP)]));
    e.executed(one, Counts::default()).expect("starts");
    let switch = |from, left, to, resume| Switch { from, left, to, resume };
    e.switch(switch(1, Left::Syscall(full(2)), 2, Resume::Fresh(0x5000)))
        .expect("thread 2");
    e.executed(two, Counts::default()).expect("thread 2 runs");
    let rounds: Vec<(u32, Counts)> = (0..STRETCH / 2 + 1000).map(|_| (two, full(2))).collect();
    for batch in rounds.chunks(1024) {
        e.executed_all(batch.iter().copied());
    }
    let left = Left::Preempted {
        counts: full(2),
        next: two,
    };
    e.switch(switch(2, left, 1, Resume::Syscall)).expect("thread 1 again");
    let call = e.position();
    assert_eq!(e.syscall(0, Call::Returns, full(2)), SyscallAction::Continue);
    e.executed(after, full(2)).expect("after the call");
    e.stop();
    let mut bytes = e.take_code(false);
    bytes.extend(e.take_code(true));
    let code = CodeRan::decode(&bytes).expect("a list");
    let first = code.end_of(0);
    assert!(first <= call, "cut before the call retires: {first} > {call}");
    assert!(
        code.may_run(first, code.covers(), [0x1ffe]),
        "the call's page, after the cut"
    );
    assert_eq!(e.stats.anomalies, 0);
}

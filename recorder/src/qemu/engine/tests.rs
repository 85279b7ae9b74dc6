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
    Counts {
        started: n,
        accessed: 1,
    }
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
    e.executed(
        handler,
        Counts {
            started: 2,
            accessed: 0,
        },
    )
    .expect("handler");
    assert_eq!(e.take_truth(), [0x1000]);
    assert_eq!((e.stats.faults, e.last_fault()), (1, Some(0x1001)));
}

#[test]
fn a_store_into_the_block_re_runs_from_the_store() {
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, STORE), (0x1003, NOP)]));
    let again = e.add_block(block(&[(0x1001, STORE), (0x1003, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    e.executed(
        again,
        Counts {
            started: 2,
            accessed: 0,
        },
    )
    .expect("re-run");
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

#[test]
fn a_signal_after_a_completed_store_interrupts_after_it() {
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, STORE)]));
    let handler = e.add_block(block(&[(0x5000, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    e.executed(handler, full(2)).expect("handler");
    assert_eq!(e.take_truth(), [0x1000, 0x1001]);
    assert_eq!((e.stats.faults, e.stats.interrupts), (0, 1));
    // The same store whose access never completed faulted instead.
    let mut e = engine();
    let a = e.add_block(block(&[(0x1000, NOP), (0x1001, STORE)]));
    let handler = e.add_block(block(&[(0x5000, NOP)]));
    e.executed(a, Counts::default()).expect("starts");
    e.executed(
        handler,
        Counts {
            started: 2,
            accessed: 0,
        },
    )
    .expect("handler");
    assert_eq!(e.take_truth(), [0x1000]);
    assert_eq!(e.stats.faults, 1);
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

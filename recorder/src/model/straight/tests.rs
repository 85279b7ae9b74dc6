//! The run at once, and a near branch on its own, against the unit model one instruction at
//! a time: the same bytes and the same registers after every part, under random configurations (timing packets, IP filters,
//! RET compression, PSB periods) and between random other inputs (branches, interrupts,
//! faults, overflows, CR3 writes).

use proptest::prelude::*;
use rtit_replay_core::regs::{ctl, events, EventId};

use super::super::tests::props::{address, config, input};
use super::super::{CpuState, Input, ModelOptions, Retired, RtitConfig, UnitModel};

/// What a test feeds: a run of consecutive non-branch instructions, a block (such a run and
/// an instruction after it), or any other input.
#[derive(Debug, Clone)]
enum Part {
    Run { ip: u64, lens: Vec<u8> },
    Block { ip: u64, lens: Vec<u8>, last: Input },
    Other(Input),
}

fn part() -> impl Strategy<Value = Part> {
    prop_oneof![
        3 => (address(), prop::collection::vec(1u8..16, 0..24)).prop_map(|(ip, lens)| Part::Run { ip, lens }),
        2 => (address(), prop::collection::vec(1u8..16, 0..24), input())
            .prop_map(|(ip, lens, last)| Part::Block { ip, lens, last }),
        2 => input().prop_map(Part::Other),
    ]
}

/// Configurations where the run at once applies as often as not: no IP filter half the time.
fn configuration() -> impl Strategy<Value = RtitConfig> {
    (config(), any::<bool>(), any::<bool>()).prop_map(|(mut c, no_ranges, plain_events)| {
        if no_ranges {
            c.lip = [0; 4];
        }
        if plain_events {
            c.events = events(EventId::AlwaysOn, EventId::AlwaysOff);
            c.ctl &= !(ctl::MTC_EN | ctl::CYCLE_ACC);
        }
        c
    })
}

fn programmed(config: &RtitConfig, start: u64, options: ModelOptions) -> UnitModel {
    let mut m = UnitModel::new(CpuState::user(start, 0x5000), options);
    m.program(config).expect("a valid configuration");
    m
}

/// Feeds a run one instruction at a time.
fn one_by_one(m: &mut UnitModel, ip: u64, lens: &[u8]) {
    let mut at = ip;
    for &len in lens {
        m.retire(&Retired::plain(at, len));
        at = at.wrapping_add(u64::from(len));
    }
}

/// Feeds `parts` to the oracle one instruction at a time and to a copy with runs at once,
/// comparing them after each part; returns how many runs and branches the copy took on its
/// fast path.
fn compare(config: &RtitConfig, start: u64, options: ModelOptions, parts: &[Part]) -> Result<u64, TestCaseError> {
    let mut oracle = programmed(config, start, options);
    let mut fast = oracle.clone();
    let mut at_once = 0;
    for (i, p) in parts.iter().enumerate() {
        match p {
            Part::Run { ip, lens } => {
                one_by_one(&mut oracle, *ip, lens);
                let next = lens.iter().fold(*ip, |a, &l| a.wrapping_add(u64::from(l)));
                if fast.retire_straight(lens.len() as u64, next) {
                    at_once += u64::from(!lens.is_empty());
                } else {
                    one_by_one(&mut fast, *ip, lens);
                }
            }
            Part::Block { ip, lens, last } => {
                one_by_one(&mut oracle, *ip, lens);
                oracle.apply(last);
                match last {
                    Input::Retire(r) if fast.retire_block(lens.len() as u64, r) => at_once += 1,
                    _ => {
                        one_by_one(&mut fast, *ip, lens);
                        fast.apply(last);
                    }
                }
            }
            Part::Other(input) => {
                oracle.apply(input);
                match input {
                    Input::Retire(r) if fast.retire_near(r) => at_once += 1,
                    _ => fast.apply(input),
                }
            }
        }
        prop_assert_eq!(format!("{fast:?}"), format!("{oracle:?}"), "after part {}: {:?}", i, p);
    }
    Ok(at_once)
}

#[test]
fn a_run_at_once_writes_what_its_instructions_one_by_one_write() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(500));
    let at_once = std::cell::Cell::new(0u64);
    let case = (
        configuration(),
        address(),
        0u32..300,
        0u8..5,
        prop::collection::vec(part(), 0..120),
    );
    runner
        .run(&case, |(config, start, cycles_per_op, psb_clear_delay, parts)| {
            let options = ModelOptions {
                cycles_per_op,
                psb_clear_delay,
                ..ModelOptions::default()
            };
            at_once.set(at_once.get() + compare(&config, start, options, &parts)?);
            Ok(())
        })
        .expect("the same bytes and registers");
    // The comparison means something only if runs were taken at once often enough.
    assert!(at_once.get() > 500, "only {} runs taken at once", at_once.get());
}

#[test]
fn the_design_cards_configuration_takes_runs_at_once() {
    let config = RtitConfig::user_process(0x5000);
    let mut oracle = programmed(&config, 0x40_1000, ModelOptions::default());
    let mut fast = oracle.clone();
    one_by_one(&mut oracle, 0x40_1000, &[3, 5, 2]);
    assert!(fast.retire_straight(3, 0x40_100a));
    assert_eq!(format!("{fast:?}"), format!("{oracle:?}"));
    assert_eq!(fast.traced(), 3);
    // Cycle-accurate mode sends a FUP.PCC at an instruction's start: one by one.
    let cyc = RtitConfig {
        ctl: config.ctl | ctl::CYCLE_ACC,
        ..config
    };
    assert!(!programmed(&cyc, 0x40_1000, ModelOptions::default()).retire_straight(3, 0x40_100a));
}

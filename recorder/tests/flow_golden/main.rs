//! Golden tests of the flow decoder, in the spirit of libipt's `.ptt` tests: small programs,
//! executed by a scripted machine, encoded by the unit model under each configuration, decoded
//! with the program's bytes, and compared instruction by instruction with what ran.

mod programs;

use rtit_recorder::model::{CpuState, ModelOptions, RtitConfig, UnitModel};
use rtit_replay_core::flow::{decode_insn, EventKind, FlowConfig, FlowDecoder, FlowItem};
use rtit_replay_core::image::AddressSpace;
use rtit_replay_core::regs::{ctl, events, EventId};

use programs::Program;
use rtit_recorder::script::{self as machine, Plan};

const CR3: u64 = 0x1234_5000;

/// A named configuration: RTIT registers and model options.
#[derive(Clone)]
struct Setup {
    name: &'static str,
    config: RtitConfig,
    options: ModelOptions,
}

fn setups() -> Vec<Setup> {
    let base = RtitConfig::user_process(CR3);
    let options = ModelOptions::default();
    let with = |name, ctl_on: u64, ctl_off: u64, pkt_cnt: Option<u64>, options: ModelOptions| Setup {
        name,
        config: RtitConfig {
            ctl: (base.ctl | ctl_on) & !ctl_off,
            pkt_cnt: pkt_cnt.unwrap_or(base.pkt_cnt),
            ..base
        },
        options,
    };
    vec![
        with("default", 0, 0, None, options),
        with("no-ret-compression", 0, ctl::CMPRS_RET, None, options),
        with("psb-2k", 0, 0, Some(0), options),
        with(
            "psb-2k-late-clear",
            0,
            0,
            Some(0),
            ModelOptions {
                psb_clear_delay: 4,
                ..options
            },
        ),
        with(
            "cycle-accurate-mtc-sts",
            ctl::CYCLE_ACC | ctl::MTC_EN | ctl::STS_EN | ctl::STS_ON_CR3,
            0,
            Some(0),
            ModelOptions {
                cycles_per_op: 37,
                cyc_one_short: true,
                ..options
            },
        ),
        with(
            "less-packets",
            ctl::LESS_PKTS | ctl::MTC_EN | ctl::CYCLE_ACC,
            0,
            None,
            options,
        ),
    ]
}

/// Records `program` under `setup` with `plan`; returns the trace and the truth.
fn record(program: &Program, setup: &Setup, plan: &Plan) -> (Vec<u8>, Vec<u64>) {
    let mut model = UnitModel::new(CpuState::user(program.start, CR3), setup.options);
    model.program(&setup.config).expect("valid configuration");
    let truth = machine::run(&program.space, program.start, plan, &mut model);
    (model.take_output(), truth.ips)
}

/// Decodes `trace`; returns the instructions and the events.
fn decode(trace: &[u8], ctl: u64, space: &AddressSpace) -> (Vec<u64>, Vec<EventKind>) {
    let mut items: Vec<FlowItem> = Vec::new();
    FlowDecoder::new(trace, FlowConfig::from_rtit_ctl(ctl), space).decode(&mut items);
    let mut ips = Vec::new();
    let mut events = Vec::new();
    for item in items {
        match item {
            FlowItem::Run { mut ip, count } => {
                for _ in 0..count {
                    ips.push(ip);
                    ip += decode_insn(space, ip).expect("decoded code").len() as u64;
                }
            }
            FlowItem::Event(e) => events.push(e.kind),
        }
    }
    (ips, events)
}

fn first_difference(a: &[u64], b: &[u64]) -> String {
    let at = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    format!(
        "lengths {} and {}; first difference at {at}: {:x?} vs {:x?}",
        a.len(),
        b.len(),
        a.get(at),
        b.get(at)
    )
}

/// The decoded history must be exactly the truth, with no error.
fn check_exact(program: &Program, plan: &Plan) {
    for setup in setups() {
        let (trace, truth) = record(program, &setup, plan);
        let (ips, events) = decode(&trace, setup.config.ctl, &program.space);
        let errors: Vec<&EventKind> = events.iter().filter(|e| matches!(e, EventKind::Error { .. })).collect();
        assert!(errors.is_empty(), "{} / {}: {errors:?}", program.name, setup.name);
        assert!(
            truth.len() > 50,
            "{}: a real workout ({} instructions)",
            program.name,
            truth.len()
        );
        assert!(
            ips == truth,
            "{} / {}: {}",
            program.name,
            setup.name,
            first_difference(&ips, &truth)
        );
    }
}

#[test]
fn loops_and_leaf_calls() {
    let p = programs::loops();
    check_exact(&p, &p.plan);
}

#[test]
fn recursion_jump_tables_indirect_calls_and_a_system_call() {
    let p = programs::calls();
    for seed in 1..6u64 {
        let plan = Plan {
            seed: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ..p.plan.clone()
        };
        check_exact(&p, &plan);
    }
}

#[test]
fn int3_and_a_fault_run_a_signal_handler() {
    let p = programs::signals();
    check_exact(&p, &p.plan);
}

#[test]
fn interrupts_every_few_instructions() {
    for p in [programs::loops(), programs::calls(), programs::signals()] {
        for every in [3, 7, 50] {
            let plan = Plan {
                interrupt_every: Some(every),
                ..p.plan.clone()
            };
            check_exact(&p, &plan);
        }
    }
}

/// An IP filter on the leaf function only: the history is the leaf's instructions, each
/// call entering the range by a branch and each return leaving it.
#[test]
fn ip_filter_on_one_function() {
    let p = programs::loops();
    let mut setup = setups().remove(0);
    setup.config.events = events(EventId::Range0, EventId::AlwaysOff);
    setup.config.lip = [p.labels["leaf"], 0, p.labels["exit"], 0];
    let (trace, truth) = record(&p, &setup, &p.plan);
    assert!(!truth.is_empty() && truth.iter().all(|&ip| ip >= p.labels["leaf"] && ip < p.labels["exit"]));
    let (ips, events) = decode(&trace, setup.config.ctl, &p.space);
    assert!(ips == truth, "{}", first_difference(&ips, &truth));
    let enabled = events.iter().filter(|e| matches!(e, EventKind::Enabled { .. })).count();
    let disabled = events
        .iter()
        .filter(|e| matches!(e, EventKind::Disabled { .. }))
        .count();
    assert!(enabled > 3 && enabled == disabled, "{events:?}");
}

/// An overflow loses instructions: the history is the truth up to somewhere before the gap,
/// then exactly the rest of the truth after it.
#[test]
fn buffer_overflows_leave_a_gap_and_nothing_invented() {
    for p in [programs::loops(), programs::calls()] {
        // Overflows early, in the middle and near the end of the run.
        let steps = machine::run(
            &p.space,
            p.start,
            &p.plan,
            &mut UnitModel::new(CpuState::user(p.start, CR3), ModelOptions::default()),
        )
        .steps;
        for (at, n) in [(5, 0), (steps / 2, 5), (steps - 20, 12)] {
            let plan = Plan {
                overflow: Some((at, n)),
                ..p.plan.clone()
            };
            for setup in setups() {
                let (trace, truth) = record(&p, &setup, &plan);
                let mut items: Vec<FlowItem> = Vec::new();
                FlowDecoder::new(&trace, FlowConfig::from_rtit_ctl(setup.config.ctl), &p.space).decode(&mut items);
                let gap = items
                    .iter()
                    .position(|i| matches!(i, FlowItem::Event(e) if matches!(e.kind, EventKind::Gap { .. })))
                    .unwrap_or_else(|| panic!("{} / {} / {at},{n}: no gap event in {items:?}", p.name, setup.name));
                let (before, _) = decode_items(&items[..gap], &p.space);
                let (after, errors) = decode_items(&items[gap..], &p.space);
                assert_eq!(errors, 0, "{} / {}", p.name, setup.name);
                assert!(truth.starts_with(&before), "{} / {}: prefix", p.name, setup.name);
                assert!(truth.ends_with(&after), "{} / {}: suffix", p.name, setup.name);
                assert!(before.len() + after.len() < truth.len(), "something was lost");
                assert!(
                    before.len() as u64 <= at,
                    "nothing after the overflow began is shown before the gap"
                );
            }
        }
    }
}

fn decode_items(items: &[FlowItem], space: &AddressSpace) -> (Vec<u64>, usize) {
    let mut ips = Vec::new();
    let mut errors = 0;
    for item in items {
        match item {
            FlowItem::Run { ip, count } => {
                let mut ip = *ip;
                for _ in 0..*count {
                    ips.push(ip);
                    ip += decode_insn(space, ip).expect("code").len() as u64;
                }
            }
            FlowItem::Event(e) if matches!(e.kind, EventKind::Error { .. }) => errors += 1,
            FlowItem::Event(_) => {}
        }
    }
    (ips, errors)
}

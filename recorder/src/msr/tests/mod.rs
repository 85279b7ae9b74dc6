//! The msr backend driven against the simulated device: programming order, CR3 discovery,
//! wrap and drain, and cleanup on errors. The target is a real (assembled) program walked by
//! the scripted CPU; its truth is every instruction the unit should trace.

use std::time::Duration;

use iced_x86::code_asm::*;
use iced_x86::BlockEncoderOptions;
use rtit_replay_core::flow::{decode_insn, EventKind, FlowConfig, FlowDecoder, FlowItem, FlowSink};
use rtit_replay_core::image::{AddressSpace, Image};
use rtit_replay_core::recording::EndState;
use rtit_replay_core::regs::{ctl, msr};

use super::collect::{Collector, WrapMode, PATTERN};
use super::device::{MsrError, Msrs, OutputRegion};
use super::program::{ProgramError, Unit};
use super::session::{record, Ran, SessionError, SessionOptions, Target, Traced};
use super::sim::{Access, Shared, SimMachine, SimMsrs, SimRegion, SimTarget};
use crate::model::{CpuState, Input, ModelError, ModelOptions, RtitConfig, UnitModel};
use crate::script::{self, Plan, Recorded};

const TARGET_CR3: u64 = 0x1234_5000;
const BASE: u64 = 0x40_1000;
/// Physical memory of the simulated machine, and the region's place in it.
const PHYS: u64 = 0x8000_0000;

/// Three nested loops around an indirect call (to one of two functions, each with a
/// data-dependent branch); ends in exit().
fn program() -> (AddressSpace, u64, Plan, Vec<u8>) {
    type Built = (Vec<u8>, u64, u64, u64, [u64; 2]);
    let build = || -> Result<Built, IcedError> {
        let mut a = CodeAssembler::new(64)?;
        let (mut outer, mut middle, mut inner, mut f, mut skip, mut exit) = (
            a.create_label(),
            a.create_label(),
            a.create_label(),
            a.create_label(),
            a.create_label(),
            a.create_label(),
        );
        let (mut g, mut g_skip) = (a.create_label(), a.create_label());
        a.set_label(&mut outer)?;
        a.nop()?;
        a.set_label(&mut middle)?;
        a.nop()?;
        a.set_label(&mut inner)?;
        a.call(rax)?;
        a.dec(ecx)?;
        a.jne(inner)?;
        a.dec(edx)?;
        a.jne(middle)?;
        a.dec(ebx)?;
        a.jne(outer)?;
        a.mov(eax, 60)?;
        a.set_label(&mut exit)?;
        a.syscall()?;
        a.set_label(&mut f)?;
        a.test(eax, 1)?;
        a.je(skip)?;
        a.add(eax, 3)?;
        a.set_label(&mut skip)?;
        a.ret()?;
        a.set_label(&mut g)?;
        a.cmp(eax, 7)?;
        a.jb(g_skip)?;
        a.sub(eax, 7)?;
        a.set_label(&mut g_skip)?;
        a.ret()?;
        let r = a.assemble_options(BASE, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
        let targets = [r.label_ip(&f)?, r.label_ip(&g)?];
        Ok((
            r.inner.code_buffer.clone(),
            r.label_ip(&outer)?,
            r.label_ip(&exit)?,
            r.label_ip(&inner)?,
            targets,
        ))
    };
    let (code, start, exit, call, targets) = build().expect("assembles");
    let mut space = AddressSpace::new();
    space.add(Image::from_raw("loops", BASE, code.clone())).expect("image");
    let mut plan = Plan::new(exit);
    plan.loop_count = 16;
    plan.indirect.insert(call, targets.to_vec());
    (space, start, plan, code)
}

/// The program's run as an input stream, and the instructions the target configuration traces.
fn workload() -> (AddressSpace, u64, Vec<Input>, Vec<u64>, Vec<u8>) {
    let (space, start, plan, code) = program();
    let mut model = UnitModel::new(CpuState::user(start, TARGET_CR3), ModelOptions::default());
    model.program(&RtitConfig::user_process(TARGET_CR3)).expect("program");
    let mut rec = Recorded {
        model,
        inputs: Vec::new(),
    };
    let truth = script::run(&space, start, &plan, &mut rec);
    (space, start, rec.inputs, truth.ips, code)
}

struct Rig {
    machine: Shared,
    region: SimRegion,
    target: SimTarget,
    space: AddressSpace,
    truth: Vec<u64>,
    /// The program's code, at `BASE`.
    code: Vec<u8>,
}

fn rig(region_size: usize, chunk: usize) -> Rig {
    let (space, start, inputs, truth, code) = workload();
    let machine = SimMachine::new(PHYS, 8 << 20);
    // The region in the middle of the memory, aligned to its size.
    let at = 4 << 20;
    let region = SimRegion {
        machine: machine.clone(),
        at,
        size: region_size,
    };
    let mut target = SimTarget::new(machine.clone(), inputs, start, TARGET_CR3);
    target.chunk = chunk;
    Rig {
        machine,
        region,
        target,
        space,
        truth,
        code,
    }
}

fn options(wrap: WrapMode) -> SessionOptions {
    SessionOptions {
        config: RtitConfig {
            // A PSB every 2 KiB, so that what survives a wrap has a place to start from.
            pkt_cnt: 0,
            ..RtitConfig::user_process(0)
        },
        wrap,
        slice: Duration::from_millis(1),
        interrupted: crate::interrupt::Interrupt::new(),
    }
}

fn run(r: &mut Rig, wrap: WrapMode) -> Result<Traced, SessionError> {
    record(SimMsrs(r.machine.clone()), &mut r.region, &mut r.target, &options(wrap))
}

/// Decodes what the session traced, with its gaps, into `sink`.
fn decode_into(space: &AddressSpace, t: &Traced, sink: &mut impl FlowSink) {
    let gaps: Vec<(usize, Option<u64>)> = t.gaps.iter().map(|g| (g.offset as usize, g.lost_bytes)).collect();
    FlowDecoder::new(&t.trace, FlowConfig::from_rtit_ctl(t.config.ctl), space)
        .with_gaps(&gaps)
        .decode(sink);
}

/// The decoded history: instruction addresses, and the events with their positions.
fn decode(space: &AddressSpace, t: &Traced) -> (Vec<u64>, Vec<(u64, EventKind)>) {
    let mut items = Vec::new();
    decode_into(space, t, &mut items);
    let mut ips = Vec::new();
    let mut events = Vec::new();
    for item in items {
        match item {
            FlowItem::Run { mut ip, count } => {
                for _ in 0..count {
                    ips.push(ip);
                    ip += decode_insn(space, ip).expect("code").len() as u64;
                }
            }
            FlowItem::Event(e) => events.push((e.position, e.kind)),
        }
    }
    (ips, events)
}

fn writes(log: &[Access]) -> Vec<(u32, u64)> {
    log.iter()
        .filter_map(|a| match *a {
            Access::Write(m, v) => Some((m, v)),
            Access::Read(_) => None,
        })
        .collect()
}

#[test]
fn the_trace_from_the_simulated_unit_decodes_to_the_truth() {
    let mut r = rig(64 << 10, 400);
    let t = run(&mut r, WrapMode::Drain).expect("records");
    assert_eq!(
        t.cr3,
        Some(TARGET_CR3),
        "CR3 found from the PIP before the target's first IP"
    );
    assert_eq!(t.config.cr3_match, TARGET_CR3);
    assert!(t.gaps.is_empty() && t.wraps == 0);
    assert_eq!(t.end, EndState::Exited { code: 0 });
    let (ips, events) = decode(&r.space, &t);
    assert!(
        !events.iter().any(|e| matches!(e.1, EventKind::Error { .. })),
        "{events:?}"
    );
    // The discovery step executed the first instruction; tracing starts at the second.
    assert_eq!(t.start_ip, r.truth[1]);
    assert_eq!(ips.len(), r.truth.len() - 1);
    assert!(ips == r.truth[1..], "the history is exactly what ran");
    assert!(r.truth.len() > 10_000, "a real workload: {}", r.truth.len());
    assert!(t.trace.len() > 12 << 10, "trace of {} bytes", t.trace.len());
    assert_eq!(r.machine.borrow().stray_writes, 0, "every byte landed in the region");
}

#[test]
fn the_programming_sequence_follows_chapter_3() {
    let mut r = rig(64 << 10, 400);
    run(&mut r, WrapMode::Drain).expect("records");
    let log = r.machine.borrow().log.clone();
    assert_eq!(
        log[0],
        Access::Read(msr::CTL),
        "RTIT_CTL is read before anything else (§3.3.1)"
    );
    let w = writes(&log);
    assert!(
        w.iter().all(|&(m, v)| !(m == msr::TNT_BUFF && v == 0)),
        "TNT_BUFF never 0"
    );
    // The enable sequence of the recording proper (the second start; the first is discovery).
    let starts: Vec<usize> = (0..w.len()).filter(|&i| w[i] == (msr::STATUS, 0)).collect();
    let s = starts[1];
    let order: Vec<u32> = w[s..s + 17].iter().map(|&(m, _)| m).collect();
    assert_eq!(
        order,
        [
            msr::STATUS,
            msr::TNT_BUFF,
            msr::LAST_LIP,
            msr::LAST_CALL_NLIP,
            msr::CNTP,
            msr::BASE_ADDR,
            msr::LIMIT_MASK,
            msr::OFFSET,
            msr::PKT_CNT,
            msr::CR3_MATCH,
            msr::EVENTS,
            msr::LIP0,
            msr::LIP1,
            msr::LIP2,
            msr::LIP3,
            msr::CTL,
            msr::CTL
        ]
    );
    assert_eq!(
        w[s + 5].1,
        PHYS + (4 << 20),
        "RTIT_BASE_ADDR is the region, aligned to its size"
    );
    assert_eq!(w[s + 6].1, (64 << 10) - 1, "RTIT_LIMIT_MASK = size - 1");
    let (en, active) = (w[s + 15].1, w[s + 16].1);
    assert_eq!(
        en & (ctl::TRACE_EN | ctl::TRACE_ACTIVE),
        ctl::TRACE_EN,
        "Trace_En first"
    );
    assert_eq!(
        active & (ctl::TRACE_EN | ctl::TRACE_ACTIVE),
        ctl::TRACE_EN | ctl::TRACE_ACTIVE
    );
    assert_ne!(active & ctl::CR3_EN, 0);
    // Every CTL write changes at most one enable; every OFFSET read follows a CTL write.
    // Tracing is off when rtit takes the unit: nothing is in flight.
    let mut ctl_now = 0;
    let mut drained = true;
    for a in &log {
        match *a {
            Access::Write(msr::CTL, v) => {
                assert_ne!((ctl_now ^ v) & 0x2001, 0x2001, "both enables in one write: {v:#x}");
                ctl_now = v;
                drained = true;
            }
            Access::Read(msr::OFFSET) => {
                assert!(drained, "RTIT_OFFSET read without a drain before it (§3.3.12)");
                drained = false;
            }
            Access::Write(..) => drained = false,
            Access::Read(_) => {}
        }
    }
    assert_eq!(ctl_now & ctl::TRACE_EN, 0, "tracing off at the end");
}

#[test]
fn drains_keep_a_small_region_from_losing_anything() {
    // 1 KiB of region, drained every 100 inputs: never full.
    let mut r = rig(1 << 10, 100);
    let t = run(&mut r, WrapMode::Drain).expect("records");
    assert!(t.gaps.is_empty(), "{:?}", t.gaps);
    let (ips, _) = decode(&r.space, &t);
    assert!(ips == r.truth[1..]);
    assert!(
        t.trace.len() > 4 << 10,
        "the trace outgrew the region {} times over",
        t.trace.len() >> 10
    );
}

#[test]
fn a_drain_interval_that_wraps_is_a_gap_never_a_wrong_history() {
    // 4 KiB of region, drained every 20,000 inputs: most intervals wrap.
    let mut r = rig(4 << 10, 20_000);
    let t = run(&mut r, WrapMode::Drain).expect("records");
    assert!(t.wraps > 0 && !t.gaps.is_empty());
    let (ips, events) = decode(&r.space, &t);
    let lost = events.iter().filter(|e| matches!(e.1, EventKind::Lost { .. })).count();
    assert_eq!(lost, t.gaps.len(), "each gap is in the history");
    assert!(ips.len() < r.truth.len() - 1);
    // What is there ran, in order: a subsequence of the truth.
    let mut truth = r.truth.iter();
    assert!(
        ips.iter().all(|ip| truth.any(|t| t == ip)),
        "the history is a subsequence of the run"
    );
}

#[test]
fn the_flight_recorder_keeps_the_end_of_the_run() {
    let mut r = rig(4 << 10, 400);
    let t = run(&mut r, WrapMode::FlightRecorder).expect("records");
    assert_eq!(t.gaps.len(), 1);
    assert_eq!(t.gaps[0].offset, 0, "the beginning is lost");
    assert!(t.trace.len() <= 4 << 10);
    let (ips, events) = decode(&r.space, &t);
    assert!(matches!(events[0], (0, EventKind::Lost { .. })), "{:?}", events[0]);
    // After the gap the decoder resumes at the next IP it can trust; until it has seen a call,
    // a compressed return is an error, not a guess. From the last such point on, the history
    // is exactly the end of the run.
    let clean = events
        .iter()
        .filter(|e| matches!(e.1, EventKind::Error { .. } | EventKind::Lost { .. }))
        .map(|e| e.0 as usize)
        .max()
        .unwrap_or(0);
    assert!(ips.len() - clean > 1000, "a long clean stretch: {}", ips.len() - clean);
    assert!(
        r.truth.ends_with(&ips[clean..]),
        "what is kept is exactly the end of the run"
    );
    let mut truth = r.truth.iter();
    assert!(
        ips.iter().all(|ip| truth.any(|t| t == ip)),
        "and everything before it ran, in order"
    );
}

/// The registers of the unit a test machine starts with, as rtit would find them.
fn registers(m: &Shared) -> Vec<u64> {
    let mut m = m.borrow_mut();
    m.model.rdmsr(msr::CTL).expect("ctl");
    [
        msr::BASE_ADDR,
        msr::LIMIT_MASK,
        msr::OFFSET,
        msr::CR3_MATCH,
        msr::EVENTS,
        msr::PKT_CNT,
        msr::CTL,
    ]
    .iter()
    .map(|&a| m.model.rdmsr(a).expect("read"))
    .collect()
}

#[test]
fn a_failing_write_leaves_the_unit_off_and_restored_and_the_target_killed() {
    for fail_at in [3, 20, 40] {
        let mut r = rig(64 << 10, 400);
        let before = registers(&r.machine);
        r.machine.borrow_mut().fail_write = Some(fail_at);
        let err = run(&mut r, WrapMode::Drain).expect_err("the device fails");
        assert!(err.to_string().contains("simulated device failure"), "{err}");
        assert!(r.target.killed, "the target is ended");
        assert_eq!(
            registers(&r.machine),
            before,
            "every register put back (failure at write {fail_at})"
        );
    }
}

#[test]
fn a_panic_while_tracing_still_turns_tracing_off() {
    struct Panicking(SimTarget);
    impl Target for Panicking {
        type Error = super::sim::SimTargetError;
        fn next_ip(&mut self) -> Result<u64, Self::Error> {
            self.0.next_ip()
        }
        fn step(&mut self) -> Result<(), Self::Error> {
            self.0.step()
        }
        fn run(&mut self, _: Duration) -> Result<Ran, Self::Error> {
            panic!("boom")
        }
        fn kill(&mut self) {}
    }
    let r = rig(64 << 10, 400);
    let machine = r.machine.clone();
    let mut region = r.region;
    let mut target = Panicking(r.target);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        record(
            SimMsrs(machine.clone()),
            &mut region,
            &mut target,
            &options(WrapMode::Drain),
        )
    }));
    assert!(result.is_err(), "it panicked");
    let ctl_now = machine.borrow_mut().model.rdmsr(msr::CTL).expect("ctl");
    assert_eq!(
        ctl_now & (ctl::TRACE_EN | ctl::TRACE_ACTIVE),
        0,
        "tracing is off after the unwind"
    );
}

#[test]
fn a_unit_in_use_is_refused() {
    let machine = SimMachine::new(PHYS, 1 << 20);
    {
        let mut m = machine.borrow_mut();
        m.model.rdmsr(msr::CTL).expect("ctl");
        m.model
            .wrmsr(msr::CTL, ctl::TRACE_EN | ctl::USER)
            .expect("someone traces");
    }
    let err = Unit::open(SimMsrs(machine)).err().expect("refused");
    assert!(matches!(err, ProgramError::InUse(_)), "{err}");
}

#[test]
fn the_simulated_device_faults_as_chapter_3_says() {
    let machine = SimMachine::new(PHYS, 1 << 20);
    let mut d = SimMsrs(machine.clone());
    let gp = |e: MsrError| matches!(e, MsrError::Simulated(m) if m.is_gp());
    assert!(gp(d.read(msr::STATUS).expect_err("before RTIT_CTL is read")));
    assert!(gp(d.write(msr::OFFSET, 0).expect_err("before RTIT_CTL is read")));
    d.read(msr::CTL).expect("ctl");
    assert!(gp(d.write(msr::TNT_BUFF, 0).expect_err("TNT_BUFF 0")));
    assert!(gp(d.write(msr::CTL, 1 << 5).expect_err("reserved bit")));
    assert!(gp(d.write(msr::BASE_ADDR, 1 << 40).expect_err("reserved bit")));
    // rtit's own check refuses these before they reach the device.
    let mut unit = Unit::open(SimMsrs(machine.clone())).expect("open");
    let before = machine.borrow().log.len();
    let refused = unit.write(msr::TNT_BUFF, 0).expect_err("refused");
    assert!(matches!(
        refused,
        ProgramError::Msr(MsrError::Refused(ModelError::ZeroTntBuff))
    ));
    assert!(
        unit.write(msr::CTL, ctl::TRACE_EN | ctl::TRACE_ACTIVE).is_err(),
        "both enables at once"
    );
    assert_eq!(machine.borrow().log.len(), before, "nothing reached the device");
}

#[test]
fn offset_is_settled_only_after_a_drain() {
    let r = rig(64 << 10, 400);
    let mut unit = Unit::open(SimMsrs(r.machine.clone())).expect("open");
    let mut config = RtitConfig::user_process(TARGET_CR3);
    config.ctl &= !ctl::CR3_EN;
    unit.start(&config, &r.region).expect("start");
    // A TraceStop-free stretch of user code: some packets stay in the unit's buffer.
    let mut target = r.target;
    target.chunk = 37;
    target.run(Duration::ZERO).expect("run");
    let unsettled = unit.read(msr::OFFSET).expect("offset");
    let settled = unit.pause().expect("pause drains");
    assert!(
        settled > unsettled,
        "the drain wrote {} more bytes",
        settled - unsettled
    );
    assert_ne!(settled % 64, 0, "a partial line went out with the drain");
    drop(unit);
}

#[test]
fn a_tail_too_short_to_prove_no_wrap_counts_as_a_wrap() {
    let machine = SimMachine::new(PHYS, 1 << 20);
    let mut region = SimRegion {
        machine,
        at: 0,
        size: 128,
    };
    let mut c = Collector::new(&mut region);
    let mut buf = [0u8; 128];
    region.read(0, &mut buf);
    assert!(buf.iter().all(|&b| b == PATTERN));
    // 124 bytes written: a 4-byte tail proves nothing.
    region.fill(0, 124, 0x02);
    c.drain(&mut region, 124);
    assert_eq!(c.wraps, 1);
    // 100 bytes written: a 28-byte tail of pattern proves there was no wrap.
    region.fill(0, 100, 0x02);
    c.drain(&mut region, 100);
    assert_eq!(c.wraps, 1);
    let kept = c.finish();
    assert_eq!(kept.trace.len(), 100);
    assert_eq!(kept.gaps.len(), 1);
}

mod positions;

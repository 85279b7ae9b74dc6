//! Flow decode throughput, in instructions per second and trace bytes per second, on a long
//! synthetic trace of a hot loop that calls a leaf function: per iteration 10 instructions,
//! two conditional branches and one compressed return (three TNT bits), encoded by the unit
//! model under the default user-process configuration (PSB every 8 KiB).
//!
//! Run with `cargo bench --bench flow_decode`.

use criterion::{criterion_main, BatchSize, Criterion, Throughput};
use rtit_recorder::model::{CpuState, Input, ModelOptions, Retired, RtitConfig, UnitModel};
use rtit_replay_core::cofi::{Cofi, FarKind};
use rtit_replay_core::flow::{FlowConfig, FlowDecoder, FlowEvent, FlowSink};
use rtit_replay_core::image::{AddressSpace, Image};

const BASE: u64 = 0x40_1000;
const LEAF: u64 = BASE + 0x100;

/// ```text
/// 401000: add rax, rdx        48 01 d0
/// 401003: call leaf           e8 f8 00 00 00
/// 401008: dec rcx             48 ff c9
/// 40100b: jne 401000          75 f3
/// 40100d: syscall             0f 05
/// 401100: imul rax, rax, 3    48 6b c0 03
/// 401104: xor rax, rdx        48 31 d0
/// 401107: cmp rax, 100        48 83 f8 64
/// 40110b: jg 40110e           7f 01
/// 40110d: nop                 90
/// 40110e: ret                 c3
/// ```
fn space() -> AddressSpace {
    let mut code = vec![0xcc; 0x110];
    code[..15].copy_from_slice(&[
        0x48, 0x01, 0xd0, 0xe8, 0xf8, 0, 0, 0, 0x48, 0xff, 0xc9, 0x75, 0xf3, 0x0f, 0x05,
    ]);
    code[0x100..0x10f].copy_from_slice(&[
        0x48, 0x6b, 0xc0, 0x03, 0x48, 0x31, 0xd0, 0x48, 0x83, 0xf8, 0x64, 0x7f, 0x01, 0x90, 0xc3,
    ]);
    let mut s = AddressSpace::new();
    s.add(Image::from_raw("bench", BASE, code)).expect("add");
    s
}

/// Runs `iterations` of the loop through the unit model; returns the trace and how many
/// instructions it holds.
fn trace(iterations: u64) -> (Vec<u8>, u64) {
    let mut m = UnitModel::new(CpuState::user(BASE, 0x1000), ModelOptions::default());
    m.program(&RtitConfig::user_process(0x1000)).expect("config");
    let r = |ip, len, cofi, next| Input::Retire(Retired::new(ip, len, cofi, next));
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let mut insns = 0;
    for i in 0..iterations {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let jg_taken = x & 1 == 1;
        let last = i + 1 == iterations;
        let inputs = [
            r(BASE, 3, Cofi::None, BASE + 3),
            r(BASE + 3, 5, Cofi::DirectCall, LEAF),
            r(LEAF, 4, Cofi::None, LEAF + 4),
            r(LEAF + 4, 3, Cofi::None, LEAF + 7),
            r(LEAF + 7, 4, Cofi::None, LEAF + 11),
            r(
                LEAF + 11,
                2,
                Cofi::Conditional,
                if jg_taken { LEAF + 14 } else { LEAF + 13 },
            ),
        ];
        for input in &inputs {
            m.apply(input);
        }
        insns += 6;
        if !jg_taken {
            m.apply(&r(LEAF + 13, 1, Cofi::None, LEAF + 14));
            insns += 1;
        }
        m.apply(&r(LEAF + 14, 1, Cofi::Return, BASE + 8));
        m.apply(&r(BASE + 8, 3, Cofi::None, BASE + 11));
        m.apply(&r(BASE + 11, 2, Cofi::Conditional, if last { BASE + 13 } else { BASE }));
        insns += 3;
    }
    m.apply(&Input::Retire(
        Retired::new(BASE + 13, 2, Cofi::Far(FarKind::Syscall), 0).to_cpl(0),
    ));
    (m.take_output(), insns + 1)
}

/// Counts what the decoder reports.
#[derive(Default)]
struct Count {
    insns: u64,
    events: u64,
}

impl FlowSink for Count {
    fn run(&mut self, _ip: u64, count: u64) {
        self.insns += count;
    }
    fn event(&mut self, _event: FlowEvent) {
        self.events += 1;
    }
}

fn bench(c: &mut Criterion) {
    let space = space();
    let (trace, insns) = trace(3_000_000);
    let config = FlowConfig::from_rtit_ctl(RtitConfig::user_process(0).ctl);
    // The decode must be complete and clean for the numbers to mean anything.
    let mut check = Count::default();
    FlowDecoder::new(&trace, config, &space).decode(&mut check);
    assert_eq!(
        (check.insns, check.events),
        (insns, 2),
        "enabled + disabled, every instruction"
    );
    let mut group = c.benchmark_group("flow_decode");
    group.sample_size(10);
    // The same work, reported per instruction and per trace byte.
    let throughputs = [
        ("hot_loop_instructions", Throughput::Elements(insns)),
        ("hot_loop_trace_bytes", Throughput::Bytes(trace.len() as u64)),
    ];
    for (name, throughput) in throughputs {
        group.throughput(throughput);
        group.bench_function(name, |b| {
            b.iter_batched(
                || (),
                |()| {
                    let mut count = Count::default();
                    FlowDecoder::new(&trace, config, &space).decode(&mut count);
                    count.insns
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

// The macros generate undocumented public functions.
#[allow(missing_docs)]
mod harness {
    criterion::criterion_group!(benches, super::bench);
}
criterion_main!(harness::benches);

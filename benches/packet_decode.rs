//! Packet decode throughput on a large synthetic stream with a realistic mix: mostly TNT
//! bytes, some compressed TIPs (indirect calls, returns that missed RET compression), a few
//! FUP.FAR/TIP pairs and FUP.PGD/FUP.PGE pairs (system calls under user-only tracing), and a
//! PSB every 8 KiB as RTIT_PKT_CNT.Pkt_Mask = 2 produces (§3.3.9).
//!
//! Run with `cargo bench --bench packet_decode`; throughput is reported in bytes per second.

use criterion::{criterion_main, BatchSize, Criterion, Throughput};
use rtit_replay_core::ip::LastLip;
use rtit_replay_core::packet::{encode, CycleCount, DecoderConfig, FupEvent, Packet, PacketDecoder, Tnt};

/// A small deterministic generator (xorshift) so every run decodes the same bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Builds `size` bytes of trace. With `cycle_accurate`, cycle counts follow the packets that
/// carry them.
fn synthetic_trace(size: usize, cycle_accurate: bool) -> Vec<u8> {
    const PSB_PERIOD: usize = 8 * 1024;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut lip = LastLip::new();
    let mut out = Vec::with_capacity(size + 64);
    let mut since_psb = PSB_PERIOD;
    let text = 0x5555_5555_4000_u64; // a PIE's text, as ASLR-disabled Linux maps it
    let libc = 0x7fff_f7dd_0000_u64;
    while out.len() < size {
        if since_psb >= PSB_PERIOD {
            let start = out.len();
            push(&Packet::Psb, &mut out, cycle_accurate);
            since_psb = out.len() - start;
            continue;
        }
        let start = out.len();
        let roll = rng.next() % 100;
        let r = rng.next();
        if roll < 80 {
            // Loops and conditionals: mostly full TNT packets.
            let n = if roll < 70 { 6 } else { 1 + (r % 6) as usize };
            let bits: Vec<bool> = (0..n).map(|i| r >> (8 + i) & 1 == 1).collect();
            let tnt = Tnt::from_bits(&bits).expect("1-6 bits");
            push(&Packet::Tnt(tnt), &mut out, cycle_accurate);
        } else if roll < 95 {
            // Indirect branches and uncompressed returns, mostly near the last IP.
            let base = if r & 0x100 == 0 { text } else { libc };
            let ip = base + (r >> 20) % 0x2_0000;
            push(&Packet::Tip(lip.compress(ip)), &mut out, cycle_accurate);
        } else if roll < 98 {
            // A system call under user-only tracing: PGD at the syscall, PGE after it.
            let ip = libc + (r >> 20) % 0x2_0000;
            push(
                &Packet::Fup(FupEvent::PacketGenDisable, lip.compress(ip)),
                &mut out,
                cycle_accurate,
            );
            push(
                &Packet::Fup(FupEvent::PacketGenEnable, lip.compress(ip + 2)),
                &mut out,
                cycle_accurate,
            );
        } else {
            // A far transfer (signal delivery): FUP.FAR then TIP.
            let ip = text + (r >> 20) % 0x2_0000;
            push(
                &Packet::Fup(FupEvent::FarTransfer, lip.compress(ip)),
                &mut out,
                cycle_accurate,
            );
            push(&Packet::Tip(lip.compress(libc + 0x1000)), &mut out, cycle_accurate);
        }
        since_psb += out.len() - start;
    }
    out
}

fn push(p: &Packet, out: &mut Vec<u8>, cycle_accurate: bool) {
    encode(p, out).expect("valid packet");
    if cycle_accurate && p.carries_cycle_count() {
        let cycles = CycleCount::new(out.len() as u32 % 300).expect("small");
        encode(&Packet::Cyc(cycles), out).expect("valid packet");
    }
}

fn decode_all(trace: &[u8], config: DecoderConfig) -> (usize, u64) {
    let mut packets = 0;
    let mut sum = 0u64;
    for item in PacketDecoder::new(trace, config) {
        let d = item.expect("the synthetic trace decodes");
        packets += 1;
        sum = sum.wrapping_add(d.ip.unwrap_or(1));
    }
    (packets, sum)
}

fn bench(c: &mut Criterion) {
    const SIZE: usize = 64 << 20;
    let mut group = c.benchmark_group("packet_decode");
    group.sample_size(10);
    group.measurement_time(std::time::Duration::from_secs(8));
    for (name, cycle_accurate) in [("mixed", false), ("mixed_cycle_accurate", true)] {
        let trace = synthetic_trace(SIZE, cycle_accurate);
        let config = DecoderConfig { cycle_accurate };
        group.throughput(Throughput::Bytes(trace.len() as u64));
        group.bench_function(name, |b| {
            b.iter_batched(|| (), |()| decode_all(&trace, config), BatchSize::SmallInput)
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

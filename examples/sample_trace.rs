//! Writes the sample traces under `examples/traces/` that the README's first command dumps:
//! `cargo run --example sample_trace` regenerates them (a test checks they are current).
//!
//! The packets tell a small, plausible story of a user-only, CR3-filtered trace with RET
//! compression (RTIT_CTL = User | CR3En | Cmprs_Ret | TraceActive | Trace_En, plus Cycle_Acc
//! for the second file): tracing starts at `main`, a loop runs, a call returns compressed,
//! an indirect call goes through the PLT into libc, a system call leaves and re-enters user
//! mode, a signal is delivered, the internal buffer overflows once, and a TraceSTOP ends it.
//! Until `rtit record` exists this is how a new user sees what `rtit dump` shows.

use rtit_replay_core::ip::LastLip;
use rtit_replay_core::packet::{encode, CycleCount, FupEvent, Mtc, Packet, Pip, Sts, Tnt};

/// Builds the sample trace.
pub fn sample(cycle_accurate: bool) -> Vec<u8> {
    let mut w = Writer {
        out: Vec::new(),
        lip: LastLip::new(),
        cycle_accurate,
        cycles: 17,
    };
    let main = 0x0040_1126_u64; // a non-PIE executable's main
    let libc_write = 0x7fff_f7e9_a870_u64;
    let handler = 0x0040_1196_u64;
    let restorer = 0x7fff_f7dd_a050_u64;

    // TriggerEn 0 → 1: a PSB, the timing packets, and FUP.PGE where user code resumes.
    w.raw(Packet::Psb);
    w.raw(Packet::Sts(Sts {
        acbr: 24,
        ecbr: 24,
        btc: 0x12_3456_7890,
    }));
    w.raw(Packet::Pip(Pip {
        cr3: 0x1_2345_6000,
        pg: true,
    }));
    w.ip(FupEvent::PacketGenEnable, main);
    // A loop: five taken back-edges and the exit, then a call whose RET compresses (a T bit).
    w.tnt(&[true, true, true, true, true, false]);
    w.tnt(&[true, false, true]);
    // An indirect call through the PLT into libc's write().
    w.tip(libc_write);
    // write() enters the kernel: user-only tracing stops at the SYSCALL's next IP and resumes
    // there after SYSRET.
    w.ip(FupEvent::PacketGenDisable, libc_write + 0x14);
    w.raw(Packet::Mtc(Mtc { rng: 0, tsc: 0x3c }));
    w.ip(FupEvent::PacketGenEnable, libc_write + 0x14);
    // Back to main with a RET that did not compress (the last call was elsewhere).
    w.tnt(&[false, true]);
    w.tip(main + 0x2e);
    // A signal arrives: far transfer to the handler, then sigreturn through the restorer.
    w.ip(FupEvent::FarTransfer, main + 0x31);
    w.tip(handler);
    w.tnt(&[true]);
    w.tip(restorer);
    w.ip(FupEvent::PacketGenDisable, restorer + 9);
    w.ip(FupEvent::PacketGenEnable, main + 0x31);
    // A periodic PSB (RTIT_PKT_CNT), then a buffer overflow: a gap, recovery at an NLIP.
    w.raw(Packet::Psb);
    w.tnt(&[true, true, false, false, true, true]);
    w.ip(FupEvent::BufferOverflow, main + 0x52);
    w.tnt(&[false, false, true, true]);
    // The TraceStop range is reached: TraceSTOP (the partial TNT stays in RTIT_TNT_BUFF).
    w.raw(Packet::TraceStop);
    w.out
}

/// Emits packets the way the unit does: IPs compressed against LAST_LIP, and a cycle count
/// after the packets that carry one when Cycle_Acc is set.
struct Writer {
    out: Vec<u8>,
    lip: LastLip,
    cycle_accurate: bool,
    cycles: u32,
}

impl Writer {
    fn raw(&mut self, p: Packet) {
        if p == Packet::Psb {
            // The unit clears LAST_LIP at a PSB (§3.3.7; it may do so late, §3.3.9).
            self.lip.invalidate();
        }
        encode(&p, &mut self.out).expect("sample packets are valid");
        if self.cycle_accurate && p.carries_cycle_count() {
            self.cycles = (self.cycles * 7 + 3) % 5000;
            let cyc = CycleCount::new(self.cycles).expect("small count");
            encode(&Packet::Cyc(cyc), &mut self.out).expect("valid");
        }
    }

    fn ip(&mut self, event: FupEvent, ip: u64) {
        if event == FupEvent::BufferOverflow {
            // Cleared before the overflow packet is sent: it is never match-compressed (§4.2.5).
            self.lip.invalidate();
        }
        let payload = self.lip.compress(ip);
        self.raw(Packet::Fup(event, payload));
    }

    fn tip(&mut self, ip: u64) {
        let payload = self.lip.compress(ip);
        self.raw(Packet::Tip(payload));
    }

    fn tnt(&mut self, taken: &[bool]) {
        self.raw(Packet::Tnt(Tnt::from_bits(taken).expect("1-6 bits")));
    }
}

/// Where the samples live, relative to the workspace root.
pub const SAMPLES: [(&str, bool); 2] = [
    ("examples/traces/sample.rtit", false),
    ("examples/traces/sample-cycle-accurate.rtit", true),
];

#[allow(dead_code)] // also compiled into the CLI tests, which only use `sample`
fn main() -> std::io::Result<()> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for (path, cycle_accurate) in SAMPLES {
        std::fs::write(root.join(path), sample(cycle_accurate))?;
        println!("wrote {path}");
    }
    Ok(())
}

//! Timing packets, buffer overflow, TraceStop and the PSB period.

use rtit_replay_core::cofi::FarKind;
use rtit_replay_core::regs::{ctl, events, msr, EventId};

use super::*;

/// User-only tracing of everything from 0x1000, with extra RTIT_CTL bits.
fn user_model(extra_ctl: u64, options: ModelOptions) -> UnitModel {
    let config = RtitConfig {
        ctl: ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::USER | ctl::DEST | extra_ctl,
        ..all_cpls()
    };
    let mut m = model(&config, CpuState::user(0x1000, 0), options);
    m.take_output();
    m
}

fn cycles(n: u32) -> ModelOptions {
    ModelOptions {
        cycles_per_op: n,
        ..ModelOptions::default()
    }
}

/// MTC_Range 0 watches TSC[14:7]: with 64 cycles per instruction it changes every second one.
#[test]
fn mtc_packets_follow_the_watched_tsc_bits() {
    let mut m = user_model(ctl::MTC_EN, cycles(64));
    let got = run(
        &mut m,
        &[plain(0x1000, 1), plain(0x1001, 1), plain(0x1002, 1), plain(0x1003, 1)],
    );
    assert_eq!(got, [0xc4, 0x01, 0xc4, 0x02]); // MTC range 0, TSC[14:7] = 1, then 2
                                               // MTC_Range 1 watches TSC[16:9]: four times slower.
    let mut m = user_model(ctl::MTC_EN | 1 << ctl::MTC_RANGE_SHIFT, cycles(64));
    let inputs: Vec<Input> = (0x1000..0x1008).map(|ip| plain(ip, 1)).collect();
    assert_eq!(run(&mut m, &inputs), [0xc5, 0x01]);
}

/// Cycle-accurate mode: a cycle count after the FUP.PGE, TIP and full TNT, none after the
/// partial TNT; each count is the cycles since the previous one (§4.2.15).
#[test]
fn cycle_counts_in_cycle_accurate_mode() {
    let config = RtitConfig {
        ctl: ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::USER | ctl::DEST | ctl::CYCLE_ACC,
        ..all_cpls()
    };
    let mut m = model(&config, CpuState::user(0x1000, 0), cycles(10));
    // PSB (no cycle count), FUP.PGE 1000 + CYC 0 (nothing counted yet).
    assert_eq!(m.output(), [&PSB[..], &[0x84, 0x00, 0x10, 0x01]].concat());
    let got = run(
        &mut m,
        &[
            plain(0x1000, 1),
            plain(0x1001, 1),
            plain(0x1002, 1),
            ijmp(0x1003, 2, 0x1100), // 40 cycles: TIP + CYC 40
            jcc(0x1100, None),
            jcc(0x1102, None),
            ijmp(0x1104, 2, 0x1200), // 30 cycles: partial TNT, TIP + CYC 30
        ],
    );
    assert_eq!(
        got,
        [0xb4, 0x00, 0x11, 40 << 2 | 1, 0b100, 0xb4, 0x00, 0x12, 30 << 2 | 1]
    );
}

/// FUP.PCC: at the start of an instruction whose RTIT_CNTP has bit 21 set, with the
/// instruction's sequential NLIP and the cycle count in 3 bytes (§4.2.6).
#[test]
fn periodic_cycle_count() {
    let mut m = user_model(ctl::CYCLE_ACC, cycles(10));
    m.wrmsr(msr::CNTP, (1 << 21) + 3).expect("CNTP is writable");
    let got = run(&mut m, &[ret(0x1000, 0x1800)]);
    #[rustfmt::skip]
    let want = [
        0x9c, 0x01, 0x10,   // FUP.PCC 1001: the RET's NLIP, never executed
        0x0f, 0x00, 0x80,   // CYC 0x200003: CNTP[5:0]=3 | CCNT 3, CNTP[13:6], CNTP[21:14]
        0xb4, 0x00, 0x18,   // TIP 1800
        10 << 2 | 1,        // CYC 10
    ];
    assert_eq!(got, want);
    assert_eq!(m.rdmsr(msr::CNTP), Ok(0));
}

/// §4.2.5: during an overflow no packet, no TNT bit, no compression state; the instruction
/// that clears it sends the partial TNT from before, then FUP.BuffOvf with its next IP
/// (never match-compressed, and not updating LAST_LIP); LAST_CALL_NLIP is cleared.
#[test]
fn buffer_overflow_drops_packets_then_sends_fup_buffovf() {
    let mut m = user_model(ctl::CMPRS_RET, ModelOptions::default());
    let got = run(
        &mut m,
        &[
            call(0x1000, 5, 0x2000), // LAST_CALL_NLIP = 1005
            jcc(0x2000, None),       // N, buffered
            Input::Overflow { instructions: 2 },
            plain(0x2002, 2),          // lost
            ijmp(0x2004, 2, 0x3000),   // lost: no TIP
            jcc(0x3000, Some(0x3100)), // clears the overflow; its bit is lost too
        ],
    );
    assert_eq!(got, [0x02, 0x94, 0x00, 0x31]); // TNT N, FUP.BuffOvf 3100 (its BLIP)
    assert_eq!(m.rdmsr(msr::STATUS).map(|s| s & 8), Ok(0));
    assert_eq!(m.rdmsr(msr::LAST_CALL_NLIP), Ok(0));
    assert_eq!(m.rdmsr(msr::LAST_LIP), Ok(0), "FUP.BuffOvf does not set LAST_LIP");
    // The return is no longer compressed: LAST_CALL_NLIP was cleared.
    assert_eq!(run(&mut m, &[ret(0x3100, 0x1005)]), [0xb4, 0x05, 0x10]);
}

/// An overflow clears only at an instruction that starts with ContextEn set: under
/// user-only tracing, not in the kernel.
#[test]
fn buffer_overflow_waits_for_context() {
    let mut m = user_model(0, ModelOptions::default());
    let got = run(
        &mut m,
        &[
            Input::Overflow { instructions: 1 },
            far(0x1000, 2, FarKind::Syscall, 0xffff_ffff_8100_0000, 0), // lost (FUP.PGD too)
            plain(0xffff_ffff_8100_0000, 3),                            // kernel: cannot clear
            far(0xffff_ffff_8100_0003, 3, FarKind::Sysret, 0x1002, 3),  // kernel: cannot clear
            plain(0x1002, 3),                                           // clears
        ],
    );
    assert_eq!(got, [0x94, 0x05, 0x10]); // FUP.BuffOvf 1005
}

/// A TraceStop range (RANGE1) entered by a taken branch: TraceActive clears, a TraceSTOP is
/// sent, the partial TNT is not flushed (§4.2.11), and nothing follows.
#[test]
fn trace_stop_range() {
    let config = RtitConfig {
        ctl: ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::USER | ctl::DEST,
        events: events(EventId::AlwaysOn, EventId::Range1),
        lip: [0, 0x1800, 0, 0x1900],
        ..all_cpls()
    };
    let mut m = model(&config, CpuState::user(0x1000, 0), ModelOptions::default());
    let got = run(&mut m, &[jcc(0x1000, None), jcc(0x1002, Some(0x1800))]);
    assert_eq!(got, [0xc1]);
    assert_eq!(m.rdmsr(msr::CTL).map(|c| c & ctl::TRACE_ACTIVE), Ok(0));
    assert_eq!(m.rdmsr(msr::TNT_BUFF), Ok(0b101));
    assert_eq!(run(&mut m, &[ijmp(0x1800, 2, 0x1000), plain(0x1000, 1)]), [0u8; 0]);
}

/// With the reset Pkt_Mask (2), a PSB follows the packet that sets bit 13 of Pkt_Cnt, and
/// the TIP after it cannot be match-compressed (the PSB cleared LAST_LIP).
#[test]
fn psb_period_from_pkt_mask() {
    let mut m = user_model(0, ModelOptions::default());
    m.wrmsr(msr::PKT_CNT, 0x2_0000 | (0x2000 - 4))
        .expect("Pkt_Cnt just below bit 13");
    let got = run(&mut m, &[ijmp(0x1000, 2, 0x1100), ijmp(0x1100, 2, 0x1200)]);
    // 3 bytes of TIP cross bit 13 (0x1ffc + 3 = 0x1fff: not yet); the next one does.
    assert_eq!(got, [&[0xb4, 0x00, 0x11, 0xb4, 0x00, 0x12][..], &PSB].concat());
    assert_eq!(m.rdmsr(msr::PKT_CNT), Ok(0x2_0009));
    assert_eq!(m.rdmsr(msr::LAST_LIP), Ok(0));
}

/// STS on a time-sync event, with the TSC of the synthetic clock.
#[test]
fn sts_on_time_sync() {
    let options = ModelOptions {
        cycles_per_op: 0,
        tsc: 0xab_cdef_0123,
        core_bus_ratio: 45,
        ..ModelOptions::default()
    };
    let mut m = user_model(ctl::STS_EN, options);
    // ACBR = ECBR = 45 = 0b101101: header d0 | 0b1011, then 0b01 << 6 | 0b101101.
    assert_eq!(
        run(&mut m, &[Input::TimeSync]),
        [0xdb, 0x6d, 0x23, 0x01, 0xef, 0xcd, 0xab]
    );
    // Without STS_En, nothing.
    let mut m = user_model(0, options);
    assert_eq!(run(&mut m, &[Input::TimeSync]), [0u8; 0]);
}

/// §3.3.9: the PSB's clearing of LAST_LIP may take effect up to 4 packets late. With a delay
/// of 2, the two packets after the PSB still compress against the IP from before it.
#[test]
fn late_clearing_after_a_psb() {
    let options = ModelOptions {
        psb_clear_delay: 2,
        ..ModelOptions::default()
    };
    let a = 0x7f00_0000_1000;
    let mut m = user_model_at(a, options);
    m.wrmsr(msr::PKT_CNT, 0x2_0000 | (0x2000 - 1))
        .expect("Pkt_Cnt just below bit 13");
    let targets = [a + 0x10, a + 0x20, a + 0x30, a + 0x40];
    let inputs: Vec<Input> = (0..4)
        .map(|i| ijmp(if i == 0 { a } else { targets[i - 1] }, 2, targets[i]))
        .collect();
    #[rustfmt::skip]
    let want = [
        &[0xb0, 0x10, 0x10][..],        // TIP …1010, 2 bytes: crosses bit 13
        &PSB,
        &[0xb0, 0x20, 0x10],            // still against the old LAST_LIP
        &[0xb0, 0x30, 0x10],            // likewise
        &[0xb2, 0x40, 0x10, 0, 0, 0, 0x7f], // cleared now: in full
    ]
    .concat();
    assert_eq!(run(&mut m, &inputs), want);
}

fn user_model_at(ip: u64, options: ModelOptions) -> UnitModel {
    let config = RtitConfig {
        ctl: ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::USER | ctl::DEST,
        ..all_cpls()
    };
    let mut m = model(&config, CpuState::user(ip, 0), options);
    m.take_output();
    m
}

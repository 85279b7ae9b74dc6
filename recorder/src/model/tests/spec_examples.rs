//! The spec's own worked examples.

use rtit_replay_core::cofi::FarKind;
use rtit_replay_core::regs::{ctl, events, msr, EventId};

use super::*;

/// Table 3 (§2.5.1): all CPLs traced, IP filter RANGE0 = 0x100–0x110, far jumps and a divide
/// fault. The table's step 2 (XOR at 0x100) cannot follow step 1's jump to 0x102 and produces
/// nothing anyway, so it is left out; every other step is as printed.
#[test]
fn table_3_trace_example() {
    let config = RtitConfig {
        events: events(EventId::Range0, EventId::AlwaysOff),
        lip: [0x100, 0, 0x110, 0],
        ..all_cpls()
    };
    let mut m = model(
        &config,
        CpuState {
            ip: 0x20,
            cpl: 0,
            cr3: 0,
            paging: true,
        },
        ModelOptions::default(),
    );
    // Enabling inside no range: a PSB only (FilterEn waits for the range to be entered).
    assert_eq!(m.output(), PSB);
    let got = run(
        &mut m,
        &[
            jmp(0x20, 3, 0x102),                      // 1: jmp to 102
            far(0x102, 3, FarKind::FarJmp, 0x983, 0), // 3: far jmp to 983
            far(0x983, 2, FarKind::FarJmp, 0x10e, 0), // 4: far jmp to 10e
            Input::Fault { handler: 0x345, cpl: 0 },  // 5: divide at 10e faults
            plain(0x345, 3),                          // 6: add
            plain(0x348, 4),                          // 7: pop
            plain(0x34c, 4),                          // 8: modify
            plain(0x350, 3),                          // 9: push
            far(0x353, 4, FarKind::Iret, 0x113, 0),   // 10: iret to 113
        ],
    );
    #[rustfmt::skip]
    let want = [
        0x84, 0x02, 0x01, // 1: FUP.PGE 102 (BLIP)
        0x8c, 0x05, 0x01, // 3: FUP.PGD 105 (NLIP)
        0xb4, 0x83, 0x09, //    TIP 983 (BLIP)
        0x84, 0x0e, 0x01, // 4: FUP.PGE 10e (BLIP)
        0x8c, 0x0e, 0x01, // 5: FUP.PGD 10e (the faulting instruction, table 1)
        0xb4, 0x45, 0x03, //    TIP 345 (BLIP)
                          // 6-10: nothing, 113 is outside the range
    ];
    assert_eq!(got, want);
}

fn ret_compression() -> RtitConfig {
    RtitConfig {
        ctl: ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::USER | ctl::CMPRS_RET | ctl::DEST,
        ..all_cpls()
    }
}

/// Figure 6: a call and its return with no call in between: the RET becomes one taken TNT
/// bit, and the match does not clear RTIT_LAST_CALL_NLIP, so a second RET to the same address
/// compresses too.
#[test]
fn figure_6_return_compression_without_nested_calls() {
    let mut m = model(&ret_compression(), CpuState::user(0x005, 0), ModelOptions::default());
    assert_eq!(m.output()[9..], [0x84, 0x05, 0x00]); // PSB, FUP.PGE 005
    let got = run(&mut m, &[call(0x005, 5, 0x400), plain(0x400, 5), ret(0x405, 0x00a)]);
    assert_eq!(got, [0u8; 0], "the T bit waits in RTIT_TNT_BUFF");
    assert_eq!(m.rdmsr(msr::TNT_BUFF), Ok(0b11));
    assert_eq!(m.rdmsr(msr::LAST_CALL_NLIP), Ok(0x00a | 1 << 48));
    // Back into the function by a jump, and out by a RET to the same NLIP: still compressed.
    let got = run(
        &mut m,
        &[jmp(0x00a, 2, 0x400), ret(0x400, 0x00a), ijmp(0x00a, 2, 0x600)],
    );
    assert_eq!(got, [0b111, 0xb4, 0x00, 0x06]); // TNT T T, TIP 600
}

/// Figure 7: nested calls. Only the innermost return compresses: the outer RET's target
/// (00a) is not the NLIP of the last call (409), so it sends a TIP.
#[test]
fn figure_7_return_compression_with_nested_calls() {
    let mut m = model(&ret_compression(), CpuState::user(0x005, 0), ModelOptions::default());
    let got = run(
        &mut m,
        &[
            call(0x005, 5, 0x400), // LAST_CALL_NLIP = 00a
            plain(0x400, 5),
            call(0x405, 4, 0x500), // LAST_CALL_NLIP = 409 (steps 3, 4)
            plain(0x500, 2),
            ret(0x502, 0x409), // step 5: matches: T
            plain(0x409, 3),   // INC AX
            ret(0x40c, 0x00a), // no match: TIP
        ],
    );
    assert_eq!(got, [0x03, 0xb4, 0x0a, 0x00]); // TNT T, TIP 00a
}

/// A compressed RET does not update RTIT_LAST_LIP (§4.2.3.2). The RET here returns to the
/// 7f00… region while LAST_LIP holds a 5500… address; the TIP after it compresses to 2 bytes
/// only if LAST_LIP still holds 5500… (had the RET updated it, the TIP would need 6).
#[test]
fn a_compressed_return_leaves_last_lip_alone() {
    let a = 0x7f00_0000_0005;
    let mut m = model(&ret_compression(), CpuState::user(a, 0), ModelOptions::default());
    let got = run(
        &mut m,
        &[
            call(a, 5, 0x5500_0000_0400),
            ijmp(0x5500_0000_0400, 2, 0x5500_0000_0800),
            ret(0x5500_0000_0800, a + 5),
            ijmp(a + 5, 2, 0x5500_0000_1234),
        ],
    );
    #[rustfmt::skip]
    let want = [
        0xb2, 0x00, 0x08, 0x00, 0x00, 0x00, 0x55, // TIP 5500_0000_0800 in full
        0x03,                                     // TNT T: the compressed RET
        0xb0, 0x34, 0x12,                         // TIP, 2 bytes against 5500_0000_0800
    ];
    assert_eq!(got, want);
}

/// The worked example of §3.3.9: Pkt_Cnt 0xffc with Pkt_Mask 1 and a far transfer: the
/// 7-byte FUP.FAR sets bit 12, so Pkt_Cnt becomes 0, a PSB follows (9), then the TIP (zero
/// extension only, since the PSB cleared LAST_LIP: 5 bytes): Pkt_Cnt ends at 0xE.
#[test]
fn pkt_cnt_worked_example_of_3_3_9() {
    let start = 0x7fff_0000_1000;
    let mut m = model(
        &all_cpls(),
        CpuState {
            ip: start,
            cpl: 0,
            cr3: 0,
            paging: true,
        },
        ModelOptions::default(),
    );
    assert_eq!(m.output()[9..], [0x82, 0x00, 0x10, 0x00, 0x00, 0xff, 0x7f]); // PSB, PGE in full
    run(&mut m, &[jmp(start, 5, 0x5555_0000_2000)]);
    m.wrmsr(msr::PKT_CNT, 0x1_0ffc).expect("Pkt_Mask 1, Pkt_Cnt 0xffc");
    let got = run(&mut m, &[far(0x5555_0000_2000, 5, FarKind::FarCall, 0x40_1000, 0)]);
    let mut want = vec![0xba, 0x05, 0x20, 0x00, 0x00, 0x55, 0x55]; // FUP.FAR, 6 bytes
    want.extend_from_slice(&PSB);
    want.extend_from_slice(&[0xb5, 0x00, 0x10, 0x40, 0x00]); // TIP, 4 bytes zero-extended
    assert_eq!(got, want);
    assert_eq!(m.rdmsr(msr::PKT_CNT), Ok(0x1_000e));
}

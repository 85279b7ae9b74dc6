//! One test per row of table 19 (§4.3.1): packets per operation and PacketEn transition.
//!
//! PacketEn is switched by an IP filter, RANGE0 = [0x1000, 0x2000) with all CPLs traced, so
//! that ContextEn stays 1 unless a row needs it to change. "Inside" starts with a jump into the
//! range (FUP.PGE 1000, which leaves LAST_LIP = 1000); "outside" starts at 0x800 right after
//! enabling (LAST_LIP cleared by the PSB). Buffered TNT bits are N then T, from two
//! conditional branches at 1000 and 1002 that end at 1100: a partial TNT `05`.

use rtit_replay_core::cofi::FarKind;
use rtit_replay_core::regs::{ctl, events, msr, EventId};

use super::*;

fn range_config() -> RtitConfig {
    RtitConfig {
        events: events(EventId::Range0, EventId::AlwaysOff),
        lip: [0x1000, 0, 0x2000, 0],
        ..all_cpls()
    }
}

fn outside_at(ip: u64) -> UnitModel {
    let m = model(&range_config(), CpuState::user(ip, 0), ModelOptions::default());
    assert_eq!(m.output(), PSB);
    m
}

fn outside() -> UnitModel {
    outside_at(0x800)
}

/// PacketEn set at 0x1000.
fn inside() -> UnitModel {
    let mut m = outside();
    assert_eq!(run(&mut m, &[jmp(0x800, 2, 0x1000)]), [0x84, 0x00, 0x10]);
    m
}

/// PacketEn set at 0x1100 with N, T buffered.
fn inside_with_tnt() -> UnitModel {
    let mut m = inside();
    assert_eq!(run(&mut m, &[jcc(0x1000, None), jcc(0x1002, Some(0x1100))]), [0u8; 0]);
    assert_eq!(m.rdmsr(msr::TNT_BUFF), Ok(0b101));
    m
}

/// PacketEn set at 0x100a with five N bits buffered.
fn inside_with_five_bits() -> UnitModel {
    let mut m = inside();
    for ip in (0x1000..0x100a).step_by(2) {
        run(&mut m, &[jcc(ip, None)]);
    }
    assert_eq!(m.rdmsr(msr::TNT_BUFF), Ok(0b10_0000));
    m
}

#[test]
fn row_01_normal_instruction_stays_enabled() {
    assert_eq!(run(&mut inside(), &[plain(0x1000, 3)]), [0u8; 0]);
}

#[test]
fn row_02_normal_instruction_stays_disabled() {
    assert_eq!(run(&mut outside(), &[plain(0x800, 3)]), [0u8; 0]);
}

#[test]
fn row_03_normal_instruction_walks_out() {
    let mut m = inside();
    let got = run(&mut m, &[jmp(0x1000, 2, 0x1ffe), plain(0x1ffe, 2)]);
    assert_eq!(got, [0x8c, 0x00, 0x20]); // FUP.PGD 2000 (NLIP)
}

#[test]
fn row_04_normal_instruction_walks_out_with_tnt() {
    let mut m = inside_with_tnt();
    let got = run(&mut m, &[jmp(0x1100, 2, 0x1ffe), plain(0x1ffe, 2)]);
    assert_eq!(got, [0x05, 0x8c, 0x00, 0x20]);
}

#[test]
fn row_05_normal_instruction_walks_in() {
    let mut m = outside_at(0xffe);
    assert_eq!(run(&mut m, &[plain(0xffe, 2)]), [0x84, 0x00, 0x10]); // FUP.PGE 1000 (NLIP)
}

#[test]
fn row_06_direct_jump_stays_enabled() {
    assert_eq!(run(&mut inside(), &[jmp(0x1000, 2, 0x1800)]), [0u8; 0]);
}

#[test]
fn row_07_direct_jump_stays_disabled() {
    assert_eq!(run(&mut outside(), &[jmp(0x800, 2, 0x900)]), [0u8; 0]);
}

#[test]
fn row_08_direct_jump_out() {
    // FUP.PGD carries the jump's NLIP 1002, not its target (table 1).
    assert_eq!(run(&mut inside(), &[jmp(0x1000, 2, 0x3000)]), [0x8c, 0x02, 0x10]);
}

#[test]
fn row_09_direct_jump_out_with_tnt() {
    let got = run(&mut inside_with_tnt(), &[jmp(0x1100, 2, 0x3000)]);
    assert_eq!(got, [0x05, 0x8c, 0x02, 0x11]);
}

#[test]
fn row_10_direct_jump_in() {
    assert_eq!(run(&mut outside(), &[jmp(0x800, 2, 0x1100)]), [0x84, 0x00, 0x11]);
    // BLIP
}

/// Row 11: a taken conditional branch that does not fill the buffer is a direct jump plus a
/// TNT bit when it starts enabled.
#[test]
fn row_11_conditional_taken_not_filling() {
    let mut m = inside();
    assert_eq!(run(&mut m, &[jcc(0x1000, Some(0x1100))]), [0u8; 0]);
    assert_eq!(m.rdmsr(msr::TNT_BUFF), Ok(0b11));
    // Out of the range: the bit, flushed by the FUP.PGD with the NLIP.
    assert_eq!(
        run(&mut inside(), &[jcc(0x1000, Some(0x3000))]),
        [0x03, 0x8c, 0x02, 0x10]
    );
    // Into the range: FUP.PGE with the target, no bit (it started disabled).
    let mut m = outside();
    assert_eq!(run(&mut m, &[jcc(0x800, Some(0x1100))]), [0x84, 0x00, 0x11]);
    assert_eq!(m.rdmsr(msr::TNT_BUFF), Ok(1));
    assert_eq!(run(&mut outside(), &[jcc(0x800, Some(0x900))]), [0u8; 0]);
}

/// Row 12: a conditional branch not taken is a normal instruction plus a TNT bit when it
/// starts enabled.
#[test]
fn row_12_conditional_not_taken_not_filling() {
    let mut m = inside();
    assert_eq!(run(&mut m, &[jcc(0x1000, None)]), [0u8; 0]);
    assert_eq!(m.rdmsr(msr::TNT_BUFF), Ok(0b10));
    let got = run(&mut inside(), &[jmp(0x1000, 2, 0x1ffe), jcc(0x1ffe, None)]);
    assert_eq!(got, [0x02, 0x8c, 0x00, 0x20]); // N, then FUP.PGD 2000
    let mut m = outside_at(0xffe);
    assert_eq!(run(&mut m, &[jcc(0xffe, None)]), [0x84, 0x00, 0x10]);
    assert_eq!(m.rdmsr(msr::TNT_BUFF), Ok(1));
}

#[test]
fn row_13_conditional_taken_fills_the_buffer() {
    let got = run(&mut inside_with_five_bits(), &[jcc(0x100a, Some(0x1100))]);
    assert_eq!(got, [0b100_0001]); // full TNT: N N N N N T
}

/// Rows 14, 16, 18 and 20 are impossible: a conditional branch that starts with PacketEn
/// clear never adds a TNT bit (§4.3.2), so it cannot fill the buffer.
#[test]
fn rows_14_16_18_20_no_bits_without_packet_en() {
    let mut m = outside();
    for ip in (0x800..0x80c).step_by(2) {
        assert_eq!(run(&mut m, &[jcc(ip, Some(ip + 2))]), [0u8; 0]);
    }
    assert_eq!(run(&mut m, &[jcc(0x80c, Some(0x900)), jcc(0x900, None)]), [0u8; 0]);
    assert_eq!(m.rdmsr(msr::TNT_BUFF), Ok(1));
}

#[test]
fn row_15_conditional_taken_fills_the_buffer_and_leaves() {
    let got = run(&mut inside_with_five_bits(), &[jcc(0x100a, Some(0x3000))]);
    assert_eq!(got, [0b100_0001, 0x8c, 0x0c, 0x10]); // full TNT, FUP.PGD 100c
}

#[test]
fn row_17_conditional_not_taken_fills_the_buffer() {
    assert_eq!(run(&mut inside_with_five_bits(), &[jcc(0x100a, None)]), [0b100_0000]);
}

#[test]
fn row_19_conditional_not_taken_fills_the_buffer_and_walks_out() {
    let mut m = inside();
    let mut inputs = vec![jmp(0x1000, 2, 0x1ff4)];
    inputs.extend((0x1ff4..0x2000).step_by(2).map(|ip| jcc(ip, None)));
    assert_eq!(run(&mut m, &inputs), [0b100_0000, 0x8c, 0x00, 0x20]);
}

#[test]
fn row_21_indirect_stays_enabled() {
    assert_eq!(run(&mut inside(), &[ijmp(0x1000, 2, 0x1800)]), [0xb4, 0x00, 0x18]);
}

#[test]
fn row_22_indirect_stays_enabled_with_tnt() {
    let got = run(&mut inside_with_tnt(), &[ijmp(0x1100, 2, 0x1800)]);
    assert_eq!(got, [0x05, 0xb4, 0x00, 0x18]);
}

#[test]
fn row_23_indirect_stays_disabled() {
    assert_eq!(run(&mut outside(), &[ijmp(0x800, 2, 0x900)]), [0u8; 0]);
}

#[test]
fn row_24_indirect_out() {
    let got = run(&mut inside(), &[ijmp(0x1000, 2, 0x3000)]);
    assert_eq!(got, [0xb4, 0x00, 0x30, 0x8c, 0x02, 0x10]); // TIP 3000, FUP.PGD 1002
}

#[test]
fn row_25_indirect_out_with_tnt() {
    let got = run(&mut inside_with_tnt(), &[ijmp(0x1100, 2, 0x3000)]);
    assert_eq!(got, [0x05, 0xb4, 0x00, 0x30, 0x8c, 0x02, 0x11]);
}

#[test]
fn row_26_indirect_in() {
    assert_eq!(run(&mut outside(), &[ijmp(0x800, 2, 0x1100)]), [0x84, 0x00, 0x11]);
}

#[test]
fn row_27_far_transfer_stays_enabled() {
    let got = run(&mut inside(), &[far(0x1000, 5, FarKind::FarJmp, 0x1800, 3)]);
    assert_eq!(got, [0xbc, 0x05, 0x10, 0xb4, 0x00, 0x18]); // FUP.FAR 1005 (NLIP), TIP 1800
}

#[test]
fn row_28_far_transfer_stays_enabled_with_tnt() {
    let got = run(&mut inside_with_tnt(), &[far(0x1100, 5, FarKind::FarCall, 0x1800, 3)]);
    assert_eq!(got, [0x05, 0xbc, 0x05, 0x11, 0xb4, 0x00, 0x18]);
}

#[test]
fn row_29_far_transfer_stays_disabled() {
    assert_eq!(
        run(&mut outside(), &[far(0x800, 5, FarKind::FarJmp, 0x900, 3)]),
        [0u8; 0]
    );
}

#[test]
fn row_30_far_transfer_out_keeping_context() {
    let got = run(&mut inside(), &[far(0x1000, 5, FarKind::FarJmp, 0x3000, 3)]);
    assert_eq!(got, [0x8c, 0x05, 0x10, 0xb4, 0x00, 0x30]); // FUP.PGD replaces FUP.FAR; TIP
}

#[test]
fn row_31_far_transfer_out_keeping_context_with_tnt() {
    let got = run(&mut inside_with_tnt(), &[far(0x1100, 5, FarKind::FarJmp, 0x3000, 3)]);
    assert_eq!(got, [0x05, 0x8c, 0x05, 0x11, 0xb4, 0x00, 0x30]);
}

/// User-only tracing with no IP filter: SYSCALL leaves ContextEn.
fn user_only() -> UnitModel {
    let config = RtitConfig {
        ctl: ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::USER | ctl::DEST,
        ..all_cpls()
    };
    let mut m = model(&config, CpuState::user(0x1000, 0), ModelOptions::default());
    assert_eq!(m.take_output()[9..], [0x84, 0x00, 0x10]);
    m
}

const KERNEL: u64 = 0xffff_ffff_8100_0000;

#[test]
fn row_32_far_transfer_leaves_context() {
    let mut m = user_only();
    let got = run(&mut m, &[far(0x1000, 2, FarKind::Syscall, KERNEL, 0)]);
    assert_eq!(got, [0x8c, 0x02, 0x10]); // FUP.PGD 1002 (NLIP), no TIP
}

#[test]
fn row_33_far_transfer_leaves_context_with_tnt() {
    let mut m = user_only();
    run(&mut m, &[jcc(0x1000, None), jcc(0x1002, Some(0x1100))]);
    let got = run(&mut m, &[far(0x1100, 2, FarKind::Syscall, KERNEL, 0)]);
    assert_eq!(got, [0x05, 0x8c, 0x02, 0x11]);
}

#[test]
fn row_34_far_transfer_enters_context() {
    let mut m = user_only();
    run(&mut m, &[far(0x1000, 2, FarKind::Syscall, KERNEL, 0), plain(KERNEL, 4)]);
    // SYSRET from the kernel (not traced, so its address does not matter) to 1002.
    let got = run(&mut m, &[far(KERNEL + 0x40, 3, FarKind::Sysret, 0x1002, 3)]);
    assert_eq!(got, [0x84, 0x02, 0x10]); // FUP.PGE 1002 (BLIP)
}

#[test]
fn row_35_far_transfer_enters_filter_range() {
    let got = run(&mut outside(), &[far(0x800, 5, FarKind::FarJmp, 0x1100, 3)]);
    assert_eq!(got, [0x84, 0x00, 0x11]);
}

#[test]
fn row_36_smi_or_vm_exit() {
    // FUP.PGD with the address saved as the IP to resume at: 1000.
    assert_eq!(run(&mut inside(), &[Input::ExitToHost]), [0x8c, 0x00, 0x10]);
}

#[test]
fn row_37_smi_or_vm_exit_with_tnt() {
    assert_eq!(
        run(&mut inside_with_tnt(), &[Input::ExitToHost]),
        [0x05, 0x8c, 0x00, 0x11]
    );
}

#[test]
fn row_38_rsm_or_vm_entry() {
    let mut m = inside();
    run(&mut m, &[Input::ExitToHost]);
    let got = run(&mut m, &[Input::EnterFromHost { ip: 0x1200, cpl: 3 }]);
    assert_eq!(got, [0x84, 0x00, 0x12]); // FUP.PGE 1200 (BLIP)
}

/// STS with a constant TSC (no cycles per operation): ratio 20 = 0b010100 in both fields.
const STS_BYTES: [u8; 7] = [0xd5, 0x14, 0x9a, 0x78, 0x56, 0x34, 0x12];

fn cr3_options() -> ModelOptions {
    ModelOptions {
        cycles_per_op: 0,
        tsc: 0x12_3456_789a,
        ..ModelOptions::default()
    }
}

/// The filter configuration plus STS on CR3 writes.
fn cr3_filter_model(start: u64) -> UnitModel {
    let mut config = range_config();
    config.ctl |= ctl::STS_EN | ctl::STS_ON_CR3;
    model(&config, CpuState::user(start, 0), cr3_options())
}

/// A PIP with CR0.PG set and CR3 0x5000.
const PIP_5000: [u8; 6] = [0xc3, 0x00, 0x50, 0x00, 0x00, 0x00];

#[test]
fn row_39_mov_cr3_stays_enabled() {
    let mut m = cr3_filter_model(0x800);
    run(&mut m, &[jmp(0x800, 2, 0x1000)]);
    let got = run(&mut m, &[Input::Cr3Change { cr3: 0x5000 }]);
    assert_eq!(got, [&PIP_5000[..], &STS_BYTES].concat());
}

#[test]
fn row_40_mov_cr3_stays_enabled_with_tnt() {
    let mut m = cr3_filter_model(0x800);
    run(
        &mut m,
        &[jmp(0x800, 2, 0x1000), jcc(0x1000, None), jcc(0x1002, Some(0x1100))],
    );
    let got = run(&mut m, &[Input::Cr3Change { cr3: 0x5000 }]);
    assert_eq!(got, [&[0x05][..], &PIP_5000, &STS_BYTES].concat());
}

#[test]
fn row_41_mov_cr3_stays_disabled() {
    // ContextEn is 1 outside the filter range, so PIP and STS are still sent.
    let mut m = cr3_filter_model(0x800);
    let got = run(&mut m, &[Input::Cr3Change { cr3: 0x5000 }]);
    assert_eq!(got, [&PIP_5000[..], &STS_BYTES].concat());
}

/// CR3 filtering on RTIT_CR3_MATCH = 0x5000, no IP filter: a CR3 write switches ContextEn.
/// With CR3En set there is no PIP (§4.2.10).
fn cr3_match_model(cr3: u64) -> UnitModel {
    let config = RtitConfig {
        ctl: all_cpls().ctl | ctl::CR3_EN | ctl::STS_EN | ctl::STS_ON_CR3,
        cr3_match: 0x5000,
        ..all_cpls()
    };
    model(&config, CpuState::user(0x1000, cr3), cr3_options())
}

#[test]
fn row_42_mov_cr3_enters_context() {
    let mut m = cr3_match_model(0x6000);
    assert_eq!(m.output(), PSB);
    let got = run(&mut m, &[Input::Cr3Change { cr3: 0x5000 }]);
    // STS, then FUP.PGE 1000 (NLIP), LAST_LIP cleared by the PSB.
    assert_eq!(got, [&STS_BYTES[..], &[0x84, 0x00, 0x10]].concat());
}

#[test]
fn row_43_mov_cr3_leaves_context() {
    let mut m = cr3_match_model(0x5000);
    assert_eq!(m.output()[9..], [0x84, 0x00, 0x10]);
    let got = run(&mut m, &[Input::Cr3Change { cr3: 0x6000 }]);
    assert_eq!(got, [&STS_BYTES[..], &[0x8c, 0x00, 0x10]].concat());
}

#[test]
fn row_44_mov_cr3_leaves_context_with_tnt() {
    let mut m = cr3_match_model(0x5000);
    run(&mut m, &[jcc(0x1000, None), jcc(0x1002, Some(0x1100))]);
    let got = run(&mut m, &[Input::Cr3Change { cr3: 0x6000 }]);
    assert_eq!(got, [&[0x05][..], &STS_BYTES, &[0x8c, 0x00, 0x11]].concat());
}

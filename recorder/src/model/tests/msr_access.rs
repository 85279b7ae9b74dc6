//! Programming the unit through its MSRs: the access rules of §3.3.1 and the packets an
//! RTIT_CTL write produces (§3.3.2).

use rtit_replay_core::regs::{ctl, msr};

use super::*;

#[test]
fn rtit_ctl_must_be_read_first() {
    let mut m = UnitModel::new(CpuState::user(0x1000, 0), ModelOptions::default());
    assert_eq!(m.rdmsr(msr::STATUS), Err(ModelError::CtlNotRead { msr: msr::STATUS }));
    assert_eq!(m.wrmsr(msr::CTL, 0), Err(ModelError::CtlNotRead { msr: msr::CTL }));
    assert_eq!(m.rdmsr(msr::CTL), Ok(0));
    assert_eq!(m.rdmsr(msr::PKT_CNT), Ok(0x2_0000), "reset value");
    assert_eq!(m.rdmsr(msr::LIMIT_MASK), Ok(0x7f));
    assert_eq!(m.rdmsr(msr::TNT_BUFF), Ok(1));
    assert_eq!(m.rdmsr(0x123), Err(ModelError::UnknownMsr(0x123)));
}

use super::super::ModelError;

/// Trace_En first, then TraceActive: TriggerEn 0 → 1 sends a PSB and, PacketEn becoming 1,
/// FUP.PGE with the next instruction. Setting both in one write is undefined (§3.3.2).
#[test]
fn enabling_sends_psb_and_fup_pge() {
    let mut m = UnitModel::new(CpuState::user(0x1000, 0), ModelOptions::default());
    m.rdmsr(msr::CTL).expect("read");
    let both = ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::USER;
    assert!(matches!(m.wrmsr(msr::CTL, both), Err(ModelError::Undefined(_))));
    m.wrmsr(msr::EVENTS, 0x37).expect("always on, never stop");
    m.wrmsr(msr::CTL, ctl::TRACE_EN | ctl::USER).expect("Trace_En");
    assert_eq!(m.output(), [0u8; 0]);
    m.wrmsr(msr::CTL, both).expect("TraceActive");
    assert_eq!(m.output(), [&PSB[..], &[0x84, 0x00, 0x10]].concat());
    assert_eq!(m.rdmsr(msr::STATUS), Ok(0b0111));
}

/// Clearing USER while tracing user code: PacketEn 1 → 0 with TriggerEn still set, so a
/// FUP.PGD (after the partial TNT). Clearing TraceActive instead sends nothing and leaves
/// the partial TNT in RTIT_TNT_BUFF; it comes out before the FUP.PGE when tracing resumes.
#[test]
fn disabling_by_ctl_writes() {
    let mut m = model(&all_cpls(), CpuState::user(0x1000, 0), ModelOptions::default());
    let start = m.output().len();
    run(&mut m, &[jcc(0x1000, Some(0x1100))]);
    m.wrmsr(msr::CTL, all_cpls().ctl & !ctl::USER).expect("clear USER");
    assert_eq!(m.output()[start..], [0x03, 0x8c, 0x00, 0x11]);

    let mut m = model(&all_cpls(), CpuState::user(0x1000, 0), ModelOptions::default());
    let start = m.output().len();
    run(&mut m, &[jcc(0x1000, Some(0x1100))]);
    m.wrmsr(msr::CTL, all_cpls().ctl & !ctl::TRACE_ACTIVE)
        .expect("clear TraceActive");
    assert_eq!(m.output().len(), start);
    assert_eq!(m.rdmsr(msr::TNT_BUFF), Ok(0b11));
    run(&mut m, &[plain(0x1100, 4)]);
    m.wrmsr(msr::CTL, all_cpls().ctl).expect("set TraceActive again");
    let want = [&PSB[..], &[0x03, 0x84, 0x04, 0x11]].concat();
    assert_eq!(m.output()[start..], want);
}

/// RTIT_LAST_LIP reads in the layout of table 9; RTIT_OFFSET follows the bytes written and
/// wraps at RTIT_LIMIT_MASK.
#[test]
fn last_lip_and_offset_registers() {
    let mut m = model(
        &all_cpls(),
        CpuState::user(0x7f12_3456_789a, 0),
        ModelOptions::default(),
    );
    // LIP[31:16] in bits 15:0, LIP[47:32] in bits 31:16, valid in bit 32.
    assert_eq!(m.rdmsr(msr::LAST_LIP), Ok(1 << 32 | 0x7f12_3456));
    assert_eq!(m.rdmsr(msr::OFFSET), Ok(9 + 7));
    m.wrmsr(msr::LAST_LIP, 1 << 32 | 0x7f12_0000).expect("valid write");
    // The next TIP compresses against 7f12_0000_xxxx: 4 bytes.
    let got = run(&mut m, &[ijmp(0x7f12_3456_789a, 2, 0x7f12_0001_0002)]);
    assert_eq!(got, [0xb1, 0x02, 0x00, 0x01, 0x00]);
    m.wrmsr(msr::OFFSET, 0x7e).expect("offset");
    run(&mut m, &[ijmp(0x7f12_0001_0002, 2, 0x7f12_0001_0010)]); // 3 bytes
    assert_eq!(m.rdmsr(msr::OFFSET), Ok(0x01), "(0x7e + 3) & 0x7f");
}

/// A misprogrammed sequence is refused the way the hardware refuses it.
#[test]
fn reserved_bits_and_zero_tnt_buff_are_gp() {
    let mut m = UnitModel::new(CpuState::user(0x1000, 0), ModelOptions::default());
    m.rdmsr(msr::CTL).expect("read");
    let err = m.wrmsr(msr::TNT_BUFF, 0).expect_err("zero TNT_BUFF");
    assert!(err.is_gp() && err.to_string().contains("RTIT_TNT_BUFF"), "{err}");
    let err = m.wrmsr(msr::CTL, 1 << 20).expect_err("reserved");
    assert!(err.is_gp() && err.to_string().contains("RTIT_CTL"), "{err}");
    assert_eq!(m.rdmsr(msr::CTL), Ok(0), "a refused write changes nothing");
}

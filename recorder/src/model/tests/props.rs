//! Whatever the model is fed under whatever valid configuration, its output is a well-formed
//! packet stream: it decodes without a single error in the format RTIT_CTL selects (cycle
//! counts exactly where they belong, no match-compressed IP without a base, PSBs never inside
//! a packet, late clearing after a PSB followed by a decoder that keeps LAST_LIP across it),
//! and every FUP/TIP carries a canonical address.

use proptest::prelude::*;
use rtit_replay_core::cofi::{Cofi, FarKind};
use rtit_replay_core::packet::{DecoderConfig, PacketDecoder};
use rtit_replay_core::regs::{ctl, events, EventId};

use super::*;

pub(in crate::model) fn event_id() -> impl Strategy<Value = EventId> {
    prop_oneof![
        Just(EventId::Range0),
        Just(EventId::Range1),
        Just(EventId::Either),
        Just(EventId::AlwaysOff),
        Just(EventId::AlwaysOn),
    ]
}

/// Addresses in a few regions, so that compression has something to work with.
pub(in crate::model) fn address() -> impl Strategy<Value = u64> {
    prop_oneof![
        (0u64..0x4000).prop_map(|o| 0x40_0000 + o),
        (0u64..0x4000).prop_map(|o| 0x7fff_f7dd_0000 + o),
        (0u64..0x1000).prop_map(|o| 0xffff_ffff_8100_0000 + o),
        any::<u64>().prop_map(|a| rtit_replay_core::ip::canonical(a & rtit_replay_core::ip::LIP_MASK)),
    ]
}

pub(in crate::model) fn config() -> impl Strategy<Value = RtitConfig> {
    let optional = ctl::CYCLE_ACC
        | ctl::OS
        | ctl::USER
        | ctl::STS_ON_CR3
        | ctl::CR3_EN
        | ctl::MTC_EN
        | ctl::STS_EN
        | ctl::CMPRS_RET
        | ctl::LESS_PKTS
        | ctl::MTC_RANGE;
    (
        any::<u64>(),
        event_id(),
        event_id(),
        [address(), address(), address(), address()],
        0u64..4,
    )
        .prop_map(move |(bits, filter, stop, lip, mask)| RtitConfig {
            ctl: ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::DEST | (bits & optional),
            cr3_match: 0x5000,
            events: events(filter, stop),
            lip,
            pkt_cnt: mask << 16,
        })
}

fn cofi() -> impl Strategy<Value = Cofi> {
    prop_oneof![
        4 => Just(Cofi::None),
        4 => Just(Cofi::Conditional),
        1 => Just(Cofi::DirectJump),
        1 => Just(Cofi::DirectCall),
        1 => Just(Cofi::IndirectJump),
        1 => Just(Cofi::IndirectCall),
        2 => Just(Cofi::Return),
        1 => Just(Cofi::Far(FarKind::Syscall)),
        1 => Just(Cofi::Far(FarKind::Iret)),
    ]
}

pub(in crate::model) fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        20 => (address(), 1u8..16, cofi(), address(), any::<bool>(), 0u8..4).prop_map(
            |(ip, len, cofi, target, taken, cpl)| {
                let next = if taken { target } else { ip.wrapping_add(u64::from(len)) };
                let mut r = Retired::new(ip, len, cofi, next).taken(taken);
                if matches!(cofi, Cofi::Far(_)) {
                    r = r.to_cpl(cpl);
                }
                Input::Retire(r)
            }
        ),
        1 => (address(), 0u8..4).prop_map(|(handler, cpl)| Input::Interrupt { handler, cpl }),
        1 => (address(), 0u8..4).prop_map(|(handler, cpl)| Input::Fault { handler, cpl }),
        1 => prop_oneof![Just(0x5000u64), Just(0x6000)].prop_map(|cr3| Input::Cr3Change { cr3 }),
        1 => (0u64..8).prop_map(|instructions| Input::Overflow { instructions }),
        1 => Just(Input::TimeSync),
        1 => Just(Input::ExitToHost),
        1 => (address(), 0u8..4).prop_map(|(ip, cpl)| Input::EnterFromHost { ip, cpl }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn output_always_decodes(
        config in config(),
        start in address(),
        cycles_per_op in 0u32..300,
        psb_clear_delay in 0u8..5,
        inputs in prop::collection::vec(input(), 0..400),
    ) {
        let options = ModelOptions { cycles_per_op, psb_clear_delay, ..ModelOptions::default() };
        let mut m = model(&config, CpuState::user(start, 0x5000), options);
        for input in &inputs {
            m.apply(input);
        }
        let decoder = DecoderConfig::from_rtit_ctl(config.ctl);
        for item in PacketDecoder::new(m.output(), decoder) {
            let d = item.map_err(|e| TestCaseError::fail(e.to_string()))?;
            if let Some(ip) = d.ip {
                prop_assert_eq!(ip, rtit_replay_core::ip::canonical(ip & rtit_replay_core::ip::LIP_MASK));
            }
        }
    }
}

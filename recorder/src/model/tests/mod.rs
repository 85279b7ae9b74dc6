//! Tests of the unit model. Expected bytes are written out from the spec (packet layouts of
//! chapter 4, compression of table 18 worked by hand), never taken from the model's output.
//!
//! Shorthand used in the expectations, all with IPs below 0x10000 so that table 18 always
//! picks a 2-byte zero-extended payload (IP[47:16] are zero; zero extension wins):
//! `84` FUP.PGE, `8c` FUP.PGD, `94` FUP.BuffOvf, `9c` FUP.PCC, `bc` FUP.FAR, `b4` TIP, each
//! followed by IP[7:0], IP[15:8].

mod features;
mod msr_access;
pub(super) mod props;
mod spec_examples;
mod table19;

use rtit_replay_core::cofi::{Cofi, FarKind};
use rtit_replay_core::regs::{ctl, events, reset, EventId};

use super::{CpuState, Input, ModelOptions, Retired, RtitConfig, UnitModel};

pub(super) const PSB: [u8; 9] = [0xc0, 0, 0, 0, 0, 0, 0, 0, 0];

/// A configuration tracing all CPLs with no IP filter and no RET compression.
pub(super) fn all_cpls() -> RtitConfig {
    RtitConfig {
        ctl: ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::OS | ctl::USER | ctl::DEST,
        cr3_match: 0,
        events: events(EventId::AlwaysOn, EventId::AlwaysOff),
        lip: [0; 4],
        pkt_cnt: reset::PKT_CNT,
    }
}

/// A model programmed with `config` on a CPU at `cpu`.
pub(super) fn model(config: &RtitConfig, cpu: CpuState, options: ModelOptions) -> UnitModel {
    let mut m = UnitModel::new(cpu, options);
    m.program(config).expect("valid configuration");
    m
}

/// Feeds inputs; returns the bytes they produced.
pub(super) fn run(m: &mut UnitModel, inputs: &[Input]) -> Vec<u8> {
    let start = m.output().len();
    for input in inputs {
        m.apply(input);
    }
    m.output()[start..].to_vec()
}

pub(super) fn plain(ip: u64, len: u8) -> Input {
    Input::Retire(Retired::plain(ip, len))
}

pub(super) fn jmp(ip: u64, len: u8, target: u64) -> Input {
    Input::Retire(Retired::new(ip, len, Cofi::DirectJump, target))
}

/// A conditional branch of 2 bytes: taken to `target`, or not taken when `target` is None.
pub(super) fn jcc(ip: u64, target: Option<u64>) -> Input {
    let r = Retired::new(ip, 2, Cofi::Conditional, target.unwrap_or(ip + 2));
    Input::Retire(r.taken(target.is_some()))
}

pub(super) fn call(ip: u64, len: u8, target: u64) -> Input {
    Input::Retire(Retired::new(ip, len, Cofi::DirectCall, target))
}

pub(super) fn ijmp(ip: u64, len: u8, target: u64) -> Input {
    Input::Retire(Retired::new(ip, len, Cofi::IndirectJump, target))
}

pub(super) fn ret(ip: u64, target: u64) -> Input {
    Input::Retire(Retired::new(ip, 1, Cofi::Return, target))
}

pub(super) fn far(ip: u64, len: u8, kind: FarKind, target: u64, cpl: u8) -> Input {
    Input::Retire(Retired::new(ip, len, Cofi::Far(kind), target).to_cpl(cpl))
}

//! What each operation produces: table 19 of §4.3.1, with the FUP addresses of table 1 and
//! the RET compression of §4.2.3.2.
//!
//! Every operation (a retired instruction, an interrupt, a fault, a CR3 write, an SMI or
//! VM-exit and its return) goes through [`UnitModel::step`] in the same order:
//! 1. FUP.PCC at the start of an instruction whose cycle counter reached bit 21 (§4.2.6);
//!    the clock advances; during a buffer overflow only the state moves on (§4.2.5);
//! 2. an MTC when the watched TSC bits changed (§4.2.12);
//! 3. the branch's own packets, only if PacketEn was set when it started (§4.3.2): a TNT bit
//!    for a conditional branch or a compressed RET, a TIP for an indirect branch; a near call
//!    records its NLIP for RET compression;
//! 4. the CPU state and the enables move on (CPL, CR3, FilterEn ranges);
//! 5. PIP/STS for a CR3 write; then the packets of the PacketEn transition: FUP.FAR + TIP,
//!    FUP.PGD (+ TIP for a far transfer that keeps ContextEn), or FUP.PGE;
//! 6. a TraceStop if the TraceStop event fired (§4.2.11).

use rtit_replay_core::cofi::Cofi;
use rtit_replay_core::ip::LIP_MASK;
use rtit_replay_core::packet::{FupEvent, Mtc, Packet, Pip, Sts};
use rtit_replay_core::regs::ctl;

use super::{Input, Retired, UnitModel};

/// RTIT_CNTP is 22 bits wide and restarts at 0 when it overflows (§3.3.4).
pub(super) const CNTP_MASK: u32 = (1 << 22) - 1;
/// The bit of RTIT_CNTP that asks for a FUP.PCC (§4.2.6).
const CNTP_MSB: u32 = 1 << 21;

/// An operation, as far as its packets are concerned.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// An instruction that is not a far transfer.
    Near { cofi: Cofi, taken: bool, nlip: u64 },
    /// A far transfer; `fup_ip` is what its FUP.FAR or FUP.PGD carries (table 1).
    Far { fup_ip: u64 },
    /// A write of CR3 (MOV to CR3) whose NLIP is the next instruction.
    Cr3 { cr3: u64 },
}

#[derive(Debug, Clone, Copy)]
struct Step {
    op: Op,
    next_ip: u64,
    next_cpl: u8,
    /// `next_ip` is the target of a taken branch or event (for range detection).
    transfer: bool,
    /// Entering (true) or leaving (false) SMM/VMX host mode.
    host: Option<bool>,
    /// For an instruction: its sequential NLIP, which a FUP.PCC carries (§4.2.6).
    pcc_nlip: Option<u64>,
}

impl UnitModel {
    /// Feeds one input.
    pub fn apply(&mut self, input: &Input) {
        self.exact.forget();
        let here = self.cpu.ip;
        let cpl = self.cpu.cpl;
        let far = |fup_ip, next_ip, next_cpl, host| Step {
            op: Op::Far { fup_ip },
            next_ip,
            next_cpl,
            transfer: true,
            host,
            pcc_nlip: None,
        };
        match *input {
            Input::Retire(r) => self.retire(&r),
            // An interrupt's FUP carries the next instruction, a fault's the faulting one:
            // both are the instruction that did not execute, the model's current IP (table 1).
            Input::Interrupt { handler, cpl } | Input::Fault { handler, cpl } => {
                self.step(far(here, handler, cpl, None))
            }
            Input::ExitToHost => self.step(far(here, here, cpl, Some(true))),
            Input::EnterFromHost { ip, cpl } => self.step(far(here, ip, cpl, Some(false))),
            Input::Cr3Change { cr3 } => self.step(Step {
                op: Op::Cr3 { cr3 },
                next_ip: here,
                next_cpl: cpl,
                transfer: false,
                host: None,
                pcc_nlip: None,
            }),
            Input::Overflow { instructions } => self.overflow = Some(instructions),
            Input::TimeSync => {
                if self.overflow.is_none() {
                    self.sts();
                }
            }
        }
    }

    /// Feeds a retired instruction.
    pub fn retire(&mut self, r: &Retired) {
        // The decoder sees it if it starts with PacketEn set and no overflow drops its packets.
        if self.packet_en() && self.overflow.is_none() {
            self.traced += 1;
        }
        let nlip = r.nlip();
        let (op, transfer) = match r.cofi {
            Cofi::Far(_) => (Op::Far { fup_ip: nlip }, true),
            Cofi::None | Cofi::Exception => (
                Op::Near {
                    cofi: Cofi::None,
                    taken: false,
                    nlip,
                },
                false,
            ),
            cofi => {
                // Every branch but a conditional one not taken lands on a target.
                let transfer = cofi != Cofi::Conditional || r.taken;
                (
                    Op::Near {
                        cofi,
                        taken: r.taken,
                        nlip,
                    },
                    transfer,
                )
            }
        };
        self.step(Step {
            op,
            next_ip: r.next_ip,
            next_cpl: r.next_cpl.unwrap_or(self.cpu.cpl),
            transfer,
            host: None,
            pcc_nlip: Some(nlip),
        });
    }

    fn step(&mut self, s: Step) {
        self.exact.forget();
        let trigger = self.trigger_en();
        let ctx_before = self.context_en();
        let pe_before = trigger && ctx_before && self.filter_en;
        let less = self.regs.has(ctl::LESS_PKTS);

        // 1. A FUP.PCC at the beginning of an instruction whose cycle counter reached its MSB
        //    (§4.2.6), not during an overflow; then time passes, the cycle counter counting in
        //    the mode of table 17.
        if let (Some(nlip), None) = (s.pcc_nlip, self.overflow) {
            let mode = if less { pe_before } else { trigger && ctx_before };
            if self.out.cycle_accurate && self.out.cntp & CNTP_MSB != 0 && mode {
                self.out.fup(FupEvent::PeriodicCycleCount, nlip);
            }
        }
        let cycles = self.clock.tick();
        if trigger && ctx_before && (less || self.filter_en) {
            self.out.cntp = (self.out.cntp + cycles) & CNTP_MASK;
        }
        if let Some(remaining) = self.overflow {
            self.step_in_overflow(s, remaining, trigger && ctx_before);
            return;
        }

        // 2. An MTC when the watched TSC bits changed.
        self.mtc(if less { pe_before } else { trigger });

        // 3. The branch's own packets, decided by PacketEn at its start.
        if let (true, Op::Near { cofi, taken, nlip }) = (pe_before, s.op) {
            let compress = self.regs.has(ctl::CMPRS_RET);
            match cofi {
                Cofi::Conditional => self.out.tnt_bit(taken),
                Cofi::Return if compress && self.out.last_call_nlip == Some(s.next_ip & LIP_MASK) => {
                    self.out.tnt_bit(true)
                }
                Cofi::Return | Cofi::IndirectJump | Cofi::IndirectCall => self.out.tip(s.next_ip),
                _ => {}
            }
            if compress && cofi.is_near_call() {
                self.out.last_call_nlip = Some(nlip & LIP_MASK);
            }
        }

        // 4. State.
        let ctx_after = self.advance(&s);
        let pe_after = self.packet_en();

        // 5. CR3 packets, then the PacketEn transition.
        if let Op::Cr3 { cr3 } = s.op {
            // Rows 40 and 44 list the partial TNT first, whatever else follows.
            if pe_before {
                self.out.flush_tnt();
            }
            if trigger && ctx_after && !self.regs.has(ctl::CR3_EN) {
                self.out.flush_tnt();
                self.out.emit(Packet::Pip(Pip {
                    cr3: cr3 & ((1 << 40) - 1),
                    pg: self.cpu.paging,
                }));
            }
            if self.regs.has(ctl::STS_ON_CR3) {
                self.sts();
            }
        }
        match (pe_before, pe_after, s.op) {
            (true, true, Op::Far { fup_ip }) => {
                self.out.fup(FupEvent::FarTransfer, fup_ip);
                self.out.tip(s.next_ip);
            }
            (true, false, Op::Far { fup_ip }) => {
                // The FUP.PGD replaces the FUP.FAR (§4.2.9); the TIP only if ContextEn stays.
                self.out.fup(FupEvent::PacketGenDisable, fup_ip);
                if ctx_after {
                    self.out.tip(s.next_ip);
                }
            }
            // Leaving by a near branch or walking out: the NLIP, not the target (table 1).
            (true, false, Op::Near { nlip, .. }) => self.out.fup(FupEvent::PacketGenDisable, nlip),
            (true, false, Op::Cr3 { .. }) => self.out.fup(FupEvent::PacketGenDisable, s.next_ip),
            (false, true, _) => self.out.fup(FupEvent::PacketGenEnable, s.next_ip),
            _ => {}
        }

        // 6. TraceStop.
        if self.stop_fired(ctx_after) {
            self.trace_stop();
        }
    }

    /// An operation during a buffer overflow: no packets, no TNT bits, no compression state;
    /// the enables and ranges still move on. The first operation that starts with TriggerEn
    /// and ContextEn once the buffer has drained clears the overflow: the partial TNT from
    /// before goes out, then FUP.BuffOvf with this operation's next IP (table 1: NLIP/BLIP),
    /// then any TraceStop held during the overflow.
    fn step_in_overflow(&mut self, s: Step, remaining: u64, can_clear: bool) {
        // MTCs due now are lost, but the clock's record of the watched bits moves on.
        let _lost = self.clock.mtc_change(self.regs.mtc_range());
        let ctx_after = self.advance(&s);
        if self.stop_fired(ctx_after) {
            self.pending_stop = true;
        }
        if remaining == 0 && can_clear {
            self.overflow = None;
            self.out.buffer_overflow(s.next_ip);
            if std::mem::take(&mut self.pending_stop) {
                self.trace_stop();
            }
        } else {
            self.overflow = Some(remaining.saturating_sub(1));
        }
    }

    /// Moves the CPU state and the enables past an operation; returns ContextEn after it.
    fn advance(&mut self, s: &Step) -> bool {
        if let Some(host) = s.host {
            self.in_host = host;
        }
        if let Op::Cr3 { cr3 } = s.op {
            self.cpu.cr3 = cr3;
        }
        self.cpu.ip = s.next_ip;
        self.cpu.cpl = s.next_cpl;
        let ctx_after = self.context_en();
        // Range detection is frozen while Trace_En or ContextEn is 0 (§2.1.3).
        if self.regs.has(ctl::TRACE_EN) && ctx_after {
            self.ranges.update(&self.regs, s.transfer, s.next_ip);
            self.filter_en = self.ranges.event(self.regs.filter_event());
        }
        ctx_after
    }

    /// Whether the TraceStop event fires: the IP matched its range while TriggerEn and
    /// ContextEn are set (§4.2.11).
    fn stop_fired(&self, ctx_after: bool) -> bool {
        self.trigger_en() && ctx_after && self.ranges.event(self.regs.stop_event())
    }

    /// The TraceStop action: TraceActive and FilterEn cleared, a TraceSTOP packet; the partial
    /// TNT stays in RTIT_TNT_BUFF (§4.2.11).
    fn trace_stop(&mut self) {
        self.regs.ctl &= !ctl::TRACE_ACTIVE;
        self.filter_en = false;
        self.out.emit(Packet::TraceStop);
    }

    /// An MTC if the watched TSC bits changed and MTCs are enabled in this mode (§4.2.12).
    fn mtc(&mut self, mode: bool) {
        let rng = self.regs.mtc_range();
        if let Some(tsc) = self.clock.mtc_change(rng) {
            if self.regs.has(ctl::MTC_EN) && mode {
                self.out.emit(Packet::Mtc(Mtc { rng, tsc }));
            }
        }
    }

    /// An STS if STS packets are enabled in the current mode (§4.2.13).
    fn sts(&mut self) {
        let mode = if self.regs.has(ctl::LESS_PKTS) {
            self.packet_en()
        } else {
            self.trigger_en()
        };
        if self.regs.has(ctl::STS_EN) && mode {
            let ratio = self.options.core_bus_ratio & 0x3f;
            self.out.emit(Packet::Sts(Sts {
                acbr: ratio,
                ecbr: ratio,
                btc: self.clock.tsc & ((1 << 40) - 1),
            }));
        }
    }
}

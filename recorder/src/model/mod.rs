//! The RTIT unit model: the bytes the RTIT unit of a Silvermont/Airmont core writes for what
//! the CPU retired, under the configuration in its MSRs (chapters 2–4 of the RTIT reference).
//!
//! It is programmed the way the hardware is, through [`UnitModel::wrmsr`] and
//! [`UnitModel::rdmsr`] with the #GP rules of chapter 3, and fed [`Input`]s: retired
//! instructions and the events between them. The software backends (step, qemu) drive it to
//! produce a trace, tests use it to make traces with known truth, and the msr backend is
//! checked against it.
//!
//! Files: `regs` (configuration registers and write rules), `enables` (ContextEn, FilterEn,
//! range detection), `output` (packet-level rules and the registers they update), `clock`
//! (synthetic time), `exec` (what each operation produces: table 19).
//!
//! What it does not model: SMM/VMX beyond "ContextEn is 0 in the host"; the output address of
//! TraceSTOP when RTIT_CTL.Dest is 0 (a property of the output port, not of the bytes); errata
//! other than E6. The hardware's late clearing of LAST_LIP after a PSB (§3.3.9) and E6 are
//! options, off by default.

mod clock;
mod edge;
mod enables;
mod error;
mod exec;
mod input;
mod output;
mod regs;
mod straight;

pub use edge::Edge;
pub use error::ModelError;
pub use input::{Input, Retired};
pub use regs::{check_write, ConfigRegs};

use rtit_replay_core::ip::LIP_MASK;
use rtit_replay_core::regs::{ctl, msr, reset, status, EventId};

use clock::Clock;
use enables::{context_en, Ranges};
use output::Output;

/// The CPU state the model tracks between inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuState {
    /// The next instruction to execute.
    pub ip: u64,
    /// Current privilege level.
    pub cpl: u8,
    /// CR3.
    pub cr3: u64,
    /// CR0.PG, reported by PIP.
    pub paging: bool,
}

impl CpuState {
    /// A user-mode (CPL 3), paging CPU about to execute `ip` with `cr3`.
    pub const fn user(ip: u64, cr3: u64) -> Self {
        Self {
            ip,
            cpl: 3,
            cr3,
            paging: true,
        }
    }
}

/// Knobs of the model that are not RTIT registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelOptions {
    /// Core cycles per instruction or event, for the synthetic clock.
    pub cycles_per_op: u32,
    /// The hardware TSC when the model starts.
    pub tsc: u64,
    /// Actual and effective core/bus ratio reported by STS.
    pub core_bus_ratio: u8,
    /// Emulate errata E6: non-zero cycle counts are sent one short.
    pub cyc_one_short: bool,
    /// How many packets after a PSB still compress against the LAST_LIP and
    /// LAST_CALL_NLIP from before it: the hardware clears them up to 4 packets late (§3.3.9).
    pub psb_clear_delay: u8,
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            cycles_per_op: 1,
            tsc: 0,
            core_bus_ratio: 20,
            cyc_one_short: false,
            psb_clear_delay: 0,
        }
    }
}

/// The RTIT configuration a backend programs: the registers with meaning for a recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtitConfig {
    /// RTIT_CTL, with Trace_En and TraceActive set to trace.
    pub ctl: u64,
    /// RTIT_CR3_MATCH.
    pub cr3_match: u64,
    /// RTIT_EVENTS.
    pub events: u64,
    /// RTIT_LIP0–3.
    pub lip: [u64; 4],
    /// RTIT_PKT_CNT (Pkt_Mask in bits 17:16).
    pub pkt_cnt: u64,
}

impl RtitConfig {
    /// The design card's configuration for tracing one process: user mode only, CR3 filter,
    /// RET compression, no IP filter, a PSB about every 8 KiB.
    pub const fn user_process(cr3: u64) -> Self {
        Self {
            ctl: ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::USER | ctl::CR3_EN | ctl::CMPRS_RET | ctl::DEST,
            cr3_match: cr3 & (((1 << 36) - 1) & !0x1f),
            events: rtit_replay_core::regs::events(EventId::AlwaysOn, EventId::AlwaysOff),
            lip: [0; 4],
            pkt_cnt: reset::PKT_CNT,
        }
    }
}

/// The RTIT unit model.
#[derive(Debug, Clone)]
pub struct UnitModel {
    regs: ConfigRegs,
    cpu: CpuState,
    /// In SMM or VMX root operation: ContextEn is 0.
    in_host: bool,
    ctl_read: bool,
    filter_en: bool,
    ranges: Ranges,
    /// A buffer overflow in progress: how many more instructions lose their packets before
    /// one can clear it.
    overflow: Option<u64>,
    /// A TraceStop detected during an overflow, to act on once it clears (§4.2.5).
    pending_stop: bool,
    out: Output,
    clock: Clock,
    options: ModelOptions,
    /// Instructions retired with PacketEn set outside a buffer overflow: those a decoder
    /// reconstructs from the trace (a recording's instruction count).
    traced: u64,
    /// Whether runs retire at once, as last found (`straight`); forgotten by anything that
    /// may change it (an operation one at a time, an MSR write).
    exact: straight::Exact,
}

impl UnitModel {
    /// A unit with its registers at reset values (tracing off) on a CPU in state `cpu`.
    pub fn new(cpu: CpuState, options: ModelOptions) -> Self {
        Self {
            regs: ConfigRegs::default(),
            cpu,
            in_host: false,
            ctl_read: false,
            filter_en: false,
            ranges: Ranges::default(),
            overflow: None,
            pending_stop: false,
            out: Output::new(options.cyc_one_short, options.psb_clear_delay.min(4)),
            clock: Clock::new(options.tsc, options.cycles_per_op),
            options,
            traced: 0,
            exact: straight::Exact::default(),
        }
    }

    /// Programs and enables tracing the way a driver does (chapter 3, appendix A): read
    /// RTIT_CTL, clear RTIT_STATUS, reset the TNT buffer, write the filters and the PSB period,
    /// then set Trace_En and, in a second write, TraceActive (§3.3.2).
    pub fn program(&mut self, config: &RtitConfig) -> Result<(), ModelError> {
        let old = self.rdmsr(msr::CTL)?;
        if old & (ctl::TRACE_EN | ctl::TRACE_ACTIVE) != 0 {
            self.wrmsr(msr::CTL, old & !ctl::TRACE_ACTIVE)?;
            self.wrmsr(msr::CTL, old & !(ctl::TRACE_ACTIVE | ctl::TRACE_EN))?;
        }
        self.wrmsr(msr::STATUS, 0)?;
        self.wrmsr(msr::TNT_BUFF, 1)?;
        self.wrmsr(msr::CR3_MATCH, config.cr3_match)?;
        self.wrmsr(msr::EVENTS, config.events)?;
        for (n, &lip) in config.lip.iter().enumerate() {
            self.wrmsr(msr::LIP0 + n as u32, lip)?;
        }
        self.wrmsr(msr::PKT_CNT, config.pkt_cnt)?;
        let without_enables = config.ctl & !(ctl::TRACE_EN | ctl::TRACE_ACTIVE);
        self.wrmsr(msr::CTL, without_enables | (config.ctl & ctl::TRACE_EN))?;
        self.wrmsr(msr::CTL, config.ctl)
    }

    /// The bytes the unit has written.
    pub fn output(&self) -> &[u8] {
        self.out.bytes()
    }

    /// Takes the bytes written so far (the unit keeps its state).
    pub fn take_output(&mut self) -> Vec<u8> {
        self.out.take_bytes()
    }

    /// How many bytes [`Self::take_output`] would take now.
    pub fn output_len(&self) -> usize {
        self.out.bytes().len()
    }

    /// RTIT_LAST_LIP and RTIT_LAST_CALL_NLIP, if a decoder could start exactly here with
    /// them: the unit traces on the fast path's terms ([`Self::takes_runs`]) and its output
    /// holds nothing back ([`output::Output::settled`]).
    pub fn sync_registers(&self) -> Option<(u64, Option<u64>)> {
        self.takes_runs().then(|| self.out.settled()).flatten()
    }

    /// Instructions retired with PacketEn set and their packets not lost to an overflow:
    /// exactly the instructions the trace holds.
    pub fn traced(&self) -> u64 {
        self.traced
    }

    /// The CPU state the model tracks.
    pub fn cpu(&self) -> CpuState {
        self.cpu
    }

    /// The options the model was made with.
    pub fn options(&self) -> ModelOptions {
        self.options
    }

    /// TriggerEn (§2.1.1).
    pub fn trigger_en(&self) -> bool {
        self.regs.trigger_en()
    }

    /// ContextEn for the current CPU state (§2.1.2).
    pub fn context_en(&self) -> bool {
        context_en(&self.regs, self.cpu.cpl, self.cpu.cr3, self.in_host)
    }

    /// PacketEn = TriggerEn && ContextEn && FilterEn (§2.1).
    pub fn packet_en(&self) -> bool {
        self.trigger_en() && self.context_en() && self.filter_en
    }

    /// Reads an RTIT MSR.
    pub fn rdmsr(&mut self, addr: u32) -> Result<u64, ModelError> {
        if addr == msr::CTL {
            self.ctl_read = true;
            return Ok(self.regs.ctl);
        }
        if msr::name(addr).is_none() {
            return Err(ModelError::UnknownMsr(addr));
        }
        if !self.ctl_read {
            return Err(ModelError::CtlNotRead { msr: addr });
        }
        let out = &self.out;
        Ok(match addr {
            msr::STATUS => {
                u64::from(self.filter_en)
                    | u64::from(self.context_en()) << 1
                    | u64::from(self.trigger_en()) << 2
                    | u64::from(self.overflow.is_some()) << 3
            }
            msr::CNTP => out.cntp.into(),
            msr::EVENTS => self.regs.events,
            msr::LIP0..=msr::LIP3 => self.regs.lip[(addr - msr::LIP0) as usize],
            msr::LAST_LIP => match out.last_lip.get() {
                // Table 9: LIP[31:16] in bits 15:0, LIP[47:32] in bits 31:16, valid in bit 32.
                Some(lip) => ((lip >> 16) & 0xffff_ffff) | 1 << 32,
                None => 0,
            },
            msr::LAST_CALL_NLIP => out.last_call_nlip.map_or(0, |n| (n & LIP_MASK) | 1 << 48),
            msr::BASE_ADDR => self.regs.base_addr,
            msr::LIMIT_MASK => self.regs.limit_mask,
            msr::OFFSET => out.offset,
            msr::CR3_MATCH => self.regs.cr3_match,
            msr::PKT_CNT => out.pkt_cnt,
            msr::TNT_BUFF => out.tnt_buff.into(),
            _ => return Err(ModelError::UnknownMsr(addr)),
        })
    }

    /// Writes an RTIT MSR, with the side effects the hardware has: a PSB when TriggerEn goes
    /// 0 → 1, FUP.PGE/FUP.PGD when PacketEn changes (§3.3.2), a PSB when Pkt_Cnt is written
    /// past its monitored bit (§3.3.9).
    pub fn wrmsr(&mut self, addr: u32, value: u64) -> Result<(), ModelError> {
        self.exact.forget();
        if msr::name(addr).is_none() {
            return Err(ModelError::UnknownMsr(addr));
        }
        if !self.ctl_read {
            return Err(ModelError::CtlNotRead { msr: addr });
        }
        let value = check_write(addr, value, self.regs.ctl)?;
        let trigger_before = self.trigger_en();
        let pe_before = self.packet_en();
        match addr {
            msr::CTL => {
                self.regs.ctl = value;
                self.out.cycle_accurate = value & ctl::CYCLE_ACC != 0;
            }
            msr::STATUS => {
                self.filter_en = value & status::FILTER_EN != 0;
                let overflow = value & status::BUFFER_OVERFLOW != 0;
                // Setting the bit acts as a full buffer; clearing it sends no FUP (§4.2.5).
                self.overflow = if overflow {
                    Some(self.overflow.unwrap_or(0))
                } else {
                    None
                };
            }
            msr::CNTP => self.out.cntp = value as u32,
            msr::EVENTS => self.regs.events = value,
            msr::LIP0..=msr::LIP3 => self.regs.lip[(addr - msr::LIP0) as usize] = value,
            msr::LAST_LIP => {
                if value & 1 << 32 != 0 {
                    self.out.last_lip.set((value & 0xffff_ffff) << 16);
                } else {
                    self.out.last_lip.invalidate();
                }
            }
            msr::LAST_CALL_NLIP => {
                self.out.last_call_nlip = (value & 1 << 48 != 0).then_some(value & LIP_MASK);
            }
            msr::BASE_ADDR => self.regs.base_addr = value,
            msr::LIMIT_MASK => {
                self.regs.limit_mask = value;
                self.out.limit_mask = value;
            }
            msr::OFFSET => self.out.offset = value,
            msr::CR3_MATCH => self.regs.cr3_match = value,
            msr::PKT_CNT => self.out.pkt_cnt = value,
            msr::TNT_BUFF => self.out.tnt_buff = value as u8,
            _ => return Err(ModelError::UnknownMsr(addr)),
        }
        if !trigger_before && self.trigger_en() {
            // TriggerEn 0 → 1 (§4.2.1): a PSB; MTC restarts from the current TSC.
            self.out.psb();
            self.clock.reset_mtc(self.regs.mtc_range());
        } else if addr == msr::PKT_CNT && self.trigger_en() {
            self.out.count_written();
        }
        if addr != msr::STATUS {
            self.refresh_filter();
        }
        self.enable_transition(pe_before, self.cpu.ip);
        Ok(())
    }

    /// Re-evaluates FilterEn from the range state for a configuration change, unless frozen.
    fn refresh_filter(&mut self) {
        if self.regs.has(ctl::TRACE_EN) && self.context_en() {
            self.filter_en = self.ranges.event(self.regs.filter_event());
        }
    }

    /// The FUP.PGE or FUP.PGD for a PacketEn change at a boundary where `ip` executes next
    /// (NLIP). No FUP.PGD when TriggerEn went to 0: the unit "may not" send one (§4.2.8), and
    /// the model does not, leaving the partial TNT in RTIT_TNT_BUFF.
    fn enable_transition(&mut self, pe_before: bool, ip: u64) {
        let pe_after = self.packet_en();
        if self.overflow.is_some() {
            // Dropped with every other packet until the overflow clears (§4.2.5).
        } else if pe_before && !pe_after && self.trigger_en() {
            self.out.fup(rtit_replay_core::packet::FupEvent::PacketGenDisable, ip);
        } else if !pe_before && pe_after {
            self.out.fup(rtit_replay_core::packet::FupEvent::PacketGenEnable, ip);
        }
    }
}

#[cfg(test)]
mod tests;

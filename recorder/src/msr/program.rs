//! Programming the RTIT unit: the one checked MSR write, the enable sequence of chapter 3 and
//! appendix B, pausing for a drain, stopping, and putting every register back.

use rtit_replay_core::regs::{ctl, msr};

use super::device::{MsrError, Msrs, OutputRegion};
use crate::model::{check_write, ModelError, RtitConfig};

/// The largest output region RTIT_LIMIT_MASK describes: bits 21:0, 4 MiB (§3.3.11).
pub const MAX_REGION: usize = 4 << 20;
/// The smallest: bits 5:0 of RTIT_LIMIT_MASK are reserved as 1, so a region is at least 64
/// bytes; rtit asks for a few lines more.
pub const MIN_REGION: usize = 128;

/// The registers rtit saves when it takes the unit and restores when it lets go, in the order
/// they are written back (RTIT_CTL last, §3.3.2).
const SAVED: [u32; 15] = [
    msr::STATUS,
    msr::TNT_BUFF,
    msr::CNTP,
    msr::LAST_LIP,
    msr::LAST_CALL_NLIP,
    msr::BASE_ADDR,
    msr::LIMIT_MASK,
    msr::OFFSET,
    msr::PKT_CNT,
    msr::CR3_MATCH,
    msr::EVENTS,
    msr::LIP0,
    msr::LIP1,
    msr::LIP2,
    msr::LIP3,
];

/// Why the unit cannot be used or programmed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    /// An MSR access failed.
    #[error(transparent)]
    Msr(#[from] MsrError),
    /// Someone else is tracing on this logical processor.
    #[error("RTIT is already in use on this CPU (RTIT_CTL = {0:#x}, Trace_En set); stop the other tracer first")]
    InUse(u64),
    /// The output region cannot be described by RTIT_BASE_ADDR/RTIT_LIMIT_MASK.
    #[error("output region of {size} bytes at physical {base:#x}: {problem}")]
    Region {
        /// Its physical address.
        base: u64,
        /// Its size.
        size: usize,
        /// What is wrong.
        problem: &'static str,
    },
}

/// The RTIT unit of one logical processor, taken by rtit: it remembers what it found and puts
/// it back in [`Unit::release`] or, failing that, when dropped (also on panic unwinding).
pub struct Unit<M: Msrs> {
    msrs: M,
    /// RTIT_CTL as rtit last wrote it (or found it).
    ctl: u64,
    /// The registers as found, to restore; `None` once restored.
    saved: Option<(u64, Vec<(u32, u64)>)>,
}

impl<M: Msrs> Unit<M> {
    /// Takes the unit: reads RTIT_CTL first, as any other access before it raises #GP
    /// (§3.3.1), refuses a unit that is tracing already, and saves every RTIT register.
    pub fn open(mut msrs: M) -> Result<Self, ProgramError> {
        let found = msrs.read(msr::CTL)?;
        if found & ctl::TRACE_EN != 0 {
            return Err(ProgramError::InUse(found));
        }
        let mut saved = Vec::with_capacity(SAVED.len());
        for addr in SAVED {
            saved.push((addr, msrs.read(addr)?));
        }
        Ok(Self {
            msrs,
            ctl: found,
            saved: Some((found, saved)),
        })
    }

    /// The one function through which rtit writes an RTIT MSR: the write is checked against
    /// the rules of chapter 3 (reserved bits, RTIT_TNT_BUFF never 0 (§3.3.13), never both
    /// enables in one RTIT_CTL write (§3.3.2)) before it reaches the device.
    pub fn write(&mut self, addr: u32, value: u64) -> Result<(), ProgramError> {
        check_write(addr, value, self.ctl).map_err(MsrError::Refused)?;
        self.msrs.write(addr, value)?;
        if addr == msr::CTL {
            self.ctl = value;
        }
        Ok(())
    }

    /// Reads an RTIT MSR.
    pub fn read(&mut self, addr: u32) -> Result<u64, ProgramError> {
        Ok(self.msrs.read(addr)?)
    }

    /// RTIT_CTL as last written.
    pub fn ctl(&self) -> u64 {
        self.ctl
    }

    /// Programs `config` with output to `region` from offset 0, and enables tracing: the
    /// sequence of chapter 3 and appendix B §4.2: status cleared, the TNT buffer at its reset
    /// value 1, the compression state and cycle counter reset, the output region, the PSB
    /// period, the filters; then Trace_En, and TraceActive in a second write (§3.3.2).
    pub fn start(&mut self, config: &RtitConfig, region: &dyn OutputRegion) -> Result<(), ProgramError> {
        let (base, size) = (region.physical_base(), region.size());
        let bad = |problem| ProgramError::Region { base, size, problem };
        if !size.is_power_of_two() || !(MIN_REGION..=MAX_REGION).contains(&size) {
            return Err(bad("the size must be a power of two from 128 bytes to 4 MiB (§3.3.11)"));
        }
        if base % size as u64 != 0 {
            return Err(bad("the base must be aligned to the size (§3.3.10)"));
        }
        self.disable()?;
        self.write(msr::STATUS, 0)?;
        self.write(msr::TNT_BUFF, 1)?;
        self.write(msr::LAST_LIP, 0)?;
        self.write(msr::LAST_CALL_NLIP, 0)?;
        self.write(msr::CNTP, 0)?;
        self.write(msr::BASE_ADDR, base)?;
        self.write(msr::LIMIT_MASK, size as u64 - 1)?;
        self.write(msr::OFFSET, 0)?;
        self.write(msr::PKT_CNT, config.pkt_cnt & !0x3fff)?;
        self.write(msr::CR3_MATCH, config.cr3_match)?;
        self.write(msr::EVENTS, config.events)?;
        for (n, &lip) in config.lip.iter().enumerate() {
            self.write(msr::LIP0 + n as u32, lip)?;
        }
        let off = config.ctl & !(ctl::TRACE_EN | ctl::TRACE_ACTIVE);
        self.write(msr::CTL, off | ctl::TRACE_EN)?;
        self.write(msr::CTL, off | ctl::TRACE_EN | ctl::TRACE_ACTIVE)
    }

    /// Pauses tracing for a drain: clears TraceActive (a write to RTIT_CTL drains the unit's
    /// buffer, §2.3.2), then reads RTIT_OFFSET, which is settled only after a drain (§3.3.12).
    pub fn pause(&mut self) -> Result<u64, ProgramError> {
        self.write(msr::CTL, self.ctl & !ctl::TRACE_ACTIVE)?;
        self.read(msr::OFFSET)
    }

    /// Resumes after [`Unit::pause`], the output starting again at `offset` (appendix B
    /// §4.2.2: RTIT_OFFSET is initialised when the output is re-used).
    pub fn resume(&mut self, offset: u64) -> Result<(), ProgramError> {
        self.write(msr::OFFSET, offset)?;
        self.write(msr::CTL, self.ctl | ctl::TRACE_ACTIVE)
    }

    /// Stops tracing: TraceActive cleared, then Trace_En (§3.3.2); returns RTIT_OFFSET, read
    /// after those RTIT_CTL writes drained the unit (§3.3.12).
    pub fn stop(&mut self) -> Result<u64, ProgramError> {
        self.disable()?;
        self.read(msr::OFFSET)
    }

    /// Clears TraceActive, then Trace_En, where set.
    fn disable(&mut self) -> Result<(), ProgramError> {
        if self.ctl & ctl::TRACE_ACTIVE != 0 {
            self.write(msr::CTL, self.ctl & !ctl::TRACE_ACTIVE)?;
        }
        if self.ctl & ctl::TRACE_EN != 0 {
            self.write(msr::CTL, self.ctl & !ctl::TRACE_EN)?;
        }
        Ok(())
    }

    /// Stops tracing and writes back every register as rtit found it (RTIT_CTL last). Every
    /// write is attempted even if one fails; the first failure is returned.
    pub fn release(&mut self) -> Result<(), ProgramError> {
        let Some((ctl_found, saved)) = self.saved.take() else {
            return Ok(());
        };
        let mut first = self.disable().err();
        for (addr, value) in saved {
            let value = match addr {
                // Its read-only bits (ContextEn, TriggerEn) are ignored on write; a pending
                // overflow is not put back.
                msr::STATUS => value & rtit_replay_core::regs::status::FILTER_EN,
                msr::TNT_BUFF if value == 0 => 1,
                _ => value,
            };
            if let Err(e) = self.write(addr, value) {
                first.get_or_insert(e);
            }
        }
        if let Err(e) = self.write(msr::CTL, ctl_found) {
            first.get_or_insert(e);
        }
        first.map_or(Ok(()), Err)
    }
}

impl<M: Msrs> Drop for Unit<M> {
    /// Tracing is never left on: an early return or a panic still restores the unit.
    fn drop(&mut self) {
        let _ = self.release();
    }
}

impl From<ModelError> for ProgramError {
    fn from(e: ModelError) -> Self {
        Self::Msr(MsrError::Refused(e))
    }
}

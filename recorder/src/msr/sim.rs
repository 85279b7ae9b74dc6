//! A simulated RTIT device for testing the msr backend without the hardware: the unit model
//! behind the MSR interface (with its #GP rules), writing into simulated physical memory with
//! the base/mask/offset arithmetic of §2.3, and a target whose instructions are a recorded
//! stream fed to that model.
//!
//! Like the hardware (§2.3.2, §3.3.12), the unit holds packet bytes internally and writes them
//! to memory in 64-byte lines; a write to RTIT_CTL drains everything. RTIT_OFFSET reads where
//! the memory writes have got to, so code that reads it without a drain first sees a value
//! that is behind.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use rtit_replay_core::cofi::{Cofi, FarKind};
use rtit_replay_core::recording::EndState;
use rtit_replay_core::regs::msr;

use super::device::{MsrError, Msrs, OutputRegion};
use super::session::{Ran, Target};
use crate::model::{CpuState, Input, ModelOptions, Retired, UnitModel};
use crate::script::KERNEL;

/// The CR3 of the simulated kernel and of the other processes the CPU runs.
pub const OTHER_CR3: u64 = 0x0abc_d000;
/// Where another process's user code runs.
pub const OTHER_IP: u64 = 0x50_0000;

/// One MSR access the device saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// RDMSR of this MSR.
    Read(u32),
    /// WRMSR of this value.
    Write(u32, u64),
}

/// The simulated machine: one logical processor with its RTIT unit, and physical memory.
#[derive(Debug)]
pub struct SimMachine {
    /// The unit.
    pub model: UnitModel,
    /// Physical memory starting at `memory_base`.
    pub memory: Vec<u8>,
    /// Its physical address.
    pub memory_base: u64,
    /// Bytes the unit produced and has not written to memory yet.
    internal: Vec<u8>,
    /// The offset the memory writes have reached: what RTIT_OFFSET reads.
    written: u64,
    /// Every access, in order.
    pub log: Vec<Access>,
    /// Writes the unit made outside the simulated memory (a wrong RTIT_BASE_ADDR).
    pub stray_writes: u64,
    /// Make the n-th WRMSR fail (counting from 0), as a device error.
    pub fail_write: Option<usize>,
    writes: usize,
}

/// A shared handle on the machine: the MSR device, the output region and the target all are.
pub type Shared = Rc<RefCell<SimMachine>>;

impl SimMachine {
    /// A machine running the simulated kernel, with `size` bytes of memory at `base` for the
    /// output region.
    pub fn new(base: u64, size: usize) -> Shared {
        let cpu = CpuState {
            ip: KERNEL,
            cpl: 0,
            cr3: OTHER_CR3,
            paging: true,
        };
        Rc::new(RefCell::new(Self {
            model: UnitModel::new(cpu, ModelOptions::default()),
            memory: vec![0; size],
            memory_base: base,
            internal: Vec::new(),
            written: 0,
            log: Vec::new(),
            stray_writes: 0,
            fail_write: None,
            writes: 0,
        }))
    }

    /// Feeds one input to the unit and moves its output on.
    pub fn apply(&mut self, input: &Input) {
        self.model.apply(input);
        self.collect(false);
    }

    /// Takes the unit's new bytes into its internal buffer and writes out whole lines (or
    /// everything, on a drain).
    fn collect(&mut self, drain: bool) {
        self.internal.extend(self.model.take_output());
        let mask = self.limit_mask();
        let line_end = |offset: u64| 64 - (offset & 63) as usize;
        while !self.internal.is_empty() {
            let n = line_end(self.written).min(self.internal.len());
            if !drain && n < line_end(self.written) {
                break;
            }
            let bytes: Vec<u8> = self.internal.drain(..n).collect();
            for b in bytes {
                self.store(b);
                self.written = (self.written + 1) & mask;
            }
        }
    }

    fn limit_mask(&mut self) -> u64 {
        self.model.rdmsr(msr::LIMIT_MASK).unwrap_or(0x7f)
    }

    /// Writes one byte where the unit sends it: RTIT_BASE_ADDR & ~mask, plus the offset (§2.3).
    fn store(&mut self, byte: u8) {
        let mask = self.limit_mask();
        let base = self.model.rdmsr(msr::BASE_ADDR).unwrap_or(0) & !mask;
        let at = (base + (self.written & mask)).wrapping_sub(self.memory_base);
        match self.memory.get_mut(at as usize) {
            Some(slot) => *slot = byte,
            None => self.stray_writes += 1,
        }
    }
}

/// The MSR side of the machine.
#[derive(Clone)]
pub struct SimMsrs(pub Shared);

impl Msrs for SimMsrs {
    fn read(&mut self, addr: u32) -> Result<u64, MsrError> {
        let mut m = self.0.borrow_mut();
        m.log.push(Access::Read(addr));
        let value = m.model.rdmsr(addr).map_err(MsrError::Simulated)?;
        // RTIT_OFFSET tells where the memory writes are, which lags until a drain.
        Ok(if addr == msr::OFFSET { m.written } else { value })
    }

    fn write(&mut self, addr: u32, value: u64) -> Result<(), MsrError> {
        let mut m = self.0.borrow_mut();
        m.log.push(Access::Write(addr, value));
        let n = m.writes;
        m.writes += 1;
        if m.fail_write == Some(n) {
            return Err(MsrError::Device {
                op: "wrmsr",
                addr,
                cpu: 0,
                message: "simulated device failure".to_string(),
            });
        }
        if addr == msr::OFFSET {
            // Bytes not yet written go to the old place first.
            m.collect(true);
        }
        m.model.wrmsr(addr, value).map_err(MsrError::Simulated)?;
        if addr == msr::OFFSET {
            m.written = value;
        }
        // A write to RTIT_CTL drains the unit (§2.3.2).
        m.collect(addr == msr::CTL);
        Ok(())
    }
}

/// The memory side: a region of the simulated physical memory.
pub struct SimRegion {
    /// The machine.
    pub machine: Shared,
    /// Offset of the region in the machine's memory.
    pub at: usize,
    /// Its size.
    pub size: usize,
}

impl OutputRegion for SimRegion {
    fn physical_base(&self) -> u64 {
        self.machine.borrow().memory_base + self.at as u64
    }

    fn size(&self) -> usize {
        self.size
    }

    fn read(&self, offset: usize, out: &mut [u8]) {
        let m = self.machine.borrow();
        out.copy_from_slice(&m.memory[self.at + offset..self.at + offset + out.len()]);
    }

    fn fill(&mut self, offset: usize, len: usize, byte: u8) {
        let mut m = self.machine.borrow_mut();
        m.memory[self.at + offset..self.at + offset + len].fill(byte);
    }
}

/// A target whose execution is a recorded input stream (from [`crate::script`]), scheduled
/// on the simulated CPU among another process and the kernel: each `run` switches to it
/// (MOV CR3, IRET to user mode), feeds about `chunk` inputs, and preempts it at a user-mode
/// boundary (an interrupt, then another process runs a little).
pub struct SimTarget {
    machine: Shared,
    inputs: Vec<Input>,
    next: usize,
    /// The target's CR3.
    pub cr3: u64,
    /// Where the target continues when next scheduled.
    ip: u64,
    /// Inputs per time slice.
    pub chunk: usize,
    /// Whether `kill` was called.
    pub killed: bool,
    /// How it ends once its inputs run out.
    pub end: EndState,
    /// Every this many time slices (0: never) the slice ends in a stop for the sideband, as
    /// at the exit of an `mmap` under ptrace.
    pub sideband_every: usize,
    /// User-mode instructions it has executed before each sideband stop.
    pub sideband_stops: Vec<u64>,
    slices: usize,
    retired: u64,
}

impl SimTarget {
    /// The target that runs `inputs` from `start` with `cr3`.
    pub fn new(machine: Shared, inputs: Vec<Input>, start: u64, cr3: u64) -> Self {
        Self {
            machine,
            inputs,
            next: 0,
            cr3,
            ip: start,
            chunk: 500,
            killed: false,
            end: EndState::Exited { code: 0 },
            sideband_every: 0,
            sideband_stops: Vec::new(),
            slices: 0,
            retired: 0,
        }
    }

    fn schedule_in(&mut self) {
        let mut m = self.machine.borrow_mut();
        m.apply(&Input::Cr3Change { cr3: self.cr3 });
        let iret = Retired::new(KERNEL + 0x40, 2, Cofi::Far(FarKind::Iret), self.ip).to_cpl(3);
        m.apply(&Input::Retire(iret));
    }

    /// An interrupt, and another process runs for a few instructions.
    fn schedule_out(&mut self) {
        let mut m = self.machine.borrow_mut();
        self.ip = m.model.cpu().ip;
        m.apply(&Input::Interrupt {
            handler: KERNEL,
            cpl: 0,
        });
        m.apply(&Input::Cr3Change { cr3: OTHER_CR3 });
        let iret = Retired::new(KERNEL + 0x40, 2, Cofi::Far(FarKind::Iret), OTHER_IP).to_cpl(3);
        m.apply(&Input::Retire(iret));
        for k in 0..4 {
            m.apply(&Input::Retire(Retired::plain(OTHER_IP + k, 1)));
        }
        m.apply(&Input::Interrupt {
            handler: KERNEL,
            cpl: 0,
        });
    }

    fn feed(&mut self, at_least: usize) -> bool {
        let mut fed = 0;
        while self.next < self.inputs.len() {
            let input = self.inputs[self.next];
            self.next += 1;
            let mut m = self.machine.borrow_mut();
            if matches!(input, Input::Retire(_)) && m.model.cpu().cpl == 3 {
                self.retired += 1;
            }
            m.apply(&input);
            drop(m);
            fed += 1;
            let user = self.machine.borrow().model.cpu().cpl == 3;
            if fed >= at_least && user {
                return true;
            }
        }
        false
    }
}

/// Never fails: the simulation has nothing to go wrong.
#[derive(Debug, thiserror::Error)]
#[error("simulated target")]
pub struct SimTargetError;

impl Target for SimTarget {
    type Error = SimTargetError;

    fn next_ip(&mut self) -> Result<u64, SimTargetError> {
        Ok(self.ip)
    }

    fn step(&mut self) -> Result<(), SimTargetError> {
        self.schedule_in();
        self.feed(1);
        // The single-step trap.
        let mut m = self.machine.borrow_mut();
        self.ip = m.model.cpu().ip;
        m.apply(&Input::Interrupt {
            handler: KERNEL,
            cpl: 0,
        });
        Ok(())
    }

    fn run(&mut self, _slice: Duration) -> Result<Ran, SimTargetError> {
        self.schedule_in();
        if !self.feed(self.chunk) {
            return Ok(Ran::Ended(self.end.clone()));
        }
        self.schedule_out();
        self.slices += 1;
        if self.sideband_every > 0 && self.slices % self.sideband_every == 0 {
            self.sideband_stops.push(self.retired);
            return Ok(Ran::Sideband);
        }
        Ok(Ran::Slice)
    }

    fn kill(&mut self) {
        self.killed = true;
    }
}

//! The state layer (docs/design.md, docs/values.md): registers and memory at a position of the history,
//! each known or unknown. A value shown must be right; unknown is acceptable, wrong is not.
//!
//! Two passes meet at every position, as in REPT (OSDI 2018): the *forward* state starts from
//! the recording's start snapshot (registers and writable memory when tracing started) and
//! applies each instruction's semantics; the *backward* state starts from the end snapshot
//! and undoes them. A value is known at a position if either pass knows it; if both know it
//! and disagree, it is unknown (and counted, since it means a model is wrong).
//!
//! What keeps values right: an instruction nobody modelled makes exactly what iced-x86's
//! `InstructionInfoFactory` says it writes unknown; a store to an unknown address makes all
//! writable memory unknown (it may have hit any byte); a system call makes the registers the
//! kernel writes and the memory it may write unknown unless the recording logged them
//! ([`crate::syscall`]); an interrupt, a gap, an error or untraced code between two positions
//! makes everything unknown; map changes make their ranges unknown.
//!
//! Files: `reg` (registers), `flags` (RFLAGS bits, conditions), `memory/` (known bytes, copied
//! on write by 256-byte segments), `ops` (operands), `vector/` (zmm0–31 and the opmasks: SSE, AVX2 and
//! AVX-512), `xsave` (the XSAVE family), `mxcsr`, `float` and `rounded` (scalar floating
//! point), `alu` (the integer arithmetic with its flags), `integer` and `partial` (integer
//! instructions, partly known registers), `writes`
//! (what iced-x86 says an instruction writes), `forward` and `backward` (semantics),
//! `transition` (one position to the next: instructions, system calls, events), `compiled/`
//! (the most common instructions translated once for the forward walk), `walker`
//! (a walk over the history with what the recording says lies between), `nearby` (a walk's
//! place in a sorted list of positions), `chains` (the
//! checkpoints, made in the background), `anchored/` (values from the whole states a recording
//! holds along the history, and their background fill), `inputs` (what the engine is built
//! from), `engine/` (queries, and a stop's wait for final values), `known` (reading both passes at one position), `why` (the
//! cause of each unknown), `sigreturn` (the context a signal return restores).

mod alu;
mod anchored;
mod backward;
mod chains;
mod compiled;
mod engine;
pub mod flags;
mod float;
mod forward;
mod inputs;
mod integer;
mod known;
pub mod maps;
pub mod memory;
mod mxcsr;
mod nearby;
mod ops;
mod partial;
pub mod readonly;
pub mod reg;
mod rounded;
mod sigreturn;
mod transition;
pub mod vector;
mod walker;
pub mod watch;
pub mod why;
mod writes;
mod xsave;

pub(crate) use anchored::LOOKBACK;
pub use chains::ValuesProgress;
pub use engine::{interval, Values, ValuesStats, INTERVAL, WAIT_BELOW};
pub use inputs::Inputs;
pub use known::{Conflict, Known, KnownPrefix};
pub use reg::Reg;
pub use transition::set_named;
pub(crate) use walker::rseq_areas;
pub use why::{Cause, Why};

use flags::Flags;
use memory::Memory;
use reg::RegFile;

/// Registers, flags and memory at one position, each known or not.
#[derive(Debug, Clone, Default)]
pub struct State {
    /// Registers.
    pub regs: RegFile,
    /// RFLAGS.
    pub flags: Flags,
    /// Writable memory.
    pub mem: Memory,
    /// The vector registers.
    pub vec: vector::VecFile,
    /// MXCSR, bit by bit: scalar arithmetic whose result depends on its control bits is
    /// computed only when they are known.
    pub mxcsr: mxcsr::Mxcsr,
    /// What the recording says of the CPU the program ran on (constants of the run).
    pub cpu: Cpu,
}

/// The CPU behaviours the semantics depend on, as the recording gives them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cpu {
    /// A bound of XCR0: what the XSAVE family may write.
    pub xcr0: Option<u64>,
    /// Whether `syscall` leaves rcx, r11 and RFLAGS as they were (QEMU user mode).
    pub syscall_keeps_registers: bool,
    /// Whether `lzcnt` is LZCNT (else it runs as `bsr`); unknown: neither is computed.
    pub lzcnt: Option<bool>,
    /// Whether `tzcnt` is TZCNT (BMI1; else it runs as `bsf`).
    pub bmi1: Option<bool>,
    /// Whether `and`, `or`, `xor` and `test` clear AF (the SDM leaves it undefined).
    pub logic_clears_af: Option<bool>,
    /// Whether XSAVE marks every requested component in use in XSTATE_BV (QEMU, which does
    /// not track XINUSE); a real CPU's XINUSE is its own.
    pub xsave_all_in_use: bool,
    /// Where XSAVE's standard format puts each component on the recording's CPU; unknown:
    /// only the AVX component's place (576, the same on every processor) is known.
    pub xsave: Option<crate::recording::xsave_layout::XsaveLayout>,
}

impl Cpu {
    fn or(self, other: Cpu) -> Cpu {
        Cpu {
            xcr0: self.xcr0.or(other.xcr0),
            syscall_keeps_registers: self.syscall_keeps_registers | other.syscall_keeps_registers,
            lzcnt: self.lzcnt.or(other.lzcnt),
            bmi1: self.bmi1.or(other.bmi1),
            logic_clears_af: self.logic_clears_af.or(other.logic_clears_af),
            xsave_all_in_use: self.xsave_all_in_use | other.xsave_all_in_use,
            xsave: self.xsave.or(other.xsave),
        }
    }
}

impl State {
    /// Nothing known.
    pub fn unknown() -> Self {
        Self::default()
    }

    /// Learns every value `other` knows and this does not (both must be right: they are
    /// states of the same position).
    pub fn absorb(&mut self, other: &State) {
        for r in Reg::all() {
            if self.regs.why(r).is_some() && other.regs.why(r).is_none() {
                self.regs.copy_from(&other.regs, r);
            }
        }
        let f = other.flags;
        self.flags.put(f.known & !self.flags.known, f.value);
        self.mem.absorb(&other.mem);
        self.vec.absorb(&other.vec);
        self.mxcsr.absorb(other.mxcsr);
        self.cpu = self.cpu.or(other.cpu);
    }

    /// Whether this knows every value `other` knows, with the same value: a forward walk that
    /// reaches an exact state knowing all of it, so that the backward walk from that state
    /// can teach nothing between ([`anchored`]).
    pub fn covers(&self, other: &State) -> bool {
        self.regs.covers(&other.regs)
            && self.flags.covers(&other.flags)
            && self.vec.covers(&other.vec)
            && self.mxcsr.covers(&other.mxcsr)
            && self.mem.covers(&other.mem)
    }

    /// Forgets everything (what untraced code or a lost stretch of trace leaves).
    pub fn forget_all(&mut self) {
        self.regs.forget_all();
        self.flags.forget(flags::ALL);
        self.mem.forget_all();
        self.vec.forget_all();
        self.mxcsr = mxcsr::Mxcsr::default();
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_float;
#[cfg(test)]
mod tests_semantics;
#[cfg(test)]
mod tests_walk;
#[cfg(test)]
mod tests_xsave;

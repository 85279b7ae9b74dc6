//! A scripted CPU for making traces with known truth: it walks a program's real instruction
//! bytes, chooses branch outcomes and indirect targets by plan (it does not emulate data),
//! plays the kernel's part (system calls, signal delivery and return, interrupts) and feeds
//! every retired instruction and event to the unit model. The truth it keeps is every
//! instruction that started with PacketEn set: exactly what the trace covers.
//!
//! Used by the golden tests of the flow decoder, the CLI tests and the benchmarks.

use std::collections::HashMap;

use crate::model::{Input, Retired, UnitModel};
use rtit_replay_core::cofi::{classify, Cofi, FarKind};
use rtit_replay_core::flow::decode_insn;
use rtit_replay_core::image::AddressSpace;

/// Where the pretend kernel's code is; it is never in an image, so it must never be traced.
pub const KERNEL: u64 = 0xffff_ffff_8100_0000;

/// How the machine runs a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// A backward conditional branch is taken this many times, then falls through once.
    pub loop_count: u32,
    /// Seed for forward conditional branches and indirect targets.
    pub seed: u64,
    /// Targets an indirect branch at a site may take.
    pub indirect: HashMap<u64, Vec<u64>>,
    /// The user signal handler (its last instruction is a SYSCALL: sigreturn).
    pub signal_handler: Option<u64>,
    /// An interrupt before every n-th instruction.
    pub interrupt_every: Option<u64>,
    /// The instruction at this address faults the first time; a signal handler runs.
    pub fault_at: Option<u64>,
    /// An internal buffer overflow starting before step `.0`, losing `.1` instructions.
    pub overflow: Option<(u64, u64)>,
    /// The exit system call: the program ends when it executes.
    pub exit: u64,
}

impl Plan {
    /// A plan for a program whose exit system call is at `exit`.
    pub fn new(exit: u64) -> Self {
        Self {
            loop_count: 7,
            seed: 0x2545_f491_4f6c_dd1d,
            indirect: HashMap::new(),
            signal_handler: None,
            interrupt_every: None,
            fault_at: None,
            overflow: None,
            exit,
        }
    }
}

/// What ran.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Truth {
    /// The traced instructions in order.
    pub ips: Vec<u64>,
    /// Instructions and events the machine went through.
    pub steps: u64,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// What the scripted machine drives: the unit model, or a recorder of its inputs.
pub trait Cpu {
    /// Feeds an input.
    fn apply(&mut self, input: &Input);
    /// Whether the unit would trace the next instruction (it is then part of the truth).
    fn packet_en(&self) -> bool;
}

impl Cpu for UnitModel {
    fn apply(&mut self, input: &Input) {
        UnitModel::apply(self, input);
    }

    fn packet_en(&self) -> bool {
        UnitModel::packet_en(self)
    }
}

/// A model whose inputs are kept: the run, as a stream another unit (the simulated device
/// of the msr backend's tests) can be fed.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The model the truth is judged by.
    pub model: UnitModel,
    /// Every input, in order.
    pub inputs: Vec<Input>,
}

impl Cpu for Recorded {
    fn apply(&mut self, input: &Input) {
        self.inputs.push(*input);
        self.model.apply(input);
    }

    fn packet_en(&self) -> bool {
        self.model.packet_en()
    }
}

/// The pretend kernel's return to user mode at `to`.
fn kernel_return(model: &mut impl Cpu, to: u64) {
    model.apply(&Input::Retire(
        Retired::new(KERNEL + 0x40, 2, Cofi::Far(FarKind::Iret), to).to_cpl(3),
    ));
}

/// Runs the program from `start` to its exit, feeding `model`.
///
/// # Panics
/// On a program that does not end within two million steps, executes #UD, returns with an
/// empty stack or takes an indirect branch the plan has no targets for: the script is wrong.
pub fn run(space: &AddressSpace, start: u64, plan: &Plan, model: &mut impl Cpu) -> Truth {
    let mut truth = Truth::default();
    let mut rng = Rng(plan.seed);
    let mut stack: Vec<u64> = Vec::new();
    let mut visits: HashMap<u64, u32> = HashMap::new();
    // Where each signal handler returns to (sigreturn).
    let mut signal_returns: Vec<u64> = Vec::new();
    let mut faulted = false;
    let mut ip = start;
    loop {
        assert!(truth.steps < 2_000_000, "the program does not end");
        truth.steps += 1;
        if plan.interrupt_every.is_some_and(|n| truth.steps % n == 0) {
            model.apply(&Input::Interrupt {
                handler: KERNEL,
                cpl: 0,
            });
            kernel_return(model, ip);
        }
        if let Some((at, n)) = plan.overflow {
            if truth.steps == at {
                model.apply(&Input::Overflow { instructions: n });
            }
        }
        if plan.fault_at == Some(ip) && !faulted {
            faulted = true;
            model.apply(&Input::Fault {
                handler: KERNEL,
                cpl: 0,
            });
            signal_returns.push(ip);
            kernel_return(model, plan.signal_handler.expect("a handler for the fault"));
            ip = plan.signal_handler.expect("handler");
            continue;
        }
        let insn = decode_insn(space, ip).expect("the program's code");
        let len = insn.len() as u8;
        let nlip = ip + u64::from(len);
        let cofi = classify(&insn);
        if model.packet_en() {
            truth.ips.push(ip);
        }
        let (next, taken, cpl) = match cofi {
            Cofi::None => (nlip, false, None),
            Cofi::Conditional => {
                let target = insn.near_branch_target();
                let taken = if target <= ip {
                    let n = visits.entry(ip).or_default();
                    *n += 1;
                    if *n > plan.loop_count {
                        *n = 0;
                        false
                    } else {
                        true
                    }
                } else {
                    rng.next() & 1 == 1
                };
                (if taken { target } else { nlip }, taken, None)
            }
            Cofi::DirectJump => (insn.near_branch_target(), true, None),
            Cofi::DirectCall => {
                stack.push(nlip);
                (insn.near_branch_target(), true, None)
            }
            Cofi::IndirectJump | Cofi::IndirectCall => {
                let targets = &plan.indirect[&ip];
                let target = targets[(rng.next() % targets.len() as u64) as usize];
                if cofi == Cofi::IndirectCall {
                    stack.push(nlip);
                }
                (target, true, None)
            }
            Cofi::Return => (stack.pop().expect("a return address"), true, None),
            Cofi::Far(_) => (KERNEL, true, Some(0)),
            Cofi::Exception => panic!("the program raises #UD at {ip:#x}"),
        };
        let mut r = Retired::new(ip, len, cofi, next).taken(taken);
        if let Some(cpl) = cpl {
            r = r.to_cpl(cpl);
        }
        model.apply(&Input::Retire(r));
        ip = next;
        if let Cofi::Far(kind) = cofi {
            // The kernel's part.
            let back = match kind {
                _ if nlip == plan.exit + u64::from(len) && insn.ip() == plan.exit => return truth,
                FarKind::Syscall if plan.signal_handler.is_some_and(|h| in_handler(h, insn.ip())) => {
                    signal_returns.pop().expect("a signal to return from")
                }
                FarKind::Int3 => {
                    signal_returns.push(nlip);
                    plan.signal_handler.expect("a SIGTRAP handler")
                }
                _ => nlip,
            };
            kernel_return(model, back);
            ip = back;
        }
    }
}

/// Whether `ip` is in the signal handler starting at `handler` (handlers are short).
fn in_handler(handler: u64, ip: u64) -> bool {
    (handler..handler + 0x40).contains(&ip)
}

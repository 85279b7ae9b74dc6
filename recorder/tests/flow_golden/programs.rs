//! Small programs assembled with iced-x86's code assembler, each ending in an exit system
//! call so that the trace ends with a FUP.PGD the decoder can walk to.

use std::collections::HashMap;

use iced_x86::code_asm::*;
use iced_x86::BlockEncoderOptions;
use rtit_replay_core::image::{AddressSpace, Image};

use rtit_recorder::script::Plan;

/// Where programs are loaded (a non-PIE executable's usual text address).
pub const BASE: u64 = 0x40_1000;

/// An assembled program with its plan.
pub struct Program {
    pub name: &'static str,
    pub space: AddressSpace,
    pub start: u64,
    pub plan: Plan,
    /// Label addresses, for filter ranges.
    pub labels: HashMap<&'static str, u64>,
}

type Asm = Result<(), IcedError>;

struct Builder {
    a: CodeAssembler,
    labels: Vec<(&'static str, CodeLabel)>,
}

impl Builder {
    fn new() -> Self {
        Self {
            a: CodeAssembler::new(64).expect("64-bit assembler"),
            labels: Vec::new(),
        }
    }

    /// Places `label` at the next instruction and remembers its address under `name`.
    fn place(&mut self, name: &'static str, label: &mut CodeLabel) -> Asm {
        self.a.set_label(label)?;
        self.labels.push((name, *label));
        Ok(())
    }

    fn finish(mut self, name: &'static str, plan: impl FnOnce(&HashMap<&'static str, u64>) -> Plan) -> Program {
        let result = self
            .a
            .assemble_options(BASE, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)
            .expect("assembles");
        let labels: HashMap<&'static str, u64> = self
            .labels
            .iter()
            .map(|(n, l)| (*n, result.label_ip(l).expect("label placed")))
            .collect();
        let mut space = AddressSpace::new();
        space
            .add(Image::from_raw(name, BASE, result.inner.code_buffer.clone()))
            .expect("add");
        let plan = plan(&labels);
        Program {
            name,
            space,
            start: labels["start"],
            plan,
            labels,
        }
    }
}

/// Nested loops calling a leaf function, with if/else diamonds.
pub fn loops() -> Program {
    let mut b = Builder::new();
    let mut run = || -> Asm {
        let mut start = b.a.create_label();
        let mut outer = b.a.create_label();
        let mut inner = b.a.create_label();
        let mut skip = b.a.create_label();
        let mut leaf = b.a.create_label();
        let mut leaf_end = b.a.create_label();
        let mut exit = b.a.create_label();
        let mut other = b.a.create_label();
        b.place("start", &mut start)?;
        b.a.mov(rcx, 3u64)?;
        b.a.set_label(&mut outer)?;
        b.a.mov(rdx, 5u64)?;
        b.a.set_label(&mut inner)?;
        b.a.add(rax, rdx)?;
        b.a.test(rax, 1)?;
        b.a.jne(skip)?; // forward: random
        b.a.call(leaf)?;
        b.a.set_label(&mut skip)?;
        b.a.dec(rdx)?;
        b.a.jne(inner)?; // backward: loop
        b.a.dec(rcx)?;
        b.a.jne(outer)?;
        b.a.jmp(exit)?;
        b.place("leaf", &mut leaf)?;
        b.a.imul_3(rax, rax, 3)?;
        b.a.cmp(rax, 100)?;
        b.a.jg(other)?;
        b.a.inc(rax)?;
        b.a.ret()?;
        b.a.set_label(&mut other)?;
        b.a.xor(rax, rax)?;
        b.place("leaf_end", &mut leaf_end)?;
        b.a.ret()?;
        b.place("exit", &mut exit)?;
        b.a.mov(eax, 60)?;
        b.a.syscall()
    };
    run().expect("assembles");
    b.finish("loops", |l| Plan::new(l["exit"] + 5))
}

/// Recursion through direct and indirect calls, a jump table, a system call in the middle.
pub fn calls() -> Program {
    let mut b = Builder::new();
    let mut sites = Vec::new();
    let mut run = |sites: &mut Vec<&'static str>| -> Asm {
        let mut start = b.a.create_label();
        let mut rec = b.a.create_label();
        let mut done = b.a.create_label();
        let mut table_jmp = b.a.create_label();
        let mut case_a = b.a.create_label();
        let mut case_b = b.a.create_label();
        let mut case_c = b.a.create_label();
        let mut icall = b.a.create_label();
        let mut again = b.a.create_label();
        let mut exit = b.a.create_label();
        b.place("start", &mut start)?;
        b.a.mov(rbx, 4u64)?;
        b.a.set_label(&mut again)?;
        b.a.call(rec)?;
        b.place("table_jmp", &mut table_jmp)?;
        b.a.jmp(rax)?; // indirect: a jump table
        b.place("case_a", &mut case_a)?;
        b.a.add(rax, 1)?;
        b.a.jmp(icall)?;
        b.place("case_b", &mut case_b)?;
        b.a.mov(eax, 39)?;
        b.a.syscall()?; // getpid: leaves and re-enters user mode
        b.a.jmp(icall)?;
        b.place("case_c", &mut case_c)?;
        b.a.nop()?;
        b.place("icall", &mut icall)?;
        b.a.call(rdx)?; // indirect call to rec
        b.a.dec(rbx)?;
        b.a.jne(again)?;
        b.a.jmp(exit)?;
        b.place("rec", &mut rec)?;
        b.a.sub(rdi, 1)?;
        b.a.je(done)?; // forward: random, so the depth varies
        b.a.push(rdi)?;
        b.a.call(rec)?;
        b.a.pop(rdi)?;
        b.a.set_label(&mut done)?;
        b.a.ret()?;
        b.place("exit", &mut exit)?;
        b.a.mov(eax, 60)?;
        b.a.syscall()?;
        sites.extend(["table_jmp", "icall"]);
        Ok(())
    };
    run(&mut sites).expect("assembles");
    b.finish("calls", |l| {
        let mut plan = Plan::new(l["exit"] + 5);
        plan.loop_count = 5;
        plan.indirect
            .insert(l["table_jmp"], vec![l["case_a"], l["case_b"], l["case_c"]]);
        plan.indirect.insert(l["icall"], vec![l["rec"]]);
        plan
    })
}

/// A signal handler reached by INT3 (SIGTRAP) and by a faulting load; it returns with
/// sigreturn (a SYSCALL).
pub fn signals() -> Program {
    let mut b = Builder::new();
    let mut run = || -> Asm {
        let mut start = b.a.create_label();
        let mut top = b.a.create_label();
        let mut faulting = b.a.create_label();
        let mut handler = b.a.create_label();
        let mut exit = b.a.create_label();
        b.place("start", &mut start)?;
        b.a.mov(rcx, 4u64)?;
        b.a.set_label(&mut top)?;
        b.a.int3()?;
        b.place("faulting", &mut faulting)?;
        b.a.mov(rax, qword_ptr(rbx))?;
        b.a.dec(rcx)?;
        b.a.jne(top)?;
        b.a.jmp(exit)?;
        b.place("handler", &mut handler)?;
        b.a.inc(rsi)?;
        b.a.mov(eax, 15)?;
        b.a.syscall()?; // rt_sigreturn
        b.place("exit", &mut exit)?;
        b.a.mov(eax, 60)?;
        b.a.syscall()
    };
    run().expect("assembles");
    b.finish("signals", |l| {
        let mut plan = Plan::new(l["exit"] + 5);
        plan.loop_count = 8;
        plan.signal_handler = Some(l["handler"]);
        plan.fault_at = Some(l["faulting"]);
        plan
    })
}

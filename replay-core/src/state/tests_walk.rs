//! A walk a run at a time ([`Walker::forward_to`], [`Walker::backward_to`]) leaves every
//! state a step at a time ([`Walker::step_forward`], [`Walker::step_backward`]) leaves: the
//! same values, the same causes, the same memory.

use std::sync::Arc;

use super::inputs::{self, Inputs};
use super::reg::{Reg, RAX, RSP};
use super::walker::Walker;
use super::State;
use crate::flow::FlowSink;
use crate::image::{AddressSpace, Image};
use crate::timeline::{Builder, Timeline};

/// A loop of five instructions run seven times (runs split at its branch), then a `cpuid`
/// (not plain), a push and pop, a store through an unknown `rdi` (all memory lost, for
/// a cause) and a `nop`.
fn history() -> (AddressSpace, Arc<Timeline>) {
    let code: &[&[u8]] = &[
        &[0x48, 0x8b, 0x04, 0x24], // mov rax, [rsp]
        &[0x48, 0x83, 0xc0, 0x01], // add rax, 1
        &[0x48, 0x89, 0x04, 0x24], // mov [rsp], rax
        &[0x48, 0x83, 0xf8, 0x07], // cmp rax, 7
        &[0x75, 0xee],             // jne 0x1000
        &[0x0f, 0xa2],             // cpuid
        &[0x53],                   // push rbx
        &[0x5b],                   // pop rbx
        &[0x48, 0x89, 0x07],       // mov [rdi], rax
        &[0x90],                   // nop
    ];
    let mut bytes = Vec::new();
    let mut at = Vec::new();
    for insn in code {
        at.push(0x1000 + bytes.len() as u64);
        bytes.extend_from_slice(insn);
    }
    let mut space = AddressSpace::new();
    space.add(Image::from_raw("t", 0x1000, bytes)).expect("add");
    // Runs as the flow decoder gives them: the loop's five instructions seven times, then
    // the last five.
    let mut builder = Builder::new(&space);
    for _ in 0..7 {
        builder.run(at[0], 5);
    }
    builder.run(at[5], 5);
    let history = Arc::new(builder.finish());
    assert_eq!(history.ips().collect::<Vec<_>>().len(), 40);
    (space, history)
}

/// Everything the state says: registers and flags with their causes, the bytes around the
/// stack with theirs.
fn described(st: &State, space: &AddressSpace) -> String {
    let bytes: Vec<_> = (0x7ff0..0x8010)
        .map(|a| (st.mem.read_byte(a, space), st.mem.why(a, space)))
        .collect();
    format!("{:?} {:?} {:?} {bytes:?}", st.regs, st.flags, st.mem)
}

fn walker(hard: Vec<u64>, soft: Vec<u64>) -> (Walker, State, u64) {
    let (space, history) = history();
    let len = history.len();
    let mut start = State::unknown();
    start.regs.set(RSP, Some(0x8000));
    start.regs.set(Reg::Gpr(3), Some(0x33));
    start.mem.write(0x8000, &0u64.to_le_bytes());
    let mut inputs = Inputs {
        history,
        hard_barriers: hard,
        soft_barriers: soft,
        ..Inputs::default()
    };
    let mut shared = inputs::shared(space, &mut inputs);
    shared.prepare();
    (Walker::new(Arc::new(shared)), start, len)
}

/// Walks the history one way a step at a time, then in chunks of every size a run at a time,
/// and compares the states at each chunk's end, with no barrier and with barriers inside the
/// loop's runs.
fn compare(forwards: bool) {
    for (hard, soft) in [(vec![], vec![]), (vec![13], vec![22]), (vec![5, 6], vec![34])] {
        let (mut one, start, len) = walker(hard.clone(), soft.clone());
        let space = one.shared.space.clone();
        // Backwards from the end, where rax and the stack word (the loop's count) are known.
        let mut top = State::unknown();
        top.regs.set(RSP, Some(0x8000));
        top.regs.set(RAX, Some(7));
        top.mem.write(0x8000, &7u64.to_le_bytes());
        let first = if forwards { start } else { top };
        let (from, step): (u64, i64) = if forwards { (0, 1) } else { (len - 1, -1) };
        let mut each = vec![described(&first, &space); len as usize];
        let mut st = first.clone();
        let mut at = from;
        for _ in 0..len - 1 {
            match forwards {
                true => one.step_forward(&mut st, at),
                false => one.step_backward(&mut st, at - 1),
            }
            at = at.wrapping_add_signed(step);
            each[at as usize] = described(&st, &space);
        }
        if forwards {
            assert_eq!(st.regs.get(RAX), None, "the cpuid with no model made rax unknown");
        }
        for chunk in 1..len {
            let (mut runs, _, _) = walker(hard.clone(), soft.clone());
            let mut st = first.clone();
            let mut at = from;
            while at != len - 1 - from {
                let to = match forwards {
                    true => (at + chunk).min(len - 1),
                    false => at.saturating_sub(chunk),
                };
                match forwards {
                    true => runs.forward_to(&mut st, at, to),
                    false => runs.backward_to(&mut st, at, to),
                }
                at = to;
                assert_eq!(
                    described(&st, &space),
                    each[at as usize],
                    "at {at}, {chunk} at a time, forwards {forwards}, barriers {hard:?} {soft:?}"
                );
            }
            assert_eq!(runs.stats.forward + runs.stats.backward, len - 1);
        }
    }
}

#[test]
fn a_walk_a_run_at_a_time_leaves_each_state_a_step_at_a_time_leaves() {
    compare(true);
}

#[test]
fn a_walk_back_a_run_at_a_time_leaves_each_state_a_step_at_a_time_leaves() {
    compare(false);
}

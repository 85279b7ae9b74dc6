//! The engine on small hand-assembled histories: forward, backward, their merge, an
//! unmodelled instruction, a store through an unknown pointer, system calls.

use super::reg::{Reg, RAX, RCX, RDI, RDX, RSI, RSP};
use super::{Conflict, Inputs, State, Values};
use crate::image::{AddressSpace, Image};
use crate::syscall::{MemoryWrite, SyscallRecord};

const RBX: Reg = Reg::Gpr(3);

/// Straight-line code at 0x1000, one position per instruction.
fn program(code: &[(&[u8], &str)]) -> (AddressSpace, Vec<u64>) {
    let mut bytes = Vec::new();
    let mut ips = Vec::new();
    for (insn, _) in code {
        ips.push(0x1000 + bytes.len() as u64);
        bytes.extend_from_slice(insn);
    }
    let mut space = AddressSpace::new();
    space.add(Image::from_raw("t", 0x1000, bytes)).expect("add");
    (space, ips)
}

fn state(regs: &[(Reg, u64)], memory: &[(u64, &[u8])]) -> State {
    let mut st = State::unknown();
    for &(r, v) in regs {
        st.regs.set(r, Some(v));
    }
    for &(a, b) in memory {
        st.mem.write(a, b);
    }
    st
}

fn values(space: AddressSpace, ips: Vec<u64>, start: State, end: Option<State>) -> Values {
    Values::new(
        space,
        Inputs {
            history: crate::timeline::Timeline::from_ips(ips),
            start,
            end,
            ..Inputs::default()
        },
    )
}

const CODE: [(&[u8], &str); 9] = [
    (&[0x48, 0x83, 0xec, 0x10], "sub rsp, 0x10"),
    (&[0x48, 0x89, 0x04, 0x24], "mov [rsp], rax"),
    (&[0x53], "push rbx"),
    (&[0x5b], "pop rbx"),
    (&[0x0f, 0xa2], "cpuid"),
    (&[0x48, 0x8b, 0x0c, 0x24], "mov rcx, [rsp]"),
    (&[0x48, 0x89, 0x07], "mov [rdi], rax"),
    (&[0x48, 0x83, 0xc4, 0x10], "add rsp, 0x10"),
    (&[0x90], "nop"),
];

fn reg(v: &mut Values, p: u64, r: Reg) -> Result<Option<u64>, Conflict> {
    v.at(p).expect("a position").register(r)
}

#[test]
fn forward_computes_and_unmodelled_instructions_forget_exactly_what_they_write() {
    let (space, ips) = program(&CODE);
    let start = state(&[(RSP, 0x8000), (RAX, 0x1111), (RBX, 0x2222)], &[(0x7fe0, &[0; 32])]);
    let mut v = values(space, ips, start, None);
    assert_eq!(reg(&mut v, 1, RSP), Ok(Some(0x7ff0)));
    assert_eq!(v.at(2).expect("p2").memory(0x7ff0, 2), Ok(Some(vec![0x11, 0x11])));
    assert_eq!(reg(&mut v, 3, RSP), Ok(Some(0x7fe8)));
    assert_eq!(reg(&mut v, 4, RBX), Ok(Some(0x2222)));
    // cpuid writes eax, ebx, ecx, edx: those become unknown, rsp stays known.
    for r in [RAX, RBX, RCX, RDX] {
        assert_eq!(reg(&mut v, 5, r), Ok(None), "{r:?}");
    }
    assert_eq!(reg(&mut v, 5, RSP), Ok(Some(0x7ff0)));
    assert_eq!(reg(&mut v, 6, RCX), Ok(Some(0x1111)), "a load from known memory");
    // A store through rdi, unknown: any byte may have changed.
    assert_eq!(v.at(7).expect("p7").memory(0x7ff0, 1), Ok(None));
    assert_eq!(reg(&mut v, 8, RSP), Ok(Some(0x8000)));
}

#[test]
fn backward_undoes_and_learns_and_the_passes_merge() {
    let (space, ips) = program(&CODE);
    let start = state(&[(RSP, 0x8000), (RAX, 0x1111), (RBX, 0x2222)], &[]);
    let end = state(
        &[(RSP, 0x8000), (RAX, 0x5555), (RCX, 0x1111), (RDI, 0x9000)],
        &[(0x7ff0, &0x1111u64.to_le_bytes()), (0x9000, &0x5555u64.to_le_bytes())],
    );
    let mut v = values(space, ips, start, Some(end));
    // add rsp, 0x10 undone.
    assert_eq!(reg(&mut v, 7, RSP), Ok(Some(0x7ff0)));
    // Before the store through rdi, rdi is known from the end (the forward pass lost it).
    assert_eq!(reg(&mut v, 6, RDI), Ok(Some(0x9000)));
    // The forward pass forgot memory at the unknown store; the backward pass knows it.
    assert_eq!(
        v.at(7).expect("p7").memory(0x7ff0, 8),
        Ok(Some(0x1111u64.to_le_bytes().to_vec()))
    );
    // Before `mov [rdi], rax` the memory there is unknown (it was overwritten).
    assert_eq!(v.at(6).expect("p6").memory(0x9000, 8), Ok(None));
    // After cpuid rax is the end's (nothing writes it later); before it, the start's.
    assert_eq!(reg(&mut v, 5, RAX), Ok(Some(0x5555)));
    assert_eq!(reg(&mut v, 4, RAX), Ok(Some(0x1111)));
    // rcx: written by cpuid and by the load; unknown between them.
    assert_eq!(reg(&mut v, 5, RCX), Ok(None));
    assert!(v.stats().backward_steps > 0);
}

#[test]
fn passes_that_disagree_report_a_conflict_not_a_value() {
    let (space, ips) = program(&CODE);
    let start = state(&[(RSP, 0x8000)], &[]);
    let end = state(&[(RSP, 0x8008)], &[]);
    let mut v = values(space, ips, start, Some(end));
    assert_eq!(reg(&mut v, 8, RSP), Err(Conflict));
}

#[test]
fn system_calls_use_their_record_or_forget_what_they_may_write() {
    // syscall; nop — a read(0, 0x7000, 16) that returned 4.
    let (space, ips) = program(&[(&[0x0f, 0x05], "syscall"), (&[0x90], "nop")]);
    let start = state(
        &[(RAX, 0), (RDI, 0), (RSI, 0x7000), (RDX, 16), (RBX, 7)],
        &[(0x7000, &[0; 32])],
    );
    let record = SyscallRecord {
        position: 0,
        ip: 0x1000,
        nr: 0,
        before: Default::default(),
        after: [("rax".to_string(), "0x4".to_string())].into_iter().collect(),
        writes: vec![MemoryWrite::new(0x7000, &[0xde, 0xad, 0xbe, 0xef])],
        complete: true,
        unlogged: Vec::new(),
    };
    let mut v = Values::new(
        space.clone(),
        Inputs {
            history: crate::timeline::Timeline::from_ips(ips.clone()),
            start: start.clone(),
            syscalls: vec![record.clone()],
            ..Inputs::default()
        },
    );
    let k = v.at(1).expect("p1");
    assert_eq!(k.register(RAX), Ok(Some(4)));
    assert_eq!(k.register(RCX), Ok(None), "the kernel's return path writes rcx");
    assert_eq!(k.register(RBX), Ok(Some(7)), "a system call keeps rbx");
    assert_eq!(k.memory(0x7000, 6), Ok(Some(vec![0xde, 0xad, 0xbe, 0xef, 0, 0])));
    // A record at another address is not this call's: the table's bound applies instead.
    let mut wrong_ip = record;
    wrong_ip.ip = 0x2000;
    let mut v = Values::new(
        space,
        Inputs {
            history: crate::timeline::Timeline::from_ips(ips),
            start,
            syscalls: vec![wrong_ip],
            ..Inputs::default()
        },
    );
    let k = v.at(1).expect("p1");
    assert_eq!(k.register(RAX), Ok(None));
    assert_eq!(k.memory(0x7000, 1), Ok(None), "read may have written its whole buffer");
    assert_eq!(k.memory(0x7010, 1), Ok(Some(vec![0])), "but nothing past it");
    assert_eq!(k.register(RSI), Ok(Some(0x7000)));
}

/// A call whose record could not hold all it wrote (over the log's bound, or memory
/// unreadable after it) but says where the rest went forgets only that rest: sort read its
/// 1.8 MB input in one call, over the bound, and every value after it was lost.
#[test]
fn a_call_logged_in_part_forgets_only_what_its_log_could_not_hold() {
    // syscall; nop — a read(0, 0x7000, 16) that returned 8, its last 4 bytes not logged.
    let (space, ips) = program(&[(&[0x0f, 0x05], "syscall"), (&[0x90], "nop")]);
    let start = state(
        &[(RAX, 0), (RDI, 0), (RSI, 0x7000), (RDX, 16), (RBX, 7)],
        &[(0x7000, &[0; 32]), (0x9000, &[5])],
    );
    let record = SyscallRecord {
        position: 0,
        ip: 0x1000,
        nr: 0,
        before: Default::default(),
        after: [("rax".to_string(), "0x8".to_string())].into_iter().collect(),
        writes: vec![MemoryWrite::new(0x7000, &[0xde, 0xad, 0xbe, 0xef])],
        complete: false,
        unlogged: vec![crate::syscall::Unlogged {
            address: 0x7004,
            len: 4,
        }],
    };
    let run = |record: SyscallRecord| {
        let mut v = Values::new(
            space.clone(),
            Inputs {
                history: crate::timeline::Timeline::from_ips(ips.clone()),
                start: start.clone(),
                syscalls: vec![record],
                ..Inputs::default()
            },
        );
        v.prepare(|_, _| {});
        v
    };
    let mut v = run(record.clone());
    let k = v.at(1).expect("p1");
    assert_eq!(k.register(RAX), Ok(Some(8)));
    assert_eq!(k.register(RBX), Ok(Some(7)));
    assert_eq!(k.memory(0x7000, 4), Ok(Some(vec![0xde, 0xad, 0xbe, 0xef])));
    assert_eq!(k.memory(0x7004, 1), Ok(None), "written, not logged");
    assert_eq!(k.memory(0x7007, 1), Ok(None));
    assert_eq!(k.memory(0x7008, 8), Ok(Some(vec![0; 8])), "past what it wrote");
    assert_eq!(k.memory(0x9000, 1), Ok(Some(vec![5])), "elsewhere");
    let why = k.why_memory(0x7004).0.expect("a cause going forwards");
    assert_eq!((why.cause, why.position), (super::why::Cause::SyscallIncomplete(0), 0));
    // Without the ranges (a record from before them), nothing after the call is known.
    let mut v = run(SyscallRecord {
        unlogged: Vec::new(),
        ..record
    });
    let k = v.at(1).expect("p1");
    assert_eq!(k.memory(0x9000, 1), Ok(None));
    assert_eq!(k.memory(0x7008, 1), Ok(None));
}

#[test]
fn the_chains_walk_the_history_once_each_way_and_position_0_needs_no_more_steps() {
    // `jmp $` executed 3 intervals and a bit: backward checkpoints at 0, 4096, 8192, 12288.
    let (space, _) = program(&[(&[0xeb, 0xfe], "jmp $")]);
    let n = 3 * super::INTERVAL + 5;
    let ips = vec![0x1000; n as usize];
    let end = state(&[(RSP, 0x8000), (RBX, 7)], &[]);
    let mut v = values(space, ips, State::unknown(), Some(end));
    let mut calls = Vec::new();
    v.prepare(|done, total| calls.push((done, total)));
    assert!(v.complete());
    let total = (n - 1) + 3 * super::INTERVAL;
    assert!(calls.iter().all(|&(d, t)| d <= t && t == total), "{calls:?}");
    assert_eq!(v.stats().walked, (total, total));
    let stats = v.stats();
    assert_eq!(stats.backward_steps, n - 1, "every position once backwards");
    assert_eq!(
        stats.forward_steps,
        3 * super::INTERVAL,
        "and forwards up to the last checkpoint"
    );
    assert_eq!(
        stats.checkpoints,
        4 + 4 + 1,
        "backward at 0..12288 and the end, forward 0..12288"
    );
    assert_eq!(reg(&mut v, 0, RBX), Ok(Some(7)), "the end's rbx, carried back to 0");
    assert_eq!(
        v.stats().backward_steps,
        n - 1,
        "position 0 answered from the checkpoint"
    );
    assert_eq!(v.stats().forward_steps, 3 * super::INTERVAL);
    // Nothing to walk backwards without an end state.
    let (space, _) = program(&[(&[0xeb, 0xfe], "jmp $")]);
    let mut v = values(space, vec![0x1000; 10], State::unknown(), None);
    v.prepare(|_, _| {});
    assert_eq!(v.stats().backward_steps, 0);
}

#[test]
fn before_the_chains_come_answers_know_less_and_never_differ() {
    // mov rbx, 5 at the start, then `jmp $` for 3 intervals and a bit; the end knows rcx.
    let (space, _) = program(&[(&[0xbb, 0x05, 0, 0, 0], "mov ebx, 5"), (&[0xeb, 0xfe], "jmp $")]);
    let n = 3 * super::INTERVAL + 5;
    let mut ips = vec![0x1005; n as usize];
    ips[0] = 0x1000;
    let start = state(&[(RSP, 0x8000)], &[]);
    let end = state(&[(RCX, 9)], &[]);
    let inputs = || Inputs {
        history: crate::timeline::Timeline::from_ips(ips.clone()),
        start: start.clone(),
        end: Some(end.clone()),
        ..Inputs::default()
    };
    let mut v = Values::held(space.clone(), inputs());
    let mid = 2 * super::INTERVAL + 7;
    // Held back: the start and the end states only, and the walks from them within an
    // interval.
    assert!(!v.complete());
    assert_eq!(reg(&mut v, 1, RBX), Ok(Some(5)), "walked from the start");
    assert_eq!(reg(&mut v, 1, RCX), Ok(None), "the end is more than an interval away");
    assert_eq!(reg(&mut v, n - 3, RCX), Ok(Some(9)), "walked down from the end");
    assert_eq!(reg(&mut v, mid, RBX), Ok(None), "no forward checkpoint there yet");
    assert_eq!(reg(&mut v, mid, RSP), Ok(None));
    let before = v.stats();
    assert!(
        before.forward_steps <= super::INTERVAL && before.backward_steps <= super::INTERVAL,
        "a question walks at most an interval: {before:?}"
    );
    v.prepare(|_, _| {});
    assert!(v.complete());
    assert_eq!(reg(&mut v, mid, RBX), Ok(Some(5)));
    assert_eq!(reg(&mut v, mid, RSP), Ok(Some(0x8000)));
    assert_eq!(reg(&mut v, 1, RCX), Ok(Some(9)));
    assert_eq!(v.stats().conflicts, 0);
    // The same answers as an engine that waited from the start.
    let mut w = Values::new(space, inputs());
    for p in [0, 1, mid, n - 3, n - 1] {
        for r in [RBX, RCX, RSP] {
            assert_eq!(reg(&mut w, p, r), reg(&mut v, p, r), "position {p}, {r:?}");
        }
    }
}

#[test]
fn stepping_back_walks_from_a_fine_checkpoint_not_the_interval_start() {
    // mov ebx, 5, then `jmp $`: reverse-stepi from deep inside an interval, as gdb does.
    let (space, _) = program(&[(&[0xbb, 0x05, 0, 0, 0], "mov ebx, 5"), (&[0xeb, 0xfe], "jmp $")]);
    let n = 3 * super::INTERVAL + 5;
    let mut ips = vec![0x1005; n as usize];
    ips[0] = 0x1000;
    let start = state(&[(RSP, 0x8000)], &[]);
    let mut v = values(space.clone(), ips.clone(), start.clone(), None);
    v.prepare(|_, _| {});
    let p = 2 * super::INTERVAL + 4000;
    assert_eq!(reg(&mut v, p, RBX), Ok(Some(5)));
    for back in 1..=8 {
        let before = v.stats().forward_steps;
        assert_eq!(reg(&mut v, p - back, RBX), Ok(Some(5)), "{back} back");
        let walked = v.stats().forward_steps - before;
        assert!(walked < 1024, "{back} back: {walked} steps from the interval's start");
    }
    let mut fresh = values(space, ips, start, None);
    for q in [p - 8, p - 1, p] {
        assert_eq!(reg(&mut fresh, q, RSP), reg(&mut v, q, RSP), "position {q}");
    }
}

#[test]
fn checkpoints_stay_bounded_on_long_histories() {
    assert_eq!(super::interval(1000), super::INTERVAL);
    assert_eq!(super::interval(64 * super::INTERVAL), super::INTERVAL);
    // A handful of checkpoints on ten million positions, not thousands ...
    assert_eq!(super::interval(10_000_000), 156_250);
    // ... and no interval longer than a question may walk: their number then grows with
    // the history, their memory per position stays flat.
    assert_eq!(super::interval(1_000_000_000), 1 << 18);
    assert_eq!(super::interval(100_000_000_000), 1 << 18);
}

/// A system call at `ip` numbered `nr` that returned `ret`.
fn returned(position: u64, nr: u64, ret: u64) -> SyscallRecord {
    SyscallRecord {
        position,
        ip: 0x1000,
        nr,
        before: Default::default(),
        after: [("rax".to_string(), format!("{ret:#x}"))].into_iter().collect(),
        writes: vec![],
        complete: true,
        unlogged: Vec::new(),
    }
}

#[test]
fn a_restarted_system_call_changes_nothing_but_the_return_registers() {
    // syscall (read, interrupted: -ERESTARTSYS), syscall again (returns 16), nop.
    let (space, _) = program(&[(&[0x0f, 0x05], "syscall"), (&[0x90], "nop")]);
    let ips = vec![0x1000, 0x1000, 0x1002];
    let start = state(&[(RAX, 0), (RDI, 5), (RSP, 0x8000), (RBX, 7)], &[(0x7f00, &[1; 16])]);
    let mut end = state(&[(RAX, 16), (RDI, 5), (RSP, 0x8000), (RBX, 7)], &[]);
    end.flags = super::flags::Flags::known(0x202);
    let syscalls = vec![returned(0, 0, (-512i64) as u64), returned(1, 0, 16)];
    let mut v = Values::new(
        space.clone(),
        Inputs {
            history: crate::timeline::Timeline::from_ips(ips.clone()),
            start: start.clone(),
            syscalls: syscalls.clone(),
            ..Inputs::default()
        },
    );
    let k = v.at(1).expect("p1");
    assert_eq!(k.register(RAX), Ok(Some(0)), "the number again, not -ERESTARTSYS");
    assert_eq!(k.register(RDI), Ok(Some(5)));
    assert_eq!(k.register(RBX), Ok(Some(7)));
    assert_eq!(k.register(RCX), Ok(None), "syscall's return wrote rcx");
    assert_eq!(
        k.memory(0x7f00, 16),
        Ok(Some(vec![1; 16])),
        "no signal frame, nothing read"
    );
    assert_eq!(v.at(2).expect("p2").register(RAX), Ok(Some(16)));
    // Backwards from the end alone: rax before the restart is the logged number.
    let mut v = Values::new(
        space.clone(),
        Inputs {
            history: crate::timeline::Timeline::from_ips(ips.clone()),
            end: Some(end),
            syscalls,
            ..Inputs::default()
        },
    );
    let k = v.at(1).expect("p1");
    assert_eq!(k.register(RBX), Ok(Some(7)), "carried back over the second call");
    assert_eq!(v.at(0).expect("p0").register(RAX), Ok(Some(0)));
    assert_eq!(v.at(0).expect("p0").register(RBX), Ok(Some(7)));
    // -ERESTART_RESTARTBLOCK: the kernel restarts through restart_syscall.
    let mut v = Values::new(
        space,
        Inputs {
            history: crate::timeline::Timeline::from_ips(ips),
            start,
            syscalls: vec![returned(0, 35, (-516i64) as u64)],
            ..Inputs::default()
        },
    );
    assert_eq!(v.at(1).expect("p1").register(RAX), Ok(Some(219)));
}

#[test]
fn memory_a_store_through_an_unknown_address_lost_comes_back_from_the_backward_pass() {
    // cpuid; mov rsi, rax (unknown); mov [rsi], rax: the forward pass forgets all memory.
    // Then `jmp $` past the next checkpoint, mov rcx, [0x7000]; nop. The end state knows the
    // memory (it was read when the recording ended), not rcx.
    let (space, _) = program(&[
        (&[0x0f, 0xa2], "cpuid"),
        (&[0x48, 0x89, 0xc6], "mov rsi, rax"),
        (&[0x48, 0x89, 0x06], "mov [rsi], rax"),
        (&[0xeb, 0xfe], "jmp $"),
        (&[0x48, 0x8b, 0x0c, 0x25, 0x00, 0x70, 0x00, 0x00], "mov rcx, [0x7000]"),
        (&[0x90], "nop"),
    ]);
    let spins = super::INTERVAL as usize + 10;
    let mut ips = vec![0x1000, 0x1002, 0x1005];
    ips.extend(std::iter::repeat(0x1008).take(spins));
    ips.extend([0x100a, 0x1012]);
    let last = ips.len() as u64 - 1;
    let start = state(&[(RSP, 0x8000), (RAX, 1)], &[(0x7000, &[5; 8])]);
    let end = state(&[(RSP, 0x8000)], &[(0x7000, &[5; 8])]);
    let mut v = values(space.clone(), ips.clone(), start.clone(), Some(end));
    let k = v.at(3).expect("p3");
    assert_eq!(k.memory(0x7000, 8), Ok(Some(vec![5; 8])), "right after the store");
    assert_eq!(
        reg(&mut v, last, RCX),
        Ok(Some(0x0505_0505_0505_0505)),
        "the forward pass loaded what the backward pass knew at the checkpoint"
    );
    // Without the end state the memory stays lost, and so does what was loaded from it.
    let mut v = values(space, ips, start, None);
    assert_eq!(v.at(3).expect("p3").memory(0x7000, 8), Ok(None));
    assert_eq!(reg(&mut v, last, RCX), Ok(None));
}

/// An anchor inside an AVX2 routine, as QEMU's gdbstub reads it: the general registers and
/// xmm's low halves, no ymm upper half. The instructions before it say what ymm0 is.
#[test]
fn an_anchor_without_the_upper_halves_learns_them_from_the_instructions_before_it() {
    let (space, ips) = program(&[
        (&[0xc5, 0xf9, 0xef, 0xc0], "vpxor xmm0, xmm0, xmm0"),
        (&[0xc5, 0xfd, 0x74, 0x0f], "vpcmpeqb ymm1, ymm0, [rdi]"),
        (&[0xc5, 0xfd, 0xd7, 0xc1], "vpmovmskb eax, ymm1"),
        (&[0x90], "nop"),
    ]);
    let text = [b'a'; 20].iter().chain(&[0; 12]).copied().collect::<Vec<u8>>();
    let regs: Vec<(Reg, u64)> = [RAX, RBX, RCX, RDX, RSI, RDI, Reg::Gpr(5), RSP]
        .into_iter()
        .map(|r| (r, if r == RDI { 0x8000 } else { 0x10 }))
        .collect();
    let mut anchor = state(&regs, &[(0x8000, &text)]);
    for i in 0..2 {
        // xmm0 is zero, xmm1 compares `text`'s first 16 bytes with it: none is zero.
        anchor.vec.set_lane(i, 0, 8, Some(0));
        anchor.vec.set_lane(i, 8, 8, Some(0));
    }
    let anchored = |anchor: State| {
        Values::new(
            space.clone(),
            Inputs {
                history: crate::timeline::Timeline::from_ips(ips.clone()),
                anchors: vec![(0, State::unknown()), (2, anchor)],
                ..Inputs::default()
            },
        )
    };
    let mut v = anchored(anchor.clone());
    // The mask of zero bytes in the 32 at rdi: bytes 20 to 31.
    assert_eq!(reg(&mut v, 3, RAX), Ok(Some(0xfff0_0000)));
    let k = v.at(2).expect("the anchor's position");
    let ymm1 = k.vector(1).expect("no conflict");
    assert!(ymm1[..32].iter().all(Option::is_some), "{ymm1:?}");
    // Without the instructions before it (the anchor at the first position after the
    // start), nothing tells the upper halves: unknown, not guessed.
    let (space2, ips2) = program(&[
        (&[0x90], "nop"),
        (&[0xc5, 0xfd, 0xd7, 0xc1], "vpmovmskb eax, ymm1"),
        (&[0x90], "nop"),
    ]);
    let mut v = Values::new(
        space2,
        Inputs {
            history: crate::timeline::Timeline::from_ips(ips2),
            anchors: vec![(0, State::unknown()), (1, anchor)],
            ..Inputs::default()
        },
    );
    assert_eq!(reg(&mut v, 2, RAX), Ok(None));
}

/// A register map that says only some `eflags` bits are known (a plugin reading QEMU's word
/// inside its execution loop, where the status flags live elsewhere) sets those bits alone.
#[test]
fn eflags_known_bits_alone_are_set() {
    use super::flags::{ALL, DF, KNOWN_NAME, STATUS, ZF};
    let map = |known: Option<u64>| {
        let mut m = std::collections::BTreeMap::new();
        m.insert("eflags".to_string(), "0x242".to_string());
        if let Some(k) = known {
            m.insert(KNOWN_NAME.to_string(), format!("{k:#x}"));
        }
        m
    };
    let mut st = State::default();
    super::set_named(&mut st, &map(None));
    assert_eq!((st.flags.value & ALL, st.flags.known), (0x242, ALL));
    let mut st = State::default();
    super::set_named(&mut st, &map(Some(ALL & !STATUS)));
    assert_eq!(st.flags.known, ALL & !STATUS, "the status flags are not known");
    assert_eq!(st.flags.known & ZF, 0, "ZF, set in the word, is not taken");
    assert_ne!(st.flags.known & DF, 0);
    assert_eq!(st.flags.value & st.flags.known, 0x202);
}

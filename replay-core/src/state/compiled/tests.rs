//! Every form translated does what the general semantics do: the same values, the same
//! causes of what is unknown, the same memory noted written, from states with registers,
//! flags and memory each known or unknown for causes of their own.

use iced_x86::code_asm::*;
use iced_x86::{Decoder, DecoderOptions, Instruction, InstructionInfoFactory};

use super::Compiled;
use crate::image::{AddressSpace, Image};
use crate::state::memory::log::Logging;
use crate::state::reg::Reg;
use crate::state::why::{self, Cause};
use crate::state::{flags, forward, State};
use crate::test_rng::Rng;

const CODE: u64 = 0x1000;
/// Writable memory the states know most of.
const DATA: u64 = 0x4000;

/// The instructions `f` assembles at [`CODE`], decoded back (with their addresses and
/// lengths) but for `data` bytes at the end, and the space holding their bytes (read-only: a
/// `rip`-relative load reads them).
fn assemble(
    data: usize,
    f: impl FnOnce(&mut CodeAssembler) -> Result<(), IcedError>,
) -> (Vec<Instruction>, AddressSpace) {
    let mut a = CodeAssembler::new(64).expect("64-bit");
    f(&mut a).expect("assembles");
    let bytes = a.assemble(CODE).expect("assembles");
    let mut space = AddressSpace::new();
    space
        .add(Image::from_raw("code", CODE, bytes.clone()))
        .expect("an image");
    let mut d = Decoder::with_ip(64, &bytes[..bytes.len() - data], CODE, DecoderOptions::NONE);
    let insns = d.iter().collect();
    (insns, space)
}

/// The forms translated: each mnemonic with register, memory and immediate operands of each
/// width, the high byte registers, `rip`-relative loads, branches both ways.
fn translated() -> (Vec<Instruction>, AddressSpace) {
    assemble(8, |a| {
        let mut data = a.create_label();
        let mut ahead = a.create_label();
        a.mov(rax, rbx)?;
        a.mov(eax, ebx)?;
        a.mov(ax, bx)?;
        a.mov(al, bh)?;
        a.mov(ah, cl)?;
        a.mov(r9, qword_ptr(r12 + r13 * 2 - 8))?;
        a.mov(rax, qword_ptr(rbx + rcx * 8 + 0x10))?;
        a.mov(eax, dword_ptr(rbx))?;
        a.mov(ax, word_ptr(rbx + 2))?;
        a.mov(al, byte_ptr(rbx + 1))?;
        a.mov(qword_ptr(rbx + 8), rax)?;
        a.mov(dword_ptr(rbx), ecx)?;
        a.mov(word_ptr(rbx + rsi), dx)?;
        a.mov(byte_ptr(rbx), cl)?;
        a.mov(byte_ptr(rbx + 3), ah)?;
        a.mov(rax, 0x1122_3344_5566_7788u64)?;
        a.mov(eax, 5)?;
        a.mov(qword_ptr(rbx), -3)?;
        a.mov(dword_ptr(rbx + rsi * 4), 7)?;
        a.mov(byte_ptr(rbx), 0xff)?;
        a.mov(rax, qword_ptr(data))?;
        a.mov(ecx, dword_ptr(data))?;
        a.movzx(eax, byte_ptr(rbx))?;
        a.movzx(eax, word_ptr(rbx + 6))?;
        a.movzx(ecx, al)?;
        a.movzx(eax, ah)?;
        a.movzx(rax, bx)?;
        a.movsx(rax, byte_ptr(rbx))?;
        a.movsx(eax, cl)?;
        a.movsx(ax, bl)?;
        a.movsxd(rax, dword_ptr(rbx + 4))?;
        a.movsxd(rax, ecx)?;
        a.lea(rax, qword_ptr(rbx + rcx * 4 + 8))?;
        a.lea(eax, dword_ptr(rbx + rcx))?;
        a.lea(rdx, qword_ptr(data))?;
        a.add(rax, rbx)?;
        a.add(eax, 1)?;
        a.add(qword_ptr(rbx), 0x7f)?;
        a.add(al, 0x80)?;
        a.sub(rax, rax)?;
        a.sub(ecx, dword_ptr(rbx))?;
        a.sub(dword_ptr(rbx + 4), 1)?;
        a.cmp(rax, -1)?;
        a.cmp(qword_ptr(rbx), rcx)?;
        a.cmp(byte_ptr(rbx + 1), 0)?;
        a.cmp(ah, 3)?;
        a.cmp(rax, qword_ptr(data))?;
        a.and(eax, 0xff)?;
        a.and(rax, rbx)?;
        a.and(byte_ptr(rbx), al)?;
        a.or(rcx, rdx)?;
        a.or(cl, byte_ptr(rbx))?;
        a.or(word_ptr(rbx), 0x100)?;
        a.xor(eax, eax)?;
        a.xor(al, al)?;
        a.xor(rax, rbx)?;
        a.xor(qword_ptr(rbx), rdx)?;
        a.test(rax, rax)?;
        a.test(eax, ecx)?;
        a.test(byte_ptr(rbx), 1)?;
        a.test(al, 0x80)?;
        a.inc(rax)?;
        a.inc(dword_ptr(rbx))?;
        a.dec(ecx)?;
        a.dec(ah)?;
        a.neg(rax)?;
        a.neg(word_ptr(rbx))?;
        a.not(eax)?;
        a.not(byte_ptr(rbx + 1))?;
        a.cmove(rax, rbx)?;
        a.cmovl(eax, dword_ptr(rbx))?;
        a.cmovns(ecx, edx)?;
        a.cmova(r8, qword_ptr(rbx + 8))?;
        a.sete(al)?;
        a.setg(byte_ptr(rbx))?;
        a.setb(ah)?;
        a.shl(rax, 3)?;
        a.shl(rax, 0)?;
        a.shr(ecx, 1)?;
        a.sar(al, cl)?;
        a.sar(r9, 63)?;
        a.shr(rdx, cl)?;
        a.shl(bl, cl)?;
        a.shr(dx, cl)?;
        a.shr(dx, 16)?;
        a.shl(qword_ptr(rbx), cl)?;
        a.shr(word_ptr(rbx + 2), 5)?;
        a.sal(esi, 31)?;
        a.imul_2(rax, rbx)?;
        a.imul_2(eax, dword_ptr(rbx))?;
        a.imul_3(rcx, rdx, 0x10)?;
        a.imul_3(ax, word_ptr(rbx), -3)?;
        a.cdqe()?;
        a.cwde()?;
        a.mov(rax, qword_ptr(0x28).fs())?;
        a.mov(rcx, qword_ptr(rbx).fs())?;
        a.add(qword_ptr(rax + 8).gs(), 1)?;
        a.lea(rax, qword_ptr(rbx + 8).fs())?;
        a.mov(rax, qword_ptr(rcx * 8 + 0x10))?;
        a.lea(rax, qword_ptr(rdx * 4))?;
        a.mov(rax, qword_ptr(0x4010))?;
        a.mov(eax, dword_ptr(0x4020).fs())?;
        a.push(rax)?;
        a.push(r12)?;
        a.push(qword_ptr(rbx))?;
        a.push(5)?;
        a.push(-1)?;
        a.pop(rbx)?;
        a.pop(rsp)?;
        a.call(ahead)?;
        a.ret()?;
        a.ret_1(8)?;
        a.nop()?;
        a.jmp(ahead)?;
        a.jmp(rax)?;
        a.je(ahead)?;
        a.jne(ahead)?;
        a.jl(ahead)?;
        a.jg(ahead)?;
        a.ja(ahead)?;
        a.jbe(ahead)?;
        a.js(ahead)?;
        a.jp(ahead)?;
        a.jo(ahead)?;
        a.set_label(&mut ahead)?;
        a.nop()?;
        a.set_label(&mut data)?;
        a.db(&[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11])
    })
}

/// A state whose registers point into [`DATA`], at the code (read-only bytes), or hold
/// small or any numbers, some unknown; flags partly known; the memory at [`DATA`] known but
/// for a few ranges; every unknown for a cause and position of its own.
fn state(rng: &mut Rng) -> State {
    let mut st = State::default();
    st.cpu.logic_clears_af = [None, Some(true), Some(false)][rng.below(3) as usize];
    why::begin(Cause::NotRecorded, 1);
    let bytes: Vec<u8> = (0..0x200).map(|_| rng.next() as u8).collect();
    st.mem.write(DATA, &bytes);
    for k in 0..rng.below(4) {
        why::begin(Cause::Syscall(k as u16), 10 + k);
        st.mem.forget(DATA + rng.below(0x200), 1 + rng.below(12));
    }
    for i in 0..16u8 {
        let v = match rng.below(6) {
            0 => DATA + 0x40 + rng.below(0x100),
            1 => CODE + rng.below(0x40),
            2 => rng.below(16),
            3 => [0, u64::MAX, 0x7f, 0x80, 0x8000_0000, 0xffff_ffff][rng.below(6) as usize],
            _ => rng.next(),
        };
        if rng.below(5) == 0 {
            why::begin(Cause::Syscall(100 + u16::from(i)), 100 + u64::from(i));
            st.regs.set(Reg::Gpr(i), None);
        } else {
            st.regs.set(Reg::Gpr(i), Some(v));
        }
    }
    // The segment bases: into the data, anywhere, or unknown.
    for (k, r) in [Reg::FsBase, Reg::GsBase].into_iter().enumerate() {
        match rng.below(3) {
            0 => st.regs.set(r, Some(DATA + rng.below(0x100))),
            1 => st.regs.set(r, Some(rng.next())),
            _ => {
                why::begin(Cause::Syscall(150 + k as u16), 150);
                st.regs.set(r, None);
            }
        }
    }
    // A stack in the data most of the time.
    if rng.below(4) != 0 {
        st.regs.set(Reg::Gpr(4), Some(DATA + 0x100 + 8 * rng.below(8)));
    }
    why::begin(Cause::Untraced, 200);
    st.flags.forget(flags::ALL);
    st.flags.put(rng.next() & flags::ALL, rng.next());
    st
}

/// Everything a step can change: registers, flags and their causes, the memory around
/// [`DATA`] with its causes, how many pages are held.
fn described(st: &State, space: &AddressSpace) -> String {
    let bytes: Vec<_> = (DATA - 0x10..DATA + 0x210)
        .map(|a| (st.mem.read_byte(a, space), st.mem.why(a, space)))
        .collect();
    format!("{:?} {:?} {:?} {bytes:?}", st.regs, st.flags, st.mem)
}

/// The state after `insn` at position 7 by the general semantics or by its translation,
/// with what the step noted written, the cause it insisted on and the one it would give.
fn after(
    st: &State,
    insn: &Instruction,
    c: Option<&Compiled>,
    next: Option<u64>,
    space: &AddressSpace,
) -> (String, String) {
    let mut st = st.clone();
    let log = Logging::start();
    why::begin(Cause::Inputs(insn.mnemonic()), 7);
    match c {
        Some(c) => c.forward(&mut st, next, space),
        None => forward::step(&mut st, insn, next, space, &mut InstructionInfoFactory::new()),
    }
    let (insisted, current) = (why::insisted(), why::current());
    (
        described(&st, space),
        format!("{:?} {insisted:?} {current:?}", log.take()),
    )
}

#[test]
fn every_form_translated_steps_as_the_general_semantics_do() {
    let (insns, space) = translated();
    assert_eq!(insns.len(), 125, "the forms above");
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut changed = 0;
    for _ in 0..200 {
        let st = state(&mut rng);
        let before = described(&st, &space);
        for insn in &insns {
            let c = Compiled::translate(insn, &space).unwrap_or_else(|| panic!("{insn} is translated"));
            let target = insn.near_branch_target();
            for next in [Some(insn.next_ip()), Some(target), Some(0x9999), None] {
                let general = after(&st, insn, None, next, &space);
                let compiled = after(&st, insn, Some(&c), next, &space);
                assert_eq!(compiled, general, "{insn} at {next:x?} from {before}");
                changed += usize::from(general.0 != before);
            }
        }
    }
    // Most steps changed something (states that never change would prove little).
    assert!(changed > 200 * 125 * 4 / 2, "{changed}");
}

#[test]
fn other_forms_and_rewritable_code_are_not_translated() {
    let (insns, space) = assemble(0, |a| {
        a.mov(ax, ds)?;
        a.mov(eax, dword_ptr(ebx))?;
        a.mov(rax, qword_ptr(ecx * 8 + 0x10))?;
        a.push(ax)?;
        a.pop(qword_ptr(rbx))?;
        a.movsb()?;
        a.imul(rbx)?;
        a.rol(rax, 3)?;
        a.movdqu(xmm0, xmmword_ptr(rbx))?;
        a.syscall()
    });
    for insn in &insns {
        assert!(Compiled::translate(insn, &space).is_none(), "{insn}");
    }
    let (insns, mut space) = assemble(0, |a| a.mov(rax, rbx));
    assert!(Compiled::translate(&insns[0], &space).is_some());
    space.mark_writable(CODE, CODE + 0x1000);
    assert!(
        Compiled::translate(&insns[0], &space).is_none(),
        "code the program may rewrite"
    );
}

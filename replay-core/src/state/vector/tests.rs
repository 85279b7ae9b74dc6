//! The engine on AVX-512: opmasks, masked writes and stores, compares into masks, broadcasts,
//! ternary logic, and zmm16–31 and the opmasks through XSAVE. Expected values are what the
//! SDM defines (and what `rtit check-values` confirmed against the CPU on
//! `tests/programs/semantics.c` and glibc's `*_evex` routines).

use iced_x86::code_asm::*;
use iced_x86::{Decoder, DecoderOptions};

use super::super::reg::{Reg, RAX, RCX, RDI, RDX, RSP};
use super::super::{Cpu, Inputs, State, Values};

/// Assembles `f`'s instructions at 0x1000, then a `nop`, one slice per instruction.
fn assemble(f: impl FnOnce(&mut CodeAssembler) -> Result<(), IcedError>) -> Vec<Vec<u8>> {
    let mut a = CodeAssembler::new(64).expect("64-bit");
    // EVEX wherever it can be: a VEX encoding would drop an opmask.
    a.set_prefer_vex(false);
    f(&mut a).expect("assembles");
    a.nop().expect("nop");
    let bytes = a.assemble(0x1000).expect("assembles");
    let mut d = Decoder::with_ip(64, &bytes, 0x1000, DecoderOptions::NONE);
    let mut out = Vec::new();
    let mut at = 0;
    while d.can_decode() {
        let len = d.decode().len();
        out.push(bytes[at..at + len].to_vec());
        at += len;
    }
    out
}

/// Runs `code` from `start` (with zeroed writable memory at 0x8000 unless the start state
/// already knows it) on an AVX-512 processor.
fn run(code: &[Vec<u8>], mut start: State) -> Values {
    let slices: Vec<&[u8]> = code.iter().map(Vec::as_slice).collect();
    let (space, ips) = super::super::tests_semantics::code_at_0x1000(&slices);
    start.cpu = Cpu {
        xcr0: Some(0xe7),
        ..Cpu::default()
    };
    Values::new(
        space,
        Inputs {
            history: crate::timeline::Timeline::from_ips(ips),
            start,
            ..Inputs::default()
        },
    )
}

fn with(regs: &[(Reg, u64)], memory: &[(u64, &[u8])]) -> State {
    let mut st = State::unknown();
    st.flags = super::super::flags::Flags::known(0x202);
    for &(r, v) in regs {
        st.regs.set(r, Some(v));
    }
    for &(a, b) in memory {
        st.mem.write(a, b);
    }
    st
}

fn reg(v: &mut Values, p: u64, r: Reg) -> Option<u64> {
    v.at(p).expect("a position").register(r).expect("no conflict")
}

fn vector(v: &mut Values, p: u64, i: usize) -> [Option<u8>; 64] {
    v.at(p).expect("a position").vector(i).expect("no conflict")
}

fn opmask(v: &mut Values, p: u64, i: usize) -> Option<u64> {
    v.at(p).expect("a position").opmask(i).expect("no conflict")
}

#[test]
fn the_evex_strlen_idiom_gives_the_index_of_the_first_zero_byte() {
    // __strlen_evex: vpxorq xmm16, xmm16, xmm16; vpcmpeqb k0, ymm16, [rdi]; kmovd eax, k0;
    // tzcnt eax, eax.
    let code = assemble(|a| {
        a.vpxorq(xmm16, xmm16, xmm16)?;
        a.vpcmpeqb(k0, ymm16, ptr(rdi))?;
        a.kmovd(eax, k0)?;
        a.tzcnt(eax, eax)
    });
    let s = b"hello, world\0abcdefghijklmnopqrs";
    let mut v = run(&code, with(&[(RDI, 0x7000)], &[(0x7000, s)]));
    assert_eq!(vector(&mut v, 1, 16), [Some(0); 64], "zero to all 64 bytes");
    assert_eq!(opmask(&mut v, 2, 0), Some(1 << 12));
    assert_eq!(reg(&mut v, 3, RAX), Some(1 << 12));
    assert_eq!(reg(&mut v, 4, RAX), Some(12));
    // Bytes past the terminator unknown: the mask is partly known, the length still is.
    let mut v = run(&code, with(&[(RDI, 0x7000)], &[(0x7000, &s[..14])]));
    assert_eq!(opmask(&mut v, 2, 0), None);
    assert_eq!(reg(&mut v, 3, RAX), None);
    assert_eq!(reg(&mut v, 4, RAX), Some(12));
    // A byte before it unknown: not known.
    let mut v = run(&code, with(&[(RDI, 0x7000)], &[(0x7000, &s[..5]), (0x7006, &s[6..])]));
    assert_eq!(reg(&mut v, 4, RAX), None);
}

#[test]
fn masked_writes_merge_or_zero_and_masked_stores_leave_unselected_bytes() {
    // k1 = 0b0101 from eax; zmm1 = 1s, zmm2 = 2s (by broadcasts from ecx and edx);
    // vpaddd ymm3{k1}, ymm1, ymm2 (merging into ymm3 = all 7s); vpaddd ymm4{k1}{z}, ymm1, ymm2;
    // vmovdqu32 [rdi]{k1}, ymm3.
    let code = assemble(|a| {
        a.kmovd(k1, eax)?;
        a.vpbroadcastd(zmm1, ecx)?;
        a.vpbroadcastd(zmm2, edx)?;
        a.vpaddd(ymm3.k1(), ymm1, ymm2)?;
        a.vpaddd(ymm4.k1().z(), ymm1, ymm2)?;
        a.vmovdqu32(ptr(rdi).k1(), ymm3)
    });
    let mut start = with(
        &[(RAX, 0b0101), (RCX, 1), (RDX, 2), (RDI, 0x8000)],
        &[(0x8000, &[0xee; 64])],
    );
    for i in 0..8 {
        start.vec.set_lane(3, 8 * i, 8, Some(0x0707_0707_0707_0707));
    }
    let mut v = run(&code, start);
    let dword = |bytes: &[Option<u8>], i: usize| -> Option<u32> {
        let b: Option<Vec<u8>> = bytes[4 * i..4 * i + 4].iter().copied().collect();
        b.map(|b| u32::from_le_bytes(b.try_into().expect("4")))
    };
    let got3 = vector(&mut v, 4, 3);
    assert_eq!(dword(&got3, 0), Some(3), "selected: the sum");
    assert_eq!(dword(&got3, 1), Some(0x0707_0707), "unselected: merged");
    assert_eq!(dword(&got3, 2), Some(3));
    assert_eq!(dword(&got3, 8), Some(0), "above the vector length: zero");
    let got4 = vector(&mut v, 5, 4);
    assert_eq!(
        (dword(&got4, 0), dword(&got4, 1), dword(&got4, 3)),
        (Some(3), Some(0), Some(0))
    );
    let k = v.at(6).expect("p6");
    let mem = k.memory(0x8000, 16).expect("no conflict").expect("known");
    assert_eq!(&mem[..4], &3u32.to_le_bytes());
    assert_eq!(&mem[4..8], &[0xee; 4], "an unselected element is not stored");
    assert_eq!(&mem[8..12], &3u32.to_le_bytes());
    // The mask unknown: each element may or may not be written.
    let start = with(&[(RCX, 1), (RDX, 2), (RDI, 0x8000)], &[(0x8000, &[0xee; 64])]);
    let mut v = run(&code, start);
    assert_eq!(dword(&vector(&mut v, 5, 4), 0), None, "3 or 0");
    assert_eq!(dword(&vector(&mut v, 5, 4), 8), Some(0));
    assert_eq!(v.at(6).expect("p6").memory(0x8000, 4).expect("no conflict"), None);
    assert_eq!(
        v.at(6).expect("p6").memory(0x8020, 4).expect("no conflict"),
        Some(vec![0xee; 4]),
        "beyond the vector"
    );
}

#[test]
fn opmask_instructions_move_combine_shift_and_set_flags() {
    // kmovq k1, rax; kmovq k2, rcx; kord k3, k1, k2; kandnq k4, k1, k2; kshiftrq k5, k1, 4;
    // knotw k6, k1; kortestd k1, k2; kmovw edx, k6
    let code = assemble(|a| {
        a.kmovq(k1, rax)?;
        a.kmovq(k2, rcx)?;
        a.kord(k3, k1, k2)?;
        a.kandnq(k4, k1, k2)?;
        a.kshiftrq(k5, k1, 4)?;
        a.knotw(k6, k1)?;
        a.kortestd(k1, k2)?;
        a.kmovw(edx, k6)
    });
    let mut v = run(&code, with(&[(RAX, 0xff00_0000_00f0), (RCX, 0x0f)], &[]));
    assert_eq!(opmask(&mut v, 3, 3), Some(0xff), "32 bits: the upper ones are cleared");
    assert_eq!(opmask(&mut v, 4, 4), Some(0x0f));
    assert_eq!(opmask(&mut v, 5, 5), Some(0x0ff0_0000_000f));
    assert_eq!(opmask(&mut v, 6, 6), Some(0xff0f));
    let flags = v.at(7).expect("p7").eflags().expect("no conflict").expect("known");
    assert_eq!(flags & 0x41, 0, "kortestd: neither zero nor all ones");
    assert_eq!(reg(&mut v, 8, Reg::Gpr(2)), Some(0xff0f));
    // k1 | k2 all ones in 8 bits: CF.
    let code = assemble(|a| {
        a.kmovb(k1, eax)?;
        a.kmovb(k2, ecx)?;
        a.kortestb(k1, k2)
    });
    let mut v = run(&code, with(&[(RAX, 0xf0), (RCX, 0x0f)], &[]));
    let flags = v.at(3).expect("p3").eflags().expect("no conflict").expect("known");
    assert_eq!(flags & 0x8d5, 1, "CF only");
}

#[test]
fn broadcasts_compares_and_ternary_logic() {
    // vpcmpud k1, zmm0, dword bcst [rdi], 1 (below); vpternlogd zmm1, zmm2, zmm3, 0x96 (xor);
    // vptestnmb k2, ymm2, ymm2.
    let code = assemble(|a| {
        a.vpcmpud(k1, zmm0, dword_bcst(rdi), 1)?;
        a.vpternlogd(zmm1, zmm2, zmm3, 0x96)?;
        a.vptestnmb(k2, ymm2, ymm2)
    });
    let mut start = with(&[(RDI, 0x7000)], &[(0x7000, &5u32.to_le_bytes())]);
    for i in 0..16 {
        start.vec.set_lane(0, 4 * i, 4, Some(i as u64));
    }
    for i in 0..8 {
        start.vec.set_lane(1, 8 * i, 8, Some(0xf0f0_f0f0_f0f0_f0f0));
        start.vec.set_lane(2, 8 * i, 8, Some(0xff00_ff00_ff00_ff00));
        start.vec.set_lane(3, 8 * i, 8, Some(0x0ff0_0ff0_0ff0_0ff0));
    }
    let mut v = run(&code, start);
    assert_eq!(opmask(&mut v, 1, 1), Some(0b11111), "elements 0–4 are below 5");
    let got1 = vector(&mut v, 2, 1);
    let expect = (0xf0f0_f0f0_f0f0_f0f0u64 ^ 0xff00_ff00_ff00_ff00 ^ 0x0ff0_0ff0_0ff0_0ff0).to_le_bytes();
    assert_eq!(got1[..8].iter().map(|b| b.expect("known")).collect::<Vec<_>>(), expect);
    assert_eq!(opmask(&mut v, 3, 2), Some(0x5555_5555), "the zero bytes of ymm2");
}

#[test]
fn avx512_state_round_trips_through_xsavec_and_xrstor_and_vzeroupper_spares_zmm16_31() {
    // xrstor [rsp] after a logged xsavec of SSE, AVX, opmask, ZMM_Hi256 and Hi16_ZMM, with
    // every register changed in between; vzeroupper.
    let code = assemble(|a| {
        a.xsavec(ptr(rsp))?;
        a.vpxorq(zmm0, zmm0, zmm0)?;
        a.vpxorq(zmm17, zmm17, zmm17)?;
        a.kxorq(k3, k3, k3)?;
        a.xrstor(ptr(rsp))?;
        a.vzeroupper()
    });
    let (slices, ips) = {
        let s: Vec<&[u8]> = code.iter().map(Vec::as_slice).collect();
        super::super::tests_semantics::code_at_0x1000(&s)
    };
    let mut start = with(&[(RSP, 0x8000), (RAX, 0xe6), (RDX, 0)], &[(0x8000, &[0; 0x1000])]);
    for i in 0..8 {
        start
            .vec
            .set_lane(0, 8 * i, 8, Some(0x1111_1111_1111_1111 * (i as u64 + 1)));
        start.vec.set_lane(17, 8 * i, 8, Some(0x2222_2222_2222_2222));
    }
    start.vec.k.set(3, 0xabcd, u64::MAX);
    start.cpu = Cpu {
        xcr0: Some(0xe7),
        ..Cpu::default()
    };
    let results = vec![crate::recording::InsnResult {
        position: 0,
        ip: 0x1000,
        after: [("xstate_bv".to_string(), "0xe6".to_string())].into(),
    }];
    let mut v = Values::new(
        slices,
        Inputs {
            history: crate::timeline::Timeline::from_ips(ips),
            start,
            results,
            ..Inputs::default()
        },
    );
    let before = vector(&mut v, 0, 0);
    assert_eq!(vector(&mut v, 4, 0)[40], Some(0), "cleared");
    assert_eq!(vector(&mut v, 5, 0), before, "zmm0 back, all 64 bytes");
    assert_eq!(vector(&mut v, 5, 17)[63], Some(0x22), "zmm17 back");
    assert_eq!(opmask(&mut v, 5, 3), Some(0xabcd), "k3 back");
    let after = vector(&mut v, 6, 0);
    assert_eq!(after[..16], before[..16]);
    assert_eq!(after[16..], [Some(0); 48], "vzeroupper");
    assert_eq!(vector(&mut v, 6, 17)[63], Some(0x22), "zmm17 untouched");
}

#[test]
fn going_backwards_an_opmask_is_unknown_before_the_instruction_that_writes_it() {
    // vpcmpeqb k0, ymm16, [rdi]; kmovd eax, k0 — with the end state knowing k0.
    let code = assemble(|a| {
        a.vpcmpeqb(k0, ymm16, ptr(rdi))?;
        a.kmovd(eax, k0)
    });
    let slices: Vec<&[u8]> = code.iter().map(Vec::as_slice).collect();
    let (space, ips) = super::super::tests_semantics::code_at_0x1000(&slices);
    let mut end = State::unknown();
    end.vec.k.set(0, 0xffff_ffe0, u64::MAX);
    let mut start = State::unknown();
    start.vec.k.set(0, 0x1234, u64::MAX);
    start.regs.set(RDI, Some(0x7000));
    let mut v = Values::new(
        space,
        Inputs {
            history: crate::timeline::Timeline::from_ips(ips),
            start,
            end: Some(end),
            ..Inputs::default()
        },
    );
    assert_eq!(opmask(&mut v, 0, 0), Some(0x1234), "the start's");
    assert_eq!(opmask(&mut v, 2, 0), Some(0xffff_ffe0), "the end's");
    // Between them: the compare read unknown memory; the backward pass must not carry the
    // end's k0 to before the compare, where the start's holds (a conflict if it did).
    assert_eq!(opmask(&mut v, 1, 0), Some(0xffff_ffe0), "after the compare: the end's");
    assert_eq!(v.stats().conflicts, 0);
}

#[test]
fn evex_moves_from_zmm16_31_into_general_registers() {
    // wcsnlen_evex ends with vmovq rcx, xmm16; and vmovd eax, xmm17.
    let code = assemble(|a| {
        a.vmovdqu64(xmm16, ptr(rdi))?;
        a.vmovdqa64(xmm17, xmm16)?;
        a.vmovq(rcx, xmm16)?;
        a.vmovd(eax, xmm17)
    });
    let s: Vec<u8> = (1..=16).collect();
    let mut v = run(&code, with(&[(RDI, 0x7000), (RAX, u64::MAX)], &[(0x7000, &s)]));
    assert_eq!(reg(&mut v, 3, RCX), Some(0x0807_0605_0403_0201));
    assert_eq!(reg(&mut v, 4, RAX), Some(0x0403_0201), "a 32-bit write zero-extends");
}

/// A vector load takes its bytes at once when memory holds them all, and a store of known
/// bytes writes them at once: what reading and writing them a byte at a time gives, with the
/// same causes, across segment and page bounds, holes and the end of what is known.
#[test]
fn loads_and_stores_at_once_match_a_byte_at_a_time() {
    use super::super::memory::Memory;
    use super::super::why::{self, Cause};
    use super::{read, write, Value};
    let code = assemble(|a| {
        a.movdqu(xmm0, xmmword_ptr(rbx))?;
        a.vmovdqu(ymm1, ymmword_ptr(rbx + 1))?;
        a.vmovdqu64(zmm2, zmmword_ptr(rbx + 3))?;
        a.movdqu(xmmword_ptr(rbx), xmm0)?;
        a.vmovdqu(ymmword_ptr(rbx + 5), ymm1)?;
        a.vmovdqu64(zmmword_ptr(rbx + 7), zmm2)
    });
    let insns: Vec<_> = code[..6]
        .iter()
        .map(|b| Decoder::with_ip(64, b, 0x1000, DecoderOptions::NONE).decode())
        .collect();
    let space = crate::image::AddressSpace::new();
    let mut rng = crate::test_rng::Rng(0x2545_f491_4f6c_dd1d);
    let mut next = move || rng.next();
    let mut st = State::unknown();
    let bytes: Vec<u8> = (0..0x2000).map(|_| next() as u8).collect();
    st.mem.write(0x7000, &bytes);
    for k in 0..12 {
        why::begin(Cause::Syscall(k), 10 + u64::from(k));
        st.mem.forget(0x7000 + next() % 0x2000, 1 + next() % 40);
    }
    let described = |m: &Memory, a: u64, n: u64| -> Vec<_> {
        (a - 8..a + n + 8)
            .map(|b| (m.read_byte(b, &space), m.why(b, &space)))
            .collect()
    };
    let (mut whole, mut stores) = (0, 0);
    for _ in 0..3000 {
        let base = 0x6fc0 + next() % 0x2080;
        st.regs.set(super::super::reg::RBX, Some(base));
        for insn in &insns[..3] {
            let (len, a) = (insn.memory_size().size(), base + insn.memory_displacement64());
            why::begin(Cause::Inputs(insn.mnemonic()), 5);
            let v = read(&st, insn, 1, len, &space);
            let cause = why::current();
            why::begin(Cause::Inputs(insn.mnemonic()), 5);
            let mut known = 0u64;
            for b in 0..len {
                if let Some(byte) = st.mem.read_byte(a + b as u64, &space) {
                    assert_eq!(v.bytes[b], byte, "{insn} at {a:#x}");
                    known |= 1 << b;
                }
            }
            assert_eq!((v.known, cause), (known, why::current()), "{insn} at {a:#x}");
            whole += usize::from(known == super::mask(len));
        }
        for insn in &insns[3..] {
            let (len, a) = (insn.memory_size().size(), base + insn.memory_displacement64());
            let mut v = Value::default();
            v.bytes.iter_mut().for_each(|b| *b = next() as u8);
            v.known = if next() % 2 == 0 { u64::MAX } else { next() };
            let mut expected = st.clone();
            why::begin(Cause::Inputs(insn.mnemonic()), 6);
            for b in 0..len {
                let at = a + b as u64;
                match v.known & (1 << b) != 0 {
                    true => expected.mem.write(at, &[v.bytes[b]]),
                    false => expected.mem.forget(at, 1),
                }
            }
            let mut stored = st.clone();
            why::begin(Cause::Inputs(insn.mnemonic()), 6);
            write(&mut stored, insn, v, len);
            assert_eq!(
                described(&stored.mem, a, len as u64),
                described(&expected.mem, a, len as u64),
                "{insn} at {a:#x}"
            );
            stores += usize::from(v.known == u64::MAX);
            if next() % 8 == 0 {
                st = stored;
            }
        }
    }
    assert!(whole > 3000 && stores > 3000, "{whole} {stores}");
}

//! The engine on the instructions of `integer` and `vector`, on a signal delivered at a system
//! call's return, and on the causes it gives for what it does not know. Expected values are
//! what the SDM defines (and what `rtit check-values` confirmed against the CPU on
//! `tests/programs/semantics.c`).

use super::reg::{Reg, RAX, RCX, RDI, RDX, RSI, RSP};
use super::why::Cause;
use super::{Inputs, State, Values, Why};
use crate::image::{AddressSpace, Image};
use crate::syscall::SyscallRecord;

const RBX: Reg = Reg::Gpr(3);
const RBP: Reg = Reg::Gpr(5);

/// Code at 0x1000 run straight through, one position per instruction.
fn run(code: &[&[u8]], regs: &[(Reg, u64)], memory: &[(u64, &[u8])]) -> Values {
    run_with(code, regs, memory, None)
}

/// [`run`] on a processor whose XCR0 the recording gives.
fn run_with(code: &[&[u8]], regs: &[(Reg, u64)], memory: &[(u64, &[u8])], xcr0: Option<u64>) -> Values {
    run_on(
        code,
        regs,
        memory,
        super::Cpu {
            xcr0,
            ..Default::default()
        },
    )
}

/// Instructions laid out from 0x1000 in an image of their own, and the address of each: a
/// history that runs them once in order.
pub(super) fn code_at_0x1000(code: &[&[u8]]) -> (AddressSpace, Vec<u64>) {
    let mut bytes = Vec::new();
    let mut ips = Vec::new();
    for insn in code {
        ips.push(0x1000 + bytes.len() as u64);
        bytes.extend_from_slice(insn);
    }
    let mut space = AddressSpace::new();
    space.add(Image::from_raw("t", 0x1000, bytes)).expect("add");
    (space, ips)
}

/// [`run`] on a processor the recording describes.
fn run_on(code: &[&[u8]], regs: &[(Reg, u64)], memory: &[(u64, &[u8])], cpu: super::Cpu) -> Values {
    let (space, ips) = code_at_0x1000(code);
    let mut start = State::unknown();
    for &(r, v) in regs {
        start.regs.set(r, Some(v));
    }
    start.flags = super::flags::Flags::known(0x202);
    start.cpu = cpu;
    for &(a, b) in memory {
        start.mem.write(a, b);
    }
    Values::new(
        space,
        Inputs {
            history: crate::timeline::Timeline::from_ips(ips),
            start,
            ..Inputs::default()
        },
    )
}

fn reg(v: &mut Values, p: u64, r: Reg) -> Option<u64> {
    v.at(p).expect("a position").register(r).expect("no conflict")
}

#[test]
fn carries_wide_multiply_and_divide() {
    let mut v = run(
        &[
            &[0x48, 0x83, 0xf8, 0x01], // cmp rax, 1        (rax = 0: borrow, CF = 1)
            &[0x48, 0x83, 0xda, 0xff], // sbb rdx, -1       rdx + 1 - CF = rdx
            &[0x48, 0x19, 0xc9],       // sbb rcx, rcx      -CF: 5 - (2^64 - 1) - 1 borrowed
            &[0x48, 0xf7, 0xe3],       // mul rbx           rdx:rax = rax * rbx
            &[0x48, 0xf7, 0xf6],       // div rsi
            &[0x90],
        ],
        &[(RAX, 0), (RDX, 5), (RCX, 77), (RBX, 3), (RSI, 7)],
        &[],
    );
    assert_eq!(reg(&mut v, 2, RDX), Some(5), "5 + 1 - 1");
    assert_eq!(reg(&mut v, 3, RCX), Some(u64::MAX), "sbb r, r with CF set");
    // rax = 0 so far; give mul something: start again with other values.
    assert_eq!(reg(&mut v, 4, RAX), Some(0));
    assert_eq!(reg(&mut v, 4, RDX), Some(0));
    let mut v = run(
        &[&[0x48, 0xf7, 0xe3], &[0x48, 0xf7, 0xf6], &[0x90]],
        &[(RAX, u64::MAX), (RBX, 3), (RSI, 7)],
        &[],
    );
    // u64::MAX * 3 = 2 * 2^64 + (2^64 - 3).
    assert_eq!(reg(&mut v, 1, RAX), Some(u64::MAX - 2));
    assert_eq!(reg(&mut v, 1, RDX), Some(2));
    let n = (2u128 << 64) + u128::from(u64::MAX - 2);
    assert_eq!(reg(&mut v, 2, RAX), Some((n / 7) as u64));
    assert_eq!(reg(&mut v, 2, RDX), Some((n % 7) as u64));
}

#[test]
fn a_division_by_zero_is_left_to_the_generic_rule() {
    let mut v = run(
        &[&[0x48, 0xf7, 0xf6], &[0x90]], // div rsi with rsi = 0 faults
        &[(RAX, 10), (RDX, 0), (RSI, 0)],
        &[],
    );
    assert_eq!(reg(&mut v, 1, RAX), None);
    assert_eq!(
        v.at(1).expect("p1").why_register(RAX).0.map(|w| w.cause),
        Some(Cause::Unmodelled(iced_x86::Mnemonic::Div))
    );
}

#[test]
fn bit_scans_know_only_what_every_processor_agrees_on() {
    let code: [&[u8]; 5] = [
        &[0xf3, 0x48, 0x0f, 0xbc, 0xc2], // tzcnt rax, rdx
        &[0x48, 0x0f, 0xbd, 0xca],       // bsr rcx, rdx
        &[0xf3, 0x48, 0x0f, 0xbc, 0xde], // tzcnt rbx, rsi (rsi = 0)
        &[0x48, 0x0f, 0xbc, 0xfe],       // bsf rdi, rsi (rsi = 0)
        &[0x90],
    ];
    let mut v = run(&code, &[(RDX, 0x50), (RSI, 0), (RBX, 1), (RDI, 2)], &[]);
    assert_eq!(reg(&mut v, 1, RAX), Some(4));
    assert_eq!(reg(&mut v, 2, RCX), Some(6));
    assert_eq!(
        reg(&mut v, 3, RBX),
        None,
        "tzcnt of zero: 64, or bsf's undefined result"
    );
    assert_eq!(reg(&mut v, 4, RDI), None, "bsf of zero: undefined");
}

#[test]
fn rotates_byte_swaps_xadd_and_cmpxchg() {
    let code: [&[u8]; 6] = [
        &[0x48, 0xc1, 0xc0, 0x08], // rol rax, 8
        &[0x48, 0x0f, 0xcb],       // bswap rbx
        &[0x48, 0x0f, 0xc1, 0x0f], // xadd [rdi], rcx
        &[0x48, 0x0f, 0xb1, 0x17], // cmpxchg [rdi], rdx (rax != [rdi]: rax = [rdi])
        &[0x48, 0x0f, 0xb1, 0x17], // cmpxchg [rdi], rdx (now equal: [rdi] = rdx)
        &[0x90],
    ];
    let mut v = run(
        &code,
        &[
            (RAX, 0x1100_0000_0000_0022),
            (RBX, 0x0102_0304_0506_0708),
            (RCX, 5),
            (RDX, 99),
            (RDI, 0x7000),
        ],
        &[(0x7000, &40u64.to_le_bytes())],
    );
    assert_eq!(reg(&mut v, 1, RAX), Some(0x0000_0000_0000_2211));
    assert_eq!(reg(&mut v, 2, RBX), Some(0x0807_0605_0403_0201));
    assert_eq!(reg(&mut v, 3, RCX), Some(40), "xadd returns the old value");
    assert_eq!(
        v.at(3).expect("p3").memory(0x7000, 8),
        Ok(Some(45u64.to_le_bytes().to_vec()))
    );
    assert_eq!(reg(&mut v, 4, RAX), Some(45), "not equal: the accumulator takes memory");
    assert_eq!(
        v.at(5).expect("p5").memory(0x7000, 8),
        Ok(Some(99u64.to_le_bytes().to_vec())),
        "equal: memory takes the source"
    );
}

#[test]
fn sse2_string_idiom_gives_the_index_of_the_first_zero_byte() {
    // strlen's core: pxor xmm0, xmm0; movdqu xmm1, [rdi]; pcmpeqb xmm1, xmm0;
    // pmovmskb eax, xmm1; tzcnt eax, eax.
    let code: [&[u8]; 6] = [
        &[0x66, 0x0f, 0xef, 0xc0], // pxor xmm0, xmm0
        &[0xf3, 0x0f, 0x6f, 0x0f], // movdqu xmm1, [rdi]
        &[0x66, 0x0f, 0x74, 0xc8], // pcmpeqb xmm1, xmm0
        &[0x66, 0x0f, 0xd7, 0xc1], // pmovmskb eax, xmm1
        &[0xf3, 0x0f, 0xbc, 0xc0], // tzcnt eax, eax
        &[0x90],
    ];
    let s = b"hello, world\0abc";
    let mut v = run(&code, &[(RDI, 0x7000), (RAX, 0x1234_5678_9abc_def0)], &[(0x7000, s)]);
    assert_eq!(reg(&mut v, 4, RAX), Some(1 << 12));
    assert_eq!(reg(&mut v, 5, RAX), Some(12));
    // A byte past the terminator unknown (strlen reads past the end of the string): the mask
    // is partly known, and its lowest set bit, the length, is known.
    let mut v = run(&code, &[(RDI, 0x7000)], &[(0x7000, &s[..15])]);
    assert_eq!(reg(&mut v, 4, RAX), None, "the mask as a whole");
    assert_eq!(reg(&mut v, 5, RAX), Some(12));
    // A byte before it unknown: the length is not known.
    let mut v = run(&code, &[(RDI, 0x7000)], &[(0x7000, &s[..5]), (0x7006, &s[6..])]);
    assert_eq!(reg(&mut v, 5, RAX), None);
}

#[test]
fn partly_known_masks_go_through_or_shifts_and_test() {
    // pmovmskb of a half-known vector, shifted, or-ed with a known zero, tested, then bsf.
    let code: [&[u8]; 7] = [
        &[0xf3, 0x0f, 0x6f, 0x07], // movdqu xmm0, [rdi]
        &[0x66, 0x0f, 0xd7, 0xc0], // pmovmskb eax, xmm0
        &[0x48, 0xc1, 0xe0, 0x04], // shl rax, 4
        &[0x48, 0x09, 0xd8],       // or rax, rbx
        &[0x48, 0x85, 0xc0],       // test rax, rax
        &[0x48, 0x0f, 0xbc, 0xc8], // bsf rcx, rax
        &[0x90],
    ];
    // Byte 2 has its top bit set; bytes 0-3 known, the rest unknown.
    let mut v = run(&code, &[(RDI, 0x7000), (RBX, 0)], &[(0x7000, &[0, 1, 0x80, 2])]);
    assert_eq!(reg(&mut v, 2, RAX), None);
    assert_eq!(
        v.at(5).expect("p5").eflags().expect("no conflict"),
        None,
        "not every flag is known"
    );
    assert_eq!(reg(&mut v, 6, RCX), Some(6), "bit 2 shifted by 4");
}

#[test]
fn vector_moves_and_shuffles_round_trip_through_memory() {
    let code: [&[u8]; 7] = [
        &[0x66, 0x48, 0x0f, 0x6e, 0xc3], // movq xmm0, rbx
        &[0x66, 0x0f, 0x70, 0xc8, 0x00], // pshufd xmm1, xmm0, 0 (broadcast the low dword)
        &[0x66, 0x0f, 0x73, 0xd9, 0x04], // psrldq xmm1, 4
        &[0xf3, 0x0f, 0x7f, 0x0f],       // movdqu [rdi], xmm1
        &[0x66, 0x48, 0x0f, 0x7e, 0xc9], // movq rcx, xmm1
        &[0xc5, 0xf8, 0x77],             // vzeroupper
        &[0x90],
    ];
    let mut v = run(
        &code,
        &[(RBX, 0xaaaa_bbbb_1122_3344), (RDI, 0x7000)],
        &[(0x7000, &[0xff; 16])],
    );
    let mut expect = Vec::new();
    for _ in 0..3 {
        expect.extend_from_slice(&0x1122_3344u32.to_le_bytes());
    }
    expect.extend_from_slice(&[0; 4]);
    assert_eq!(v.at(4).expect("p4").memory(0x7000, 16), Ok(Some(expect)));
    assert_eq!(reg(&mut v, 5, RCX), Some(0x1122_3344_1122_3344));
}

#[test]
fn a_signal_at_a_system_call_return_makes_the_state_unknown() {
    // syscall at 0x1000, then the handler at 0x2000 (not the instruction after the call).
    let mut space = AddressSpace::new();
    space
        .add(Image::from_raw("t", 0x1000, vec![0x0f, 0x05, 0x90]))
        .expect("add");
    space.add(Image::from_raw("h", 0x2000, vec![0x90, 0x90])).expect("add");
    let mut start = State::unknown();
    for (r, x) in [(RAX, 62), (RSP, 0x8000), (RDI, 1), (RSI, 10), (RBP, 3)] {
        start.regs.set(r, Some(x));
    }
    start.mem.write(0x7f00, &[1; 0x100]);
    let record = SyscallRecord {
        position: 0,
        ip: 0x1000,
        nr: 62,
        before: Default::default(),
        after: [("rax".to_string(), "0x0".to_string())].into_iter().collect(),
        writes: vec![],
        complete: true,
        unlogged: Vec::new(),
    };
    let mut v = Values::new(
        space,
        Inputs {
            history: crate::timeline::Timeline::from_ips(vec![0x1000, 0x2000, 0x2001]),
            start,
            syscalls: vec![record],
            ..Inputs::default()
        },
    );
    let k = v.at(1).expect("p1");
    for r in [RAX, RSP, RDI, RSI, RBP] {
        assert_eq!(k.register(r), Ok(None), "{r:?} at the handler");
        assert_eq!(
            k.why_register(r).0,
            Some(Why {
                cause: Cause::Signal,
                position: 0
            })
        );
    }
    assert_eq!(k.memory(0x7f80, 1), Ok(None), "the kernel wrote a frame somewhere");
    assert_eq!(reg(&mut v, 0, RSP), Some(0x8000), "before the call all is known");
}

#[test]
fn unknowns_carry_the_cause_where_they_were_lost() {
    let code: [&[u8]; 4] = [
        &[0x0f, 0xa2],       // cpuid: rax, rbx, rcx, rdx unknown
        &[0x48, 0x89, 0xc6], // mov rsi, rax: unknown for cpuid's reason
        &[0x48, 0x89, 0x06], // mov [rsi], rax: a store through an unknown address
        &[0x90],
    ];
    let mut v = run(&code, &[(RAX, 1), (RSP, 0x8000)], &[(0x7000, &[5; 8])]);
    let cpuid = Why {
        cause: Cause::Unmodelled(iced_x86::Mnemonic::Cpuid),
        position: 0,
    };
    let k = v.at(2).expect("p2");
    assert_eq!(k.why_register(RSI).0, Some(cpuid), "carried by the move");
    assert_eq!(k.why_register(RSP).0, None, "known");
    let k = v.at(3).expect("p3");
    assert_eq!(
        k.why_memory(0x7000).0,
        Some(Why {
            cause: Cause::UnknownAddress(iced_x86::Mnemonic::Mov),
            position: 2
        })
    );
    assert_eq!(
        k.why_memory(0x9000).0,
        Some(Why {
            cause: Cause::UnknownAddress(iced_x86::Mnemonic::Mov),
            position: 2
        })
    );
}

#[test]
fn xsavec_forgets_its_compacted_area_and_no_more() {
    // mov eax, 0xee; xor edx, edx; xsavec [rdi]: components 1-3 and 5-7 requested; the
    // compacted area is at most 576 + 256 + 64 + 64 + 512 + 1024 = 2496 bytes.
    let code: [&[u8]; 4] = [&[0xb8, 0xee, 0, 0, 0], &[0x31, 0xd2], &[0x0f, 0xc7, 0x27], &[0x90]];
    let area = vec![7u8; 4096];
    let mut v = run(&code, &[(RDI, 0x10000)], &[(0x10000, &area)]);
    let k = v.at(3).expect("p3");
    assert_eq!(k.memory(0x10000 + 2495, 1), Ok(None));
    assert_eq!(k.memory(0x10000 + 2496, 1), Ok(Some(vec![7])));
    // With XCR0 known (x87, SSE, AVX, opmask, ZMM: no MPX), 64 bytes fewer.
    let mut v = run_with(&code, &[(RDI, 0x10000)], &[(0x10000, &area)], Some(0xe7));
    let k = v.at(3).expect("p3");
    assert_eq!(k.memory(0x10000 + 2431, 1), Ok(None));
    assert_eq!(k.memory(0x10000 + 2432, 1), Ok(Some(vec![7])));
}

#[test]
fn xsave_writes_only_what_xcr0_enables() {
    // mov eax, 0xee; xor edx, edx; xsave [rdi]: with XCR0 = x87, SSE, AVX (no AVX-512),
    // the standard area ends with AVX at 832 bytes, not with ZMM_Hi256 at 2688: the
    // caller's frame above the area (_dl_runtime_resolve_xsave's) stays known.
    let code: [&[u8]; 4] = [&[0xb8, 0xee, 0, 0, 0], &[0x31, 0xd2], &[0x0f, 0xae, 0x27], &[0x90]];
    let area = vec![7u8; 4096];
    let mut v = run_with(&code, &[(RDI, 0x10000)], &[(0x10000, &area)], Some(0x7));
    let k = v.at(3).expect("p3");
    assert_eq!(k.memory(0x10000 + 831, 1), Ok(None));
    assert_eq!(k.memory(0x10000 + 832, 1), Ok(Some(vec![7])));
    // XCR0 unknown: every requested component may be written, up to where the recording's
    // CPU puts the last: Intel's Hi16_ZMM ends at 2688, AMD Zen 4's at 2432.
    let intel = super::Cpu {
        xsave: Some(crate::recording::XsaveLayout::intel()),
        ..Default::default()
    };
    let mut v = run_on(&code, &[(RDI, 0x10000)], &[(0x10000, &area)], intel);
    let k = v.at(3).expect("p3");
    assert_eq!(k.memory(0x10000 + 2687, 1), Ok(None));
    assert_eq!(k.memory(0x10000 + 2688, 1), Ok(Some(vec![7])));
    let zen4 = super::Cpu {
        xsave: Some(zen4_layout()),
        ..Default::default()
    };
    let mut v = run_on(&code, &[(RDI, 0x10000)], &[(0x10000, &area)], zen4);
    let k = v.at(3).expect("p3");
    assert_eq!(k.memory(0x10000 + 2431, 1), Ok(None));
    assert_eq!(k.memory(0x10000 + 2432, 1), Ok(Some(vec![7])));
    // A layout the recording does not give: anything up to 16 KiB may be written.
    let mut v = run(&code, &[(RDI, 0x10000)], &[(0x10000, &area)]);
    let k = v.at(3).expect("p3");
    assert_eq!(k.memory(0x10000 + 4095, 1), Ok(None));
}

/// What CPUID leaf 0DH says on an AMD EPYC of the Zen 4 generation.
pub(super) fn zen4_layout() -> crate::recording::XsaveLayout {
    crate::recording::xsave_layout::zen4()
}

#[test]
fn single_string_instructions_move_one_element_and_step_the_pointers() {
    let code: [&[u8]; 4] = [
        &[0x48, 0xa5], // movsq [rdi], [rsi]
        &[0xaa],       // stosb [rdi], al
        &[0xad],       // lodsd eax, [rsi]
        &[0x90],
    ];
    let src = 0x1122_3344_5566_7788u64.to_le_bytes();
    let mut v = run(
        &code,
        &[(RSI, 0x7000), (RDI, 0x8000), (RAX, 0xffff_ffff_ffff_ff5a)],
        &[(0x7000, &src), (0x7008, &[1, 2, 3, 4]), (0x8000, &[0; 16])],
    );
    assert_eq!(v.at(1).expect("p1").memory(0x8000, 8), Ok(Some(src.to_vec())));
    assert_eq!(reg(&mut v, 1, RSI), Some(0x7008));
    assert_eq!(reg(&mut v, 1, RDI), Some(0x8008));
    assert_eq!(v.at(2).expect("p2").memory(0x8008, 2), Ok(Some(vec![0x5a, 0])));
    assert_eq!(reg(&mut v, 2, RDI), Some(0x8009));
    assert_eq!(reg(&mut v, 3, RAX), Some(0x0403_0201), "lodsd zero-extends into rax");
    assert_eq!(reg(&mut v, 3, RSI), Some(0x700c));
}

#[test]
fn scalar_floats_are_known_where_no_rounding_mode_can_change_them() {
    let code: [&[u8]; 7] = [
        &[0xf3, 0x0f, 0x2a, 0xc0],       // cvtsi2ss xmm0, eax
        &[0xf3, 0x48, 0x0f, 0x2a, 0xcb], // cvtsi2ss xmm1, rbx
        &[0xf3, 0x0f, 0x59, 0xc1],       // mulss xmm0, xmm1
        &[0xf3, 0x0f, 0x5e, 0xc1],       // divss xmm0, xmm1
        &[0xf3, 0x48, 0x0f, 0x2c, 0xc8], // cvttss2si rcx, xmm0
        &[0x0f, 0x2f, 0xc1],             // comiss xmm0, xmm1
        &[0x90],
    ];
    let mut v = run(&code, &[(RAX, 6), (RBX, 4)], &[]);
    assert_eq!(reg(&mut v, 5, RCX), Some(6), "6 * 4 / 4");
    let k = v.at(6).expect("p6");
    assert_eq!(
        k.eflags()
            .expect("no conflict")
            .map(|f| f & (super::flags::ZF | super::flags::CF)),
        Some(0),
        "6 > 4: ZF and CF clear"
    );
    // (2^24 - 1) * 3 needs 26 significant bits: its rounding depends on MXCSR.
    let mut v = run(&code, &[(RAX, (1 << 24) - 1), (RBX, 3)], &[]);
    assert_eq!(reg(&mut v, 5, RCX), None);
    // 2^24 + 1 has no exact single.
    let mut v = run(&code, &[(RAX, 1), (RBX, (1 << 24) + 1)], &[]);
    assert_eq!(reg(&mut v, 5, RCX), None);
    // Truncation toward zero, and the integer indefinite value out of range.
    let mut v = run(&code, &[(RAX, (-7i64) as u64), (RBX, 2)], &[]);
    assert_eq!(reg(&mut v, 5, RCX), Some((-7i64) as u64), "-7 * 2 / 2");
}

#[test]
fn bmi2_shifts_carry_partly_known_masks() {
    let code: [&[u8]; 5] = [
        &[0xf3, 0x0f, 0x6f, 0x07],       // movdqu xmm0, [rdi]
        &[0x66, 0x0f, 0xd7, 0xc0],       // pmovmskb eax, xmm0
        &[0xc4, 0xe2, 0x73, 0xf7, 0xc0], // shrx eax, eax, ecx
        &[0xf3, 0x0f, 0xbc, 0xd0],       // tzcnt edx, eax
        &[0x90],
    ];
    let mut v = run(&code, &[(RDI, 0x7000), (RCX, 1)], &[(0x7000, &[0, 1, 0x80, 2])]);
    assert_eq!(reg(&mut v, 4, RDX), Some(1), "bit 2 shifted right by 1");
}

#[test]
fn an_arithmetic_shift_of_an_unknown_sign_keeps_the_bits_below_it() {
    // strlen's 64-byte step: four masks or-ed into one register, `sar` by the misalignment.
    let code: [&[u8]; 6] = [
        &[0xf3, 0x0f, 0x6f, 0x07], // movdqu xmm0, [rdi]
        &[0x66, 0x0f, 0xd7, 0xc0], // pmovmskb eax, xmm0
        &[0x48, 0xc1, 0xe0, 0x30], // shl rax, 48
        &[0x48, 0xc1, 0xf8, 0x30], // sar rax, 48: the sign (bit 15 of the mask) unknown
        &[0x48, 0x0f, 0xbc, 0xc8], // bsf rcx, rax
        &[0x90],
    ];
    let mut v = run(&code, &[(RDI, 0x7000)], &[(0x7000, &[0, 1, 0x80, 2])]);
    assert_eq!(reg(&mut v, 4, RAX), None);
    assert_eq!(reg(&mut v, 5, RCX), Some(2));
}

#[test]
fn a_registered_rseq_area_is_never_known() {
    // syscall (rseq registering 32 bytes at 0x7000, logged); nop.
    let mut space = AddressSpace::new();
    space
        .add(Image::from_raw("t", 0x1000, vec![0x0f, 0x05, 0x90]))
        .expect("add");
    let mut start = State::unknown();
    for (r, x) in [(RAX, 334), (RDI, 0x7000), (RSI, 32), (RDX, 0)] {
        start.regs.set(r, Some(x));
    }
    start.mem.write(0x7000, &[0; 64]);
    let record = SyscallRecord {
        position: 0,
        ip: 0x1000,
        nr: 334,
        before: Default::default(),
        after: [("rax".to_string(), "0x0".to_string())].into_iter().collect(),
        writes: vec![crate::syscall::MemoryWrite::new(0x7000, &[0xff; 32])],
        complete: true,
        unlogged: Vec::new(),
    };
    let mut v = Values::new(
        space,
        Inputs {
            history: crate::timeline::Timeline::from_ips(vec![0x1000, 0x1002]),
            start,
            syscalls: vec![record],
            ..Inputs::default()
        },
    );
    let k = v.at(1).expect("p1");
    assert_eq!(k.memory(0x7004, 4), Ok(None), "cpu_id changes when the thread migrates");
    assert_eq!(k.why_memory(0x7004).0.map(|w| w.cause), Some(Cause::KernelUpdated));
    assert_eq!(k.memory(0x7020, 8), Ok(Some(vec![0; 8])), "past the area");
}

#[test]
fn a_logged_signal_delivery_keeps_memory_when_only_the_kernel_ran() {
    // mov [rdi], rax at 0x1000; a signal interrupts after it; the handler at 0x2000.
    let mut space = AddressSpace::new();
    space
        .add(Image::from_raw("t", 0x1000, vec![0x48, 0x89, 0x07]))
        .expect("add");
    space.add(Image::from_raw("h", 0x2000, vec![0x90, 0x90])).expect("add");
    let values = |only_kernel: bool| {
        let mut start = State::unknown();
        for (r, x) in [(RAX, 0x55), (RDI, 0x7000), (RSP, 0x9100)] {
            start.regs.set(r, Some(x));
        }
        start.mem.write(0x7000, &[0; 16]);
        let entry = crate::recording::SignalEntry {
            position: 1,
            ip: 0x2000,
            registers: [("rsp", "0x8f00"), ("rdi", "0xa")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            frame: crate::syscall::MemoryWrite::new(0x8f00, &[0xab; 8]),
            only_kernel,
            switch: None,
        };
        Values::new(
            space.clone(),
            Inputs {
                history: crate::timeline::Timeline::from_ips(vec![0x1000, 0x2000, 0x2001]),
                hard_barriers: vec![1],
                start,
                signals: vec![entry],
                ..Inputs::default()
            },
        )
    };
    let mut v = values(true);
    let k = v.at(1).expect("p1");
    assert_eq!(k.register(RSP), Ok(Some(0x8f00)), "from the log");
    assert_eq!(k.register(RAX), Ok(None), "not in the log");
    assert_eq!(k.memory(0x7000, 1), Ok(Some(vec![0x55])), "the store before the signal");
    assert_eq!(k.memory(0x8f00, 1), Ok(Some(vec![0xab])), "the frame");
    // Untraced user code may have run before the delivery: all memory is unknown.
    let mut v = values(false);
    let k = v.at(1).expect("p1");
    assert_eq!(k.register(RSP), Ok(Some(0x8f00)));
    assert_eq!(k.memory(0x7000, 1), Ok(None));
}

#[test]
fn going_back_across_a_switch_keeps_memory_and_the_outgoing_threads_registers() {
    // Thread 1: mov [rdi], rax at 0x1000, then nop; nop at 0x1003. Thread 2: nop; nop at
    // 0x2000. Thread 1 runs one instruction, thread 2 two, then thread 1 again.
    let mut space = AddressSpace::new();
    space
        .add(Image::from_raw("one", 0x1000, vec![0x48, 0x89, 0x07, 0x90, 0x90]))
        .expect("add");
    space
        .add(Image::from_raw("two", 0x2000, vec![0x90, 0x90, 0x90]))
        .expect("add");
    let named = |pairs: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let entry = |position, ip, from, to, registers| crate::recording::SignalEntry {
        position,
        ip,
        registers,
        frame: crate::syscall::MemoryWrite::new(0, &[]),
        only_kernel: true,
        switch: Some(crate::recording::ThreadSwitch { from, to }),
    };
    let one = named(&[("rax", "0x55"), ("rdi", "0x7000"), ("rsp", "0x9000")]);
    let mut end = State::unknown();
    for (r, x) in [(RAX, 0x55), (RDI, 0x7000), (RSP, 0x9000)] {
        end.regs.set(r, Some(x));
    }
    end.mem.write(0x7000, &[0x55, 0, 0, 0, 0, 0, 0, 0]);
    let mut v = Values::new(
        space,
        Inputs {
            history: crate::timeline::Timeline::from_ips(vec![0x1000, 0x2000, 0x2001, 0x1003, 0x1004]),
            hard_barriers: vec![1, 3],
            start: State::unknown(),
            end: Some(end),
            signals: vec![
                entry(1, 0x2000, 1, 2, named(&[("rsp", "0x8000")])),
                entry(3, 0x1003, 2, 1, one),
            ],
            ..Inputs::default()
        },
    );
    // Only the backward walk from the end knows these: across thread 2's stretch, memory
    // stays what it was, and thread 1's registers before the switch are those it resumes with.
    let k = v.at(2).expect("p2");
    assert_eq!(k.memory(0x7000, 1), Ok(Some(vec![0x55])), "thread 1's store, kept");
    assert_eq!(k.register(RAX), Ok(None), "thread 2's rax is not logged");
    let k = v.at(0).expect("p0");
    assert_eq!(k.register(RDI), Ok(Some(0x7000)), "thread 1's, from where it resumes");
    assert_eq!(k.register(RAX), Ok(Some(0x55)));
    assert_eq!(k.memory(0x7000, 1), Ok(None), "before the store");
}

#[test]
fn lzcnt_and_tzcnt_follow_what_the_cpu_runs_them_as() {
    // lzcnt rax, rbx; tzcnt rcx, rdx (rdx = 0); nop.
    let code: [&[u8]; 3] = [
        &[0xf3, 0x48, 0x0f, 0xbd, 0xc3],
        &[0xf3, 0x48, 0x0f, 0xbc, 0xca],
        &[0x90],
    ];
    let regs = [(RAX, 5), (RBX, 0x10), (RCX, 7), (RDX, 0)];
    let cpu = |lzcnt, bmi1| {
        let cpu = super::Cpu {
            lzcnt,
            bmi1,
            ..Default::default()
        };
        let mut v = run_on(&code, &regs, &[], cpu);
        (reg(&mut v, 2, RAX), reg(&mut v, 2, RCX))
    };
    assert_eq!(cpu(Some(true), Some(true)), (Some(59), Some(64)), "LZCNT and TZCNT");
    assert_eq!(
        cpu(Some(false), Some(false)),
        (Some(4), None),
        "bsr; bsf of zero leaves rcx"
    );
    assert_eq!(cpu(None, None), (None, None), "not known which");
}

#[test]
fn a_logic_op_clears_af_only_where_the_recording_says_the_cpu_does() {
    // add eax, 1 (0xf + 1: AF = 1); and eax, ebx (0x10 & 0x1f: an adder would set AF); nop.
    let code: [&[u8]; 3] = [&[0x83, 0xc0, 0x01], &[0x21, 0xd8], &[0x90]];
    let eflags = |logic_clears_af| {
        let cpu = super::Cpu {
            logic_clears_af,
            ..Default::default()
        };
        let mut v = run_on(&code, &[(RAX, 0xf), (RBX, 0x1f)], &[], cpu);
        let after_add = v.at(1).expect("p1").eflags().expect("no conflict");
        let after_and = v.at(2).expect("p2").eflags().expect("no conflict");
        (after_add, after_and)
    };
    // After the add: AF, IF and bit 1; after the and (0x10): IF, bit 1, PF clear (one bit).
    assert_eq!(eflags(Some(true)), (Some(0x212), Some(0x202)));
    assert_eq!(eflags(Some(false)), (Some(0x212), None), "another CPU: AF undefined");
    assert_eq!(eflags(None), (Some(0x212), None), "not recorded: AF undefined");
}

//! The engine on XSAVE and XRSTOR: the vector registers saved and loaded back when
//! XSTATE_BV is known (QEMU marks every requested component in use; a cleared bit means
//! the component is initialised), unknown where it is not; and MXCSR's sticky flags
//! backwards.

use super::mxcsr::Mxcsr;
use super::reg::{Reg, RAX, RDX, RSP};
use super::{Cpu, Inputs, State, Values};

/// Code at 0x1000 from a state with `regs`, xmm0 = 1.0 and ymm0's upper half 2.0, writable
/// zeroed memory at 0x8000, and the CPU `cpu`; `end` is the state after the last one.
fn run(code: &[&[u8]], regs: &[(Reg, u64)], cpu: Cpu, end: Option<State>) -> Values {
    let (space, ips) = super::tests_semantics::code_at_0x1000(code);
    let mut start = State::unknown();
    for &(r, v) in regs {
        start.regs.set(r, Some(v));
    }
    start.vec.set_lane(0, 0, 8, Some(1f64.to_bits()));
    start.vec.set_lane(0, 8, 8, Some(0));
    start.vec.set_lane(0, 16, 8, Some(2f64.to_bits()));
    start.vec.set_lane(0, 24, 8, Some(0));
    start.mxcsr = Mxcsr::known(0x1f80);
    start.mem.write(0x8000, &[0; 0x1000]);
    start.cpu = cpu;
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

/// xsave [rsp]; vpxor ymm0, ymm0, ymm0; xrstor [rsp]; nop — with `between` after the save.
fn save_clear_restore(between: &[u8]) -> Vec<&[u8]> {
    let mut code: Vec<&[u8]> = vec![&[0x0f, 0xae, 0x24, 0x24]];
    if !between.is_empty() {
        code.push(between);
    }
    code.extend([
        &[0xc5, 0xfd, 0xef, 0xc0][..], // vpxor ymm0, ymm0, ymm0
        &[0x0f, 0xae, 0x2c, 0x24],     // xrstor [rsp]
        &[0x90],
    ]);
    code
}

const SSE_AVX: [(Reg, u64); 3] = [(RSP, 0x8000), (RAX, 6), (RDX, 0)];

fn qemu() -> Cpu {
    Cpu {
        xcr0: Some(7),
        xsave_all_in_use: true,
        ..Cpu::default()
    }
}

fn ymm0(v: &mut Values, p: u64) -> [Option<u8>; 64] {
    v.at(p).expect("a position").vector(0).expect("no conflict")
}

fn lane(bytes: &[Option<u8>]) -> Option<u64> {
    let b: Option<Vec<u8>> = bytes.iter().copied().collect();
    b.map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

#[test]
fn xrstor_loads_back_what_xsave_stored_when_every_component_is_in_use() {
    let code = save_clear_restore(&[]);
    let mut v = run(&code, &SSE_AVX, qemu(), None);
    let after = ymm0(&mut v, 3);
    assert_eq!(lane(&after[..8]), Some(1f64.to_bits()), "xmm0 back");
    assert_eq!(lane(&after[16..24]), Some(2f64.to_bits()), "ymm0's upper half back");
    // The save area holds them, and XSTATE_BV says SSE and AVX are in use.
    let k = v.at(1).expect("p1");
    assert_eq!(
        k.memory(0x8000 + 160, 8),
        Ok(Some(1f64.to_bits().to_le_bytes().to_vec()))
    );
    assert_eq!(
        k.memory(0x8000 + 576, 8),
        Ok(Some(2f64.to_bits().to_le_bytes().to_vec()))
    );
    assert_eq!(k.memory(0x8000 + 24, 4), Ok(Some(0x1f80u32.to_le_bytes().to_vec())));
    // XCOMP_BV is not written (glibc zeroes it): still the zero it was.
    assert_eq!(k.memory(0x8000 + 520, 8), Ok(Some(vec![0; 8])));
}

#[test]
fn on_a_real_cpu_xinuse_decides_so_the_restored_registers_are_unknown_unless_zero() {
    let code = save_clear_restore(&[]);
    let mut v = run(
        &code,
        &SSE_AVX,
        Cpu {
            xcr0: Some(7),
            ..Cpu::default()
        },
        None,
    );
    let after = ymm0(&mut v, 3);
    // Loaded (1.0) or initialised (0): unknown; the zero upper halves of xmm0 are known.
    assert_eq!(lane(&after[..8]), None);
    assert_eq!(lane(&after[8..16]), Some(0));
    // XSTATE_BV cleared after the save: XRSTOR initialises the components, so zero.
    let code = save_clear_restore(&[0xc6, 0x84, 0x24, 0x00, 0x02, 0x00, 0x00, 0x00]); // mov byte [rsp+512], 0
    let mut v = run(
        &code,
        &SSE_AVX,
        Cpu {
            xcr0: Some(7),
            ..Cpu::default()
        },
        None,
    );
    let after = ymm0(&mut v, 4);
    assert_eq!(lane(&after[..8]), Some(0));
    assert_eq!(lane(&after[16..24]), Some(0));
}

#[test]
fn a_restore_of_sse_alone_keeps_the_upper_halves_and_unknown_requests_forget() {
    // eax = 2: SSE only; ymm0's upper half is the vpxor's zero, xmm0 the saved 1.0.
    let code = save_clear_restore(&[]);
    let mut v = run(&code, &[(RSP, 0x8000), (RAX, 2), (RDX, 0)], qemu(), None);
    let after = ymm0(&mut v, 3);
    assert_eq!(lane(&after[..8]), Some(1f64.to_bits()));
    assert_eq!(lane(&after[16..24]), Some(0));
    // EDX unknown: what is requested is not known, nothing is known after the restore.
    let mut v = run(&code, &[(RSP, 0x8000), (RAX, 6)], qemu(), None);
    assert!(ymm0(&mut v, 3).iter().all(Option::is_none));
}

#[test]
fn a_set_mxcsr_flag_after_an_instruction_is_unknown_before_it_and_a_clear_one_is_clear() {
    // divsd xmm0, xmm0 (1.0 / 1.0: exact, raises nothing); nop. The end says PE is set
    // (raised before the recording, say): before the divide it may have been clear.
    let code: Vec<&[u8]> = vec![&[0xf2, 0x0f, 0x5e, 0xc0], &[0x90]];
    let mut end = State::unknown();
    end.mxcsr = Mxcsr::known(0x1fa0);
    let mut v = run(&code, &[], Cpu::default(), Some(end));
    let mut start_unknown = v.at(0).expect("p0");
    // The start knows 0x1f80: no conflict with the backward pass, which must not claim PE.
    assert_eq!(start_unknown.mxcsr(), Ok(Some(0x1f80)));
    let mut end = State::unknown();
    end.mxcsr = Mxcsr::known(0x1f80);
    let mut v = run(&code, &[], Cpu::default(), Some(end));
    start_unknown = v.at(0).expect("p0");
    assert_eq!(start_unknown.mxcsr(), Ok(Some(0x1f80)));
}

#[test]
fn xsavec_writes_only_the_components_in_use_and_the_rest_of_its_area_keeps_its_bytes() {
    // xsavec [rsp] (0f c7 24 24) requesting SSE and AVX, with the header the recorder read:
    // SSE in use, AVX not. The AVX component's bytes (and x87's) are not written.
    let code: Vec<&[u8]> = vec![&[0x0f, 0xc7, 0x24, 0x24], &[0x90]];
    let (space, ips) = super::tests_semantics::code_at_0x1000(&code);
    let mut start = State::unknown();
    for (r, v) in SSE_AVX {
        start.regs.set(r, Some(v));
    }
    start.vec.set_lane(0, 0, 8, Some(1f64.to_bits()));
    start.vec.set_lane(0, 8, 8, Some(0));
    start.mxcsr = Mxcsr::known(0x1f80);
    start.mem.write(0x8000, &[0xab; 0x1000]);
    start.cpu = Cpu {
        xcr0: Some(7),
        ..Cpu::default()
    };
    let results = vec![crate::recording::InsnResult {
        position: 0,
        ip: 0x1000,
        after: [("xstate_bv".to_string(), "0x2".to_string())].into(),
    }];
    let mut v = Values::new(
        space,
        Inputs {
            history: crate::timeline::Timeline::from_ips(ips),
            start,
            results,
            ..Inputs::default()
        },
    );
    let k = v.at(1).expect("p1");
    assert_eq!(
        k.memory(0x8000 + 160, 8),
        Ok(Some(1f64.to_bits().to_le_bytes().to_vec())),
        "xmm0"
    );
    assert_eq!(
        k.memory(0x8000 + 512, 8),
        Ok(Some(2u64.to_le_bytes().to_vec())),
        "XSTATE_BV"
    );
    assert_eq!(
        k.memory(0x8000 + 520, 8),
        Ok(Some((6u64 | 1 << 63).to_le_bytes().to_vec())),
        "XCOMP_BV"
    );
    assert_eq!(
        k.memory(0x8000 + 576, 256),
        Ok(Some(vec![0xab; 256])),
        "AVX not in use: untouched"
    );
    assert_eq!(
        k.memory(0x8000, 24),
        Ok(Some(vec![0xab; 24])),
        "x87 not requested: untouched"
    );
    assert_eq!(
        k.memory(0x8000 + 528, 48),
        Ok(Some(vec![0xab; 48])),
        "the rest of the header"
    );
}

#[test]
fn the_standard_format_puts_the_avx512_components_where_the_recordings_cpu_does() {
    // xsave [rsp] of opmask, ZMM_Hi256 and Hi16_ZMM (eax = 0xe0), with zmm16's first lane and
    // k1 known: they land at Intel's offsets on an Intel CPU, at Zen 4's on an AMD EPYC.
    let code: [&[u8]; 2] = [&[0x0f, 0xae, 0x24, 0x24], &[0x90]];
    let regs = [(RSP, 0x8000), (RAX, 0xe0), (RDX, 0)];
    for (layout, opmask, hi16) in [
        (crate::recording::XsaveLayout::intel(), 1088, 1664),
        (super::tests_semantics::zen4_layout(), 832, 1408),
    ] {
        let cpu = Cpu {
            xcr0: Some(0xe7),
            xsave_all_in_use: true,
            xsave: Some(layout),
            ..Cpu::default()
        };
        let (space, ips) = super::tests_semantics::code_at_0x1000(&code);
        let mut start = State::unknown();
        for &(r, v) in &regs {
            start.regs.set(r, Some(v));
        }
        start.vec.set_lane(16, 0, 8, Some(0x1122_3344_5566_7788));
        start.vec.k.set(1, 0xabcd, u64::MAX);
        start.mem.write(0x8000, &[0; 0x1000]);
        start.cpu = cpu;
        let mut v = Values::new(
            space,
            Inputs {
                history: crate::timeline::Timeline::from_ips(ips),
                start,
                ..Inputs::default()
            },
        );
        let k = v.at(1).expect("p1");
        assert_eq!(
            k.memory(0x8000 + hi16, 8),
            Ok(Some(0x1122_3344_5566_7788u64.to_le_bytes().to_vec())),
            "zmm16 at {hi16}"
        );
        assert_eq!(
            k.memory(0x8000 + opmask + 8, 8),
            Ok(Some(0xabcdu64.to_le_bytes().to_vec())),
            "k1 at {opmask} + 8"
        );
    }
}

/// QEMU's XSAVE, as its helper does it (checked against QEMU 7.2 and 10.0 running a program
/// that prints what it saved): MXCSR_MASK FFFFH, each requested component in its place and
/// nothing between them, XSTATE_BV with every requested bit set but BNDREGS, which QEMU sets
/// only while MPX is in use (unknown here). All memory was forgotten from 832 up: bytes
/// QEMU leaves alone lost what they held, and the anchors above (which know them) found the
/// stretch not settled.
#[test]
fn qemus_xsave_writes_its_mxcsr_mask_and_only_the_requested_components() {
    let layout: crate::recording::xsave_layout::XsaveLayout =
        serde_json::from_str("[[2,576,256],[3,960,64],[4,1024,64],[9,2688,8]]").expect("a layout");
    let code: Vec<&[u8]> = vec![&[0x0f, 0xae, 0x24, 0x24], &[0x90]]; // xsave [rsp]; nop
    let all = [(RSP, 0x8000), (RAX, u64::MAX), (RDX, u64::MAX)];
    let cpu = |qemu| Cpu {
        xcr0: Some(0x21f),
        xsave_all_in_use: qemu,
        xsave: Some(layout),
        ..Cpu::default()
    };
    let mut v = run(&code, &all, cpu(true), None);
    let k = v.at(1).expect("p1");
    assert_eq!(
        k.memory(0x8000 + 28, 4),
        Ok(Some(0xffffu32.to_le_bytes().to_vec())),
        "MXCSR_MASK"
    );
    assert_eq!(
        k.memory(0x8000 + 576, 8),
        Ok(Some(2f64.to_bits().to_le_bytes().to_vec())),
        "AVX"
    );
    // Between AVX and BNDREGS, and between BNDCSR and PKRU: as they were.
    assert_eq!(k.memory(0x8000 + 832, 128), Ok(Some(vec![0; 128])));
    assert_eq!(k.memory(0x8000 + 1088, 1600), Ok(Some(vec![0; 1600])));
    // BNDREGS, BNDCSR and PKRU: not tracked.
    for (at, len) in [(960, 64), (1024, 64), (2688, 8)] {
        assert_eq!(k.memory(0x8000 + at, len), Ok(None), "{at}");
    }
    // XSTATE_BV: BNDREGS' bit unknown, so the byte is.
    assert_eq!(k.memory(0x8000 + 512, 1), Ok(None));
    // A real CPU's MXCSR_MASK is its own.
    let mut v = run(&code, &all, cpu(false), None);
    assert_eq!(v.at(1).expect("p1").memory(0x8000 + 28, 4), Ok(None));
}

//! The engine on rounding arithmetic and MXCSR: what is computed when MXCSR is known to be
//! the default, what is not when it is not, and MXCSR's control bits through an XSAVE and
//! XRSTOR pair whose exception flags are unknown (what `_dl_runtime_resolve` does).

use super::mxcsr::Mxcsr;
use super::reg::{Reg, RAX, RDI, RDX, RSP};
use super::{Inputs, State, Values};

/// Code at 0x1000 from a state with MXCSR `mxcsr` and xmm0 = 1.0, xmm1 = 3.0.
fn run(code: &[&[u8]], regs: &[(Reg, u64)], mxcsr: Mxcsr) -> Values {
    let (space, ips) = super::tests_semantics::code_at_0x1000(code);
    let mut start = State::unknown();
    for &(r, v) in regs {
        start.regs.set(r, Some(v));
    }
    start.vec.set_lane(0, 0, 8, Some(1f64.to_bits()));
    start.vec.set_lane(1, 0, 8, Some(3f64.to_bits()));
    start.mxcsr = mxcsr;
    start.mem.write(0x8000, &[0; 0x1000]);
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

/// divsd xmm0, xmm1; movq rax, xmm0; nop.
const DIVIDE: [&[u8]; 3] = [&[0xf2, 0x0f, 0x5e, 0xc1], &[0x66, 0x48, 0x0f, 0x7e, 0xc0], &[0x90]];

#[test]
fn a_quotient_is_computed_only_when_the_rounding_is_known() {
    let mut v = run(&DIVIDE, &[], Mxcsr::known(0x1f80));
    assert_eq!(reg(&mut v, 2, RAX), Some((1f64 / 3f64).to_bits()));
    let mut v = run(&DIVIDE, &[], Mxcsr::known(0x1f80 | 0x6000));
    assert_eq!(reg(&mut v, 2, RAX), None, "round toward zero is not modelled");
    let mut v = run(&DIVIDE, &[], Mxcsr::default());
    assert_eq!(reg(&mut v, 2, RAX), None, "MXCSR unknown");
}

/// After XRSTOR (which restores the vector registers too): 1.0 / 3.0 from integers.
const AFTER: [&[u8]; 6] = [
    &[0xb8, 1, 0, 0, 0],             // mov eax, 1
    &[0xf2, 0x48, 0x0f, 0x2a, 0xc0], // cvtsi2sd xmm0, rax
    &[0xb8, 3, 0, 0, 0],             // mov eax, 3
    &[0xf2, 0x48, 0x0f, 0x2a, 0xc8], // cvtsi2sd xmm1, rax
    &[0xf2, 0x0f, 0x5e, 0xc1],       // divsd xmm0, xmm1
    &[0x66, 0x48, 0x0f, 0x7e, 0xc0], // movq rax, xmm0
];

#[test]
fn xsave_and_xrstor_keep_the_rounding_control_when_the_flags_are_unknown() {
    // MXCSR with unknown exception flags (an instruction with an unknown input may have
    // raised one), saved and restored with eax = 2 (SSE): DAZ and the rounding control
    // come back, so the quotient after is computed.
    let mut code: Vec<&[u8]> = vec![
        &[0x0f, 0xae, 0x24, 0x24], // xsave [rsp]
        &[0x0f, 0xae, 0x2c, 0x24], // xrstor [rsp]
        &[0xb8, 2, 0, 0, 0],       // mov eax, 2
    ];
    code.extend(AFTER);
    code.extend([&[0x0f, 0xae, 0x1c, 0x24][..], &[0x90]]); // stmxcsr [rsp]; nop
    let mut flags_unknown = Mxcsr::known(0x1f80);
    flags_unknown.maybe(super::mxcsr::FLAGS);
    let regs = [(RSP, 0x8000), (RAX, 2), (RDX, 0), (RDI, 0)];
    let mut v = run(&code, &regs, flags_unknown);
    assert_eq!(reg(&mut v, 9, RAX), Some((1f64 / 3f64).to_bits()));
    let k = v.at(10).expect("p10");
    assert_eq!(k.memory(0x8000, 1), Ok(None), "the flags are not known");
    assert_eq!(k.memory(0x8001, 3), Ok(Some(vec![0x1f, 0, 0])), "the control is");
    // The saved byte overwritten with something unknown: DAZ is not known any more.
    let mut code: Vec<&[u8]> = vec![
        &[0x0f, 0xae, 0x24, 0x24], // xsave [rsp]
        &[0x88, 0x54, 0x24, 0x18], // mov [rsp+24], dl (dl unknown)
        &[0x0f, 0xae, 0x2c, 0x24], // xrstor [rsp]
    ];
    code.extend(AFTER);
    code.push(&[0x90]);
    let mut v = run(&code, &[(RSP, 0x8000), (RAX, 2), (RDI, 0)], Mxcsr::known(0x1f80));
    assert_eq!(reg(&mut v, 9, RAX), None);
}

#[test]
fn an_unmodelled_integer_vector_instruction_raises_no_mxcsr_flag_and_a_conversion_may() {
    // pmaddwd xmm0, xmm1 (integers: nobody models it); nop.
    let code: [&[u8]; 2] = [&[0x66, 0x0f, 0xf5, 0xc1], &[0x90]];
    let mut v = run(&code, &[], Mxcsr::known(0x1f80));
    assert_eq!(v.at(1).expect("p1").mxcsr(), Ok(Some(0x1f80)));
    // cvtdq2ps xmm0, xmm1 converts integers to floats: it may round (PE).
    let code: [&[u8]; 2] = [&[0x0f, 0x5b, 0xc1], &[0x90]];
    let mut v = run(&code, &[], Mxcsr::known(0x1f80));
    assert_eq!(v.at(1).expect("p1").mxcsr(), Ok(None));
}

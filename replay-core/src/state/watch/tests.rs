//! What [`accesses`] finds in hand-assembled instructions.

use iced_x86::{Decoder, DecoderOptions, InstructionInfoFactory};

use super::super::flags::DF;
use super::super::reg::{RAX, RBX, RCX, RDI, RSI, RSP};
use super::super::State;
use super::access::{accesses, Access, UnknownAddress};

fn insn(bytes: &[u8]) -> iced_x86::Instruction {
    Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE).decode()
}

fn state(regs: &[(super::super::Reg, u64)], df: bool) -> State {
    let mut st = State::unknown();
    for &(r, v) in regs {
        st.regs.set(r, Some(v));
    }
    st.flags.put(DF, if df { DF } else { 0 });
    st
}

fn found(before: &State, after: &State, bytes: &[u8], reads: bool) -> Result<Vec<Access>, UnknownAddress> {
    let mut out = Vec::new();
    accesses(
        before,
        after,
        &insn(bytes),
        reads,
        &mut InstructionInfoFactory::new(),
        &mut out,
    )?;
    Ok(out)
}

fn a(address: u64, len: u64, write: bool) -> Access {
    Access { address, len, write }
}

#[test]
fn explicit_and_stack_operands_at_the_registers_addresses() {
    let st = state(&[(RAX, 0x5000), (RBX, 7), (RSP, 0x7ff0)], false);
    // mov [rax+8], rbx
    assert_eq!(
        found(&st, &st, &[0x48, 0x89, 0x58, 0x08], true),
        Ok(vec![a(0x5008, 8, true)])
    );
    // add [rax], ebx: read and written
    assert_eq!(
        found(&st, &st, &[0x01, 0x18], true),
        Ok(vec![a(0x5000, 4, false), a(0x5000, 4, true)])
    );
    // ... and without reads, the write alone
    assert_eq!(found(&st, &st, &[0x01, 0x18], false), Ok(vec![a(0x5000, 4, true)]));
    // push rbx writes below rsp; ret reads at it
    assert_eq!(found(&st, &st, &[0x53], true), Ok(vec![a(0x7fe8, 8, true)]));
    assert_eq!(found(&st, &st, &[0xc3], true), Ok(vec![a(0x7ff0, 8, false)]));
    // lea touches nothing
    assert_eq!(found(&st, &st, &[0x48, 0x8d, 0x40, 0x08], true), Ok(vec![]));
    // mov [rcx], rbx with rcx unknown
    assert_eq!(found(&st, &st, &[0x48, 0x89, 0x19], true), Err(UnknownAddress));
}

#[test]
fn a_rep_string_touches_what_its_count_ran_over_either_way() {
    // rep stosb: 4 bytes up from rdi
    let before = state(&[(RCX, 4), (RDI, 0x1000), (RAX, 0)], false);
    let after = state(&[(RCX, 0), (RDI, 0x1004), (RAX, 0)], false);
    assert_eq!(
        found(&before, &after, &[0xf3, 0xaa], true),
        Ok(vec![a(0x1000, 4, true)])
    );
    // repne scasb that stopped after 4 of 10: reads 4 bytes, writes none
    let before = state(&[(RCX, 10), (RDI, 0x2000), (RAX, 0)], false);
    let after = state(&[(RCX, 6), (RDI, 0x2004), (RAX, 0)], false);
    assert_eq!(
        found(&before, &after, &[0xf2, 0xae], true),
        Ok(vec![a(0x2000, 4, false)])
    );
    assert_eq!(found(&before, &after, &[0xf2, 0xae], false), Ok(vec![]));
    // rep movsq down (DF set), 2 elements: from rsi - 8 and to rdi - 8, 16 bytes each
    let before = state(&[(RCX, 2), (RDI, 0x3008), (RSI, 0x4008)], true);
    let after = state(&[(RCX, 0), (RDI, 0x2ff8), (RSI, 0x3ff8)], true);
    assert_eq!(
        found(&before, &after, &[0xf3, 0x48, 0xa5], true),
        Ok(vec![a(0x4000, 16, false), a(0x3000, 16, true)])
    );
    // A count the state after does not know.
    let unknown = State::unknown();
    assert_eq!(found(&before, &unknown, &[0xf3, 0x48, 0xa5], true), Err(UnknownAddress));
    // movsd xmm0, [rax] (the SSE move, not a string): its operand
    let st = state(&[(RAX, 0x6000)], false);
    assert_eq!(
        found(&st, &st, &[0xf2, 0x0f, 0x10, 0x00], true),
        Ok(vec![a(0x6000, 8, false)])
    );
}

#[test]
fn an_access_overlaps_the_bytes_it_shares() {
    let x = a(0x1000, 8, true);
    assert!(x.overlaps(0x1007, 1) && x.overlaps(0xff9, 8) && x.overlaps(0x1000, 100));
    assert!(!x.overlaps(0x1008, 4) && !x.overlaps(0xff8, 8));
}

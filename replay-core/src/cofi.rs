//! Change-of-flow instructions (COFI) as RTIT classifies them (§2.2, table 2): which packets
//! an instruction can produce. The unit model and the flow decoder both classify with this
//! module, so they cannot disagree about an instruction.
//!
//! iced-x86's `FlowControl` is not enough on its own: `Return` also covers IRET and SYSRET,
//! `Call` also covers SYSCALL, and `UnconditionalBranch`/`IndirectBranch`/`Call`/`IndirectCall`
//! cover far forms too. RTIT treats all of those as far transfers (FUP.FAR + TIP), so the
//! classification goes by mnemonic and the far-form predicates first.

use iced_x86::{FlowControl, Instruction, Mnemonic};

/// How an instruction changes the flow, as far as RTIT packets are concerned (table 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cofi {
    /// Not a branch: execution continues at the next instruction.
    None,
    /// Jcc, LOOPcc, JCXZ/JECXZ/JRCXZ: one TNT bit (§2.2.2.1).
    Conditional,
    /// Near JMP with the target in the instruction: no packet (§2.2.2.2).
    DirectJump,
    /// Near CALL with the target in the instruction: no packet, but it sets
    /// RTIT_LAST_CALL_NLIP under RET compression (§4.2.3.2).
    DirectCall,
    /// Near JMP through a register or memory: TIP (§2.2.4).
    IndirectJump,
    /// Near CALL through a register or memory: TIP, and sets RTIT_LAST_CALL_NLIP.
    IndirectCall,
    /// Near RET: TIP, or a taken TNT bit when compressed (§2.2.5, §4.2.3.2).
    Return,
    /// A far transfer: FUP.FAR with the NLIP, then TIP (§2.2.6).
    Far(FarKind),
    /// Raises an exception and does not retire (UD0/UD1/UD2): the fault is the far transfer.
    Exception,
}

/// The far-transfer instructions of §2.2.6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FarKind {
    /// SYSCALL.
    Syscall,
    /// SYSRET.
    Sysret,
    /// SYSENTER.
    Sysenter,
    /// SYSEXIT.
    Sysexit,
    /// INT n with its vector.
    Int(u8),
    /// INT3.
    Int3,
    /// INT1 (ICEBP).
    Int1,
    /// INTO: a far transfer only when OF is set; when it does not trap, the instruction
    /// retires as a plain one, and whoever reports it must say so ([`Cofi::None`]).
    Into,
    /// IRET/IRETD/IRETQ.
    Iret,
    /// JMP far, direct or indirect.
    FarJmp,
    /// CALL far, direct or indirect.
    FarCall,
    /// RET far.
    FarRet,
    /// Another instruction iced-x86 reports as a return or interrupt (UIRET, ERETU, VMCALL
    /// and the like): a far transfer of no kind this project needs to tell apart.
    Other,
}

impl Cofi {
    /// Whether RTIT_LAST_CALL_NLIP is written by this instruction (near calls only).
    pub const fn is_near_call(self) -> bool {
        matches!(self, Self::DirectCall | Self::IndirectCall)
    }

    /// Whether the target cannot be known from the instruction bytes (TIP or compressed RET).
    pub const fn is_indirect(self) -> bool {
        matches!(self, Self::IndirectJump | Self::IndirectCall | Self::Return)
    }
}

/// Classifies a decoded instruction.
pub fn classify(insn: &Instruction) -> Cofi {
    let far = match insn.mnemonic() {
        Mnemonic::Syscall => Some(FarKind::Syscall),
        Mnemonic::Sysret | Mnemonic::Sysretq => Some(FarKind::Sysret),
        Mnemonic::Sysenter => Some(FarKind::Sysenter),
        Mnemonic::Sysexit | Mnemonic::Sysexitq => Some(FarKind::Sysexit),
        Mnemonic::Int => Some(FarKind::Int(insn.immediate8())),
        Mnemonic::Int3 => Some(FarKind::Int3),
        Mnemonic::Int1 => Some(FarKind::Int1),
        Mnemonic::Into => Some(FarKind::Into),
        Mnemonic::Iret | Mnemonic::Iretd | Mnemonic::Iretq => Some(FarKind::Iret),
        Mnemonic::Retf => Some(FarKind::FarRet),
        _ if insn.is_jmp_far() || insn.is_jmp_far_indirect() => Some(FarKind::FarJmp),
        _ if insn.is_call_far() || insn.is_call_far_indirect() => Some(FarKind::FarCall),
        _ => None,
    };
    if let Some(kind) = far {
        return Cofi::Far(kind);
    }
    match insn.flow_control() {
        FlowControl::ConditionalBranch => Cofi::Conditional,
        FlowControl::UnconditionalBranch => Cofi::DirectJump,
        FlowControl::IndirectBranch => Cofi::IndirectJump,
        FlowControl::Call => Cofi::DirectCall,
        FlowControl::IndirectCall => Cofi::IndirectCall,
        FlowControl::Return if insn.mnemonic() == Mnemonic::Ret => Cofi::Return,
        FlowControl::Exception => Cofi::Exception,
        FlowControl::Return | FlowControl::Interrupt => Cofi::Far(FarKind::Other),
        FlowControl::Next | FlowControl::XbeginXabortXend => Cofi::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    fn class(bytes: &[u8]) -> Cofi {
        let mut d = Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE);
        let insn = d.decode();
        assert!(!insn.is_invalid(), "{bytes:x?} decodes");
        assert_eq!(insn.len(), bytes.len(), "{bytes:x?} is one instruction");
        classify(&insn)
    }

    #[test]
    fn table_2_classes() {
        let cases: &[(&[u8], Cofi)] = &[
            (&[0x90], Cofi::None),                             // nop
            (&[0x48, 0x01, 0xd8], Cofi::None),                 // add rax, rbx
            (&[0x74, 0x05], Cofi::Conditional),                // je short
            (&[0x0f, 0x85, 1, 0, 0, 0], Cofi::Conditional),    // jne near
            (&[0xe2, 0xfe], Cofi::Conditional),                // loop
            (&[0xe3, 0x02], Cofi::Conditional),                // jrcxz
            (&[0xeb, 0x02], Cofi::DirectJump),                 // jmp short
            (&[0xe9, 0, 1, 0, 0], Cofi::DirectJump),           // jmp near
            (&[0xe8, 0, 1, 0, 0], Cofi::DirectCall),           // call rel32
            (&[0xff, 0xe0], Cofi::IndirectJump),               // jmp rax
            (&[0xff, 0x25, 0, 0, 0, 0], Cofi::IndirectJump),   // jmp [rip] (PLT)
            (&[0xff, 0xd0], Cofi::IndirectCall),               // call rax
            (&[0xff, 0x15, 0, 0, 0, 0], Cofi::IndirectCall),   // call [rip]
            (&[0xc3], Cofi::Return),                           // ret
            (&[0xc2, 0x08, 0x00], Cofi::Return),               // ret 8
            (&[0xf3, 0xc3], Cofi::Return),                     // rep ret
            (&[0x0f, 0x05], Cofi::Far(FarKind::Syscall)),      // syscall
            (&[0x48, 0x0f, 0x07], Cofi::Far(FarKind::Sysret)), // sysretq
            (&[0x0f, 0x34], Cofi::Far(FarKind::Sysenter)),     // sysenter
            (&[0xcd, 0x80], Cofi::Far(FarKind::Int(0x80))),    // int 0x80
            (&[0xcc], Cofi::Far(FarKind::Int3)),               // int3
            (&[0xf1], Cofi::Far(FarKind::Int1)),               // int1
            (&[0x48, 0xcf], Cofi::Far(FarKind::Iret)),         // iretq
            (&[0xcb], Cofi::Far(FarKind::FarRet)),             // retf
            (&[0xff, 0x28], Cofi::Far(FarKind::FarJmp)),       // jmp far [rax]
            (&[0xff, 0x18], Cofi::Far(FarKind::FarCall)),      // call far [rax]
            (&[0x0f, 0x0b], Cofi::Exception),                  // ud2
        ];
        for &(bytes, want) in cases {
            assert_eq!(class(bytes), want, "{bytes:x?}");
        }
    }

    #[test]
    fn far_forms_of_direct_branches_in_32_bit_code() {
        // jmp far ptr16:32 and call far ptr16:32 exist only outside 64-bit mode.
        let mut d = Decoder::with_ip(32, &[0xea, 0, 0, 0, 0, 0x10, 0], 0, DecoderOptions::NONE);
        assert_eq!(classify(&d.decode()), Cofi::Far(FarKind::FarJmp));
        let mut d = Decoder::with_ip(32, &[0x9a, 0, 0, 0, 0, 0x10, 0], 0, DecoderOptions::NONE);
        assert_eq!(classify(&d.decode()), Cofi::Far(FarKind::FarCall));
    }
}

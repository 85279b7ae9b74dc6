//! The integer arithmetic both the general semantics ([`super::forward`]) and the translated
//! instructions ([`super::compiled`]) compute, in one place so that they cannot drift apart:
//! the two-operand arithmetic and logic, the one-operand arithmetic, the shifts and the
//! truncating `imul`, each with the flags it leaves.

use iced_x86::Mnemonic;

use super::flags::{self, arith, Arith, Flags};
use super::ops::sign_extend;
use super::reg::mask;
use super::Cpu;

/// `add`, `sub`, `cmp`, `and`, `or`, `xor`, `test`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Alu {
    Add,
    Sub,
    Cmp,
    And,
    Or,
    Xor,
    Test,
}

impl Alu {
    pub(super) fn of(m: Mnemonic) -> Option<Alu> {
        use Mnemonic as M;
        Some(match m {
            M::Add => Alu::Add,
            M::Sub => Alu::Sub,
            M::Cmp => Alu::Cmp,
            M::And => Alu::And,
            M::Or => Alu::Or,
            M::Xor => Alu::Xor,
            M::Test => Alu::Test,
            _ => return None,
        })
    }

    /// Whether the result is written (not `cmp` nor `test`).
    pub(super) fn writes(self) -> bool {
        !matches!(self, Alu::Cmp | Alu::Test)
    }

    /// `a op b` at `w` bytes, with the flags it leaves.
    pub(super) fn apply(self, fl: &mut Flags, cpu: &Cpu, a: u64, b: u64, w: u32) -> u64 {
        let r = match self {
            Alu::Add => a.wrapping_add(b),
            Alu::Sub | Alu::Cmp => a.wrapping_sub(b),
            Alu::And | Alu::Test => a & b,
            Alu::Or => a | b,
            Alu::Xor => a ^ b,
        } & mask(w);
        let op = match self {
            Alu::Add => Arith::Add,
            Alu::Sub | Alu::Cmp => Arith::Sub,
            _ => Arith::Logic,
        };
        arith(fl, op, a, b, r, w);
        if op == Arith::Logic && cpu.logic_clears_af == Some(true) {
            fl.put(flags::AF, 0);
        }
        r
    }
}

/// `inc`, `dec`, `neg`, `not`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unary {
    Inc,
    Dec,
    Neg,
    Not,
}

impl Unary {
    pub(super) fn of(m: Mnemonic) -> Option<Unary> {
        Some(match m {
            Mnemonic::Inc => Unary::Inc,
            Mnemonic::Dec => Unary::Dec,
            Mnemonic::Neg => Unary::Neg,
            Mnemonic::Not => Unary::Not,
            _ => return None,
        })
    }

    /// The result at `w` bytes, with the flags it leaves (`not` leaves them).
    pub(super) fn apply(self, fl: &mut Flags, a: u64, w: u32) -> u64 {
        let r = match self {
            Unary::Inc => a.wrapping_add(1),
            Unary::Dec => a.wrapping_sub(1),
            Unary::Neg => 0u64.wrapping_sub(a),
            Unary::Not => !a,
        } & mask(w);
        match self {
            Unary::Inc => arith(fl, Arith::Inc, a, 1, r, w),
            Unary::Dec => arith(fl, Arith::Dec, a, 1, r, w),
            Unary::Neg => arith(fl, Arith::Sub, 0, a, r, w),
            Unary::Not => {}
        }
        r
    }
}

/// `shl` and `sal`, `shr`, `sar`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shift {
    Left,
    Right,
    Arithmetic,
}

impl Shift {
    pub(super) fn of(m: Mnemonic) -> Option<Shift> {
        Some(match m {
            Mnemonic::Shl | Mnemonic::Sal => Shift::Left,
            Mnemonic::Shr => Shift::Right,
            Mnemonic::Sar => Shift::Arithmetic,
            _ => return None,
        })
    }

    /// The count as the CPU takes it from the operand: 6 bits at 64 bits, 5 below.
    pub(super) fn count(c: u64, w: u32) -> u64 {
        c & if w == 8 { 63 } else { 31 }
    }

    /// `a` (`w` bytes) shifted by a count of 1 or more, with the flags it leaves: CF the last
    /// bit out (unknown past the width), OF and AF unknown.
    pub(super) fn apply(self, fl: &mut Flags, a: u64, count: u64, w: u32) -> u64 {
        let (bits, c) = (w * 8, count as u32);
        let (r, out) = match self {
            Shift::Left => (a.checked_shl(c).unwrap_or(0), c <= bits && (a >> (bits - c)) & 1 != 0),
            Shift::Right => (a.checked_shr(c).unwrap_or(0), c <= bits && (a >> (c - 1)) & 1 != 0),
            Shift::Arithmetic => {
                let s = sign_extend(a, w) as i64;
                ((s >> c.min(63)) as u64, (s >> (c - 1).min(63)) & 1 != 0)
            }
        };
        let r = r & mask(w);
        arith(fl, Arith::Logic, r, r, r, w);
        fl.put(flags::CF, if out { flags::CF } else { 0 });
        if c > bits {
            fl.forget(flags::CF);
        }
        fl.forget(flags::OF | flags::AF);
        r
    }
}

/// The truncating signed product of `a` and `b` at `w` bytes, with CF and OF set if it did
/// not fit (the caller has made the other flags what `imul` leaves them).
pub(super) fn signed_product(fl: &mut Flags, a: u64, b: u64, w: u32) -> u64 {
    let full = i128::from(sign_extend(a, w) as i64) * i128::from(sign_extend(b, w) as i64);
    let r = (full as u64) & mask(w);
    let fits = i128::from(sign_extend(r, w) as i64) == full;
    fl.put(flags::CF | flags::OF, if fits { 0 } else { flags::CF | flags::OF });
    r
}

/// Whether `m` is a `cmov`.
pub(super) fn is_cmov(m: Mnemonic) -> bool {
    use Mnemonic as M;
    matches!(
        m,
        M::Cmove
            | M::Cmovne
            | M::Cmovb
            | M::Cmovae
            | M::Cmovbe
            | M::Cmova
            | M::Cmovl
            | M::Cmovge
            | M::Cmovle
            | M::Cmovg
            | M::Cmovs
            | M::Cmovns
            | M::Cmovo
            | M::Cmovno
            | M::Cmovp
            | M::Cmovnp
    )
}

/// Whether `m` is a `setcc`.
pub(super) fn is_setcc(m: Mnemonic) -> bool {
    use Mnemonic as M;
    matches!(
        m,
        M::Sete
            | M::Setne
            | M::Setb
            | M::Setae
            | M::Setbe
            | M::Seta
            | M::Setl
            | M::Setge
            | M::Setle
            | M::Setg
            | M::Sets
            | M::Setns
            | M::Seto
            | M::Setno
            | M::Setp
            | M::Setnp
    )
}

//! RFLAGS as known bits: what arithmetic sets, what a conditional branch's outcome in the
//! trace tells, and what condition codes evaluate to when the flags they read are known.

use iced_x86::{ConditionCode, Instruction, RflagsBits};

use super::why::{self, Why};

/// Carry.
pub const CF: u64 = 1 << 0;
/// Parity.
pub const PF: u64 = 1 << 2;
/// Auxiliary carry.
pub const AF: u64 = 1 << 4;
/// Zero.
pub const ZF: u64 = 1 << 6;
/// Sign.
pub const SF: u64 = 1 << 7;
/// Direction.
pub const DF: u64 = 1 << 10;
/// Overflow.
pub const OF: u64 = 1 << 11;
/// The six status flags.
pub const STATUS: u64 = CF | PF | AF | ZF | SF | OF;
/// The bits of EFLAGS gdb shows (a 32-bit register).
pub const ALL: u64 = 0xffff_ffff;
/// The name, in a register map, of the mask of `eflags` bits the recorder knew: QEMU keeps the
/// status flags and DF apart from its `eflags` word while it runs the program's code, so a
/// plugin reading registers there (a park, a thread interrupted at a block) knows the other
/// bits only (docs/recording-format.md). Absent: every bit is known.
pub const KNOWN_NAME: &str = "eflags_known";

/// EFLAGS bits from iced's `RflagsBits` (a different bit order).
pub fn from_iced(bits: u32) -> u64 {
    const MAP: [(u32, u64); 9] = [
        (RflagsBits::OF, OF),
        (RflagsBits::SF, SF),
        (RflagsBits::ZF, ZF),
        (RflagsBits::AF, AF),
        (RflagsBits::CF, CF),
        (RflagsBits::PF, PF),
        (RflagsBits::DF, DF),
        (RflagsBits::IF, 1 << 9),
        (RflagsBits::AC, 1 << 18),
    ];
    MAP.iter().filter(|(i, _)| bits & i != 0).map(|(_, e)| e).sum()
}

/// The flags an instruction modifies, clears and sets, by iced's tables, as RFLAGS masks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generic {
    modified: u32,
    cleared: u32,
    set: u32,
}

impl Generic {
    /// Those of `insn` (every flag iced names is in the low 32 bits).
    pub fn of(insn: &Instruction) -> Self {
        let low = |bits| from_iced(bits) as u32;
        Self {
            modified: low(insn.rflags_modified()),
            cleared: low(insn.rflags_cleared()),
            set: low(insn.rflags_set()),
        }
    }
}

/// A condition code worked out once into the flags it reads and its value for each of
/// their 32 combinations (by [`Flags::condition`]): the translated instructions
/// evaluate a condition of known flags by one look ([`Flags::known_by`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truth {
    /// The status flags the condition reads (none: no condition).
    needs: u16,
    /// Bit `i`: the condition's value where CF, PF, ZF, SF and OF are bits 0–4 of `i`.
    table: u32,
}

impl Truth {
    /// The table of `cc`, by [`Flags::condition`] over every combination.
    pub fn of(cc: ConditionCode) -> Self {
        use ConditionCode as C;
        let needs = match cc {
            C::None => 0,
            C::o | C::no => OF,
            C::b | C::ae => CF,
            C::e | C::ne => ZF,
            C::be | C::a => CF | ZF,
            C::s | C::ns => SF,
            C::p | C::np => PF,
            C::l | C::ge => SF | OF,
            C::le | C::g => ZF | SF | OF,
        };
        let flags = [CF, PF, ZF, SF, OF];
        let table = (0..32u32)
            .filter(|i| {
                let f = Flags {
                    value: (0..5).filter(|b| i & (1 << b) != 0).map(|b| flags[b]).sum(),
                    known: STATUS,
                    why: Why::default(),
                };
                f.condition(cc) == Some(true)
            })
            .fold(0, |t, i| t | 1 << i);
        Truth {
            needs: needs as u16,
            table,
        }
    }
}

/// RFLAGS with a mask of the bits that are known.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flags {
    /// Values (meaningful where known).
    pub value: u64,
    /// Known bits.
    pub known: u64,
    /// Why the unknown bits are unknown (the last cause that forgot any).
    why: Why,
}

/// Equal when the same bits are known with the same values; causes do not count.
impl PartialEq for Flags {
    fn eq(&self, other: &Self) -> bool {
        self.known == other.known && (self.value ^ other.value) & self.known == 0
    }
}

impl Eq for Flags {}

impl Flags {
    /// Whether this knows every bit `other` knows, with the same value.
    pub fn covers(&self, other: &Flags) -> bool {
        other.known & !self.known == 0 && (self.value ^ other.value) & other.known == 0
    }

    /// All 32 bits known.
    pub fn known(value: u64) -> Self {
        Self {
            value,
            known: ALL,
            why: Why::default(),
        }
    }

    /// The whole register, if every bit is known.
    pub fn get(&self) -> Option<u64> {
        (self.known & ALL == ALL).then_some(self.value & ALL)
    }

    /// One flag, if known.
    pub fn bit(&self, flag: u64) -> Option<bool> {
        if self.known & flag == 0 {
            why::saw(self.why);
            return None;
        }
        Some(self.value & flag != 0)
    }

    /// Sets flags (`mask`) to `value`'s bits there.
    pub fn put(&mut self, mask: u64, value: u64) {
        self.value = (self.value & !mask) | (value & mask);
        self.known |= mask;
    }

    /// Makes flags unknown.
    pub fn forget(&mut self, mask: u64) {
        if self.known & mask != 0 {
            self.why = why::current();
        }
        self.known &= !mask;
    }

    /// What an instruction nobody modelled does to the flags, by iced-x86's tables: the
    /// modified ones become unknown, except those it always clears or sets.
    pub fn apply_generic(&mut self, insn: &Instruction) {
        self.apply(Generic::of(insn));
    }

    /// What [`Self::apply_generic`] does, from the masks taken from iced's tables once.
    #[inline]
    pub fn apply(&mut self, g: Generic) {
        self.forget(u64::from(g.modified));
        self.put(u64::from(g.cleared), 0);
        self.put(u64::from(g.set), u64::from(g.set));
    }

    /// Whether condition `cc` holds, if the flags it reads are known.
    pub fn condition(&self, cc: ConditionCode) -> Option<bool> {
        let b = |f| self.bit(f);
        Some(match cc {
            ConditionCode::None => return None,
            ConditionCode::o => b(OF)?,
            ConditionCode::no => !b(OF)?,
            ConditionCode::b => b(CF)?,
            ConditionCode::ae => !b(CF)?,
            ConditionCode::e => b(ZF)?,
            ConditionCode::ne => !b(ZF)?,
            ConditionCode::be => or(b(CF), b(ZF))?,
            ConditionCode::a => !or(b(CF), b(ZF))?,
            ConditionCode::s => b(SF)?,
            ConditionCode::ns => !b(SF)?,
            ConditionCode::p => b(PF)?,
            ConditionCode::np => !b(PF)?,
            ConditionCode::l => b(SF)? != b(OF)?,
            ConditionCode::ge => b(SF)? == b(OF)?,
            ConditionCode::le => or(b(ZF), Some(b(SF)? != b(OF)?))?,
            ConditionCode::g => !or(b(ZF), Some(b(SF)? != b(OF)?))?,
        })
    }

    /// The condition `t` is the table of, where every flag it reads is known (no cause noted
    /// when one is not): what [`Self::condition`] gives then, by one look. A branch whose
    /// outcome it equals teaches [`Self::constrain`] nothing, and most of a walk's are such.
    #[inline(always)]
    pub fn known_by(&self, t: Truth) -> Option<bool> {
        let needs = u64::from(t.needs);
        if self.known & needs != needs || needs == 0 {
            return None;
        }
        let v = self.value;
        let index = (v & CF) | (v >> 1 & 2) | (v >> 4 & 4) | (v >> 4 & 8) | (v >> 7 & 16);
        Some(t.table >> index & 1 != 0)
    }

    /// Learns what the outcome of a conditional branch (`holds`: taken) says about the flags
    /// it read: exact for one-flag conditions, and for the two-flag ones where the outcome or
    /// a known flag leaves one answer.
    pub fn constrain(&mut self, cc: ConditionCode, holds: bool) {
        // Normalise to the positive condition.
        let (cc, holds) = match cc {
            ConditionCode::no => (ConditionCode::o, !holds),
            ConditionCode::ae => (ConditionCode::b, !holds),
            ConditionCode::ne => (ConditionCode::e, !holds),
            ConditionCode::a => (ConditionCode::be, !holds),
            ConditionCode::ns => (ConditionCode::s, !holds),
            ConditionCode::np => (ConditionCode::p, !holds),
            ConditionCode::ge => (ConditionCode::l, !holds),
            ConditionCode::g => (ConditionCode::le, !holds),
            cc => (cc, holds),
        };
        let set = |f: &mut Self, flag, v: bool| f.put(flag, if v { flag } else { 0 });
        match cc {
            ConditionCode::o => set(self, OF, holds),
            ConditionCode::b => set(self, CF, holds),
            ConditionCode::e => set(self, ZF, holds),
            ConditionCode::s => set(self, SF, holds),
            ConditionCode::p => set(self, PF, holds),
            ConditionCode::be => match (holds, self.bit(CF), self.bit(ZF)) {
                (false, _, _) => self.put(CF | ZF, 0),
                (true, Some(false), _) => set(self, ZF, true),
                (true, _, Some(false)) => set(self, CF, true),
                _ => {}
            },
            ConditionCode::l => self.constrain_less(holds),
            ConditionCode::le => match (holds, self.bit(ZF)) {
                (false, _) => {
                    set(self, ZF, false);
                    self.constrain_less(false);
                }
                (true, Some(false)) => self.constrain_less(true),
                _ => {}
            },
            _ => {}
        }
    }

    /// `SF != OF` is `less`: one known flag gives the other.
    fn constrain_less(&mut self, less: bool) {
        match (self.bit(SF), self.bit(OF)) {
            (Some(s), None) => self.put(OF, if s != less { OF } else { 0 }),
            (None, Some(o)) => self.put(SF, if o != less { SF } else { 0 }),
            _ => {}
        }
    }
}

fn or(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (Some(false), Some(false)) => Some(false),
        _ => None,
    }
}

/// The arithmetic families whose flags are computed exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arith {
    /// add
    Add,
    /// sub, cmp, neg (as 0 - x)
    Sub,
    /// and, or, xor, test: CF = OF = 0, AF undefined
    Logic,
    /// inc: as add 1, CF untouched
    Inc,
    /// dec: as sub 1, CF untouched
    Dec,
}

/// Sets the status flags `op` leaves for `a op b = r` at `bytes` width.
pub fn arith(flags: &mut Flags, op: Arith, a: u64, b: u64, r: u64, bytes: u32) {
    let bits = bytes * 8;
    let m = super::reg::mask(bytes);
    let (a, b, r) = (a & m, b & m, r & m);
    let sign = 1u64 << (bits - 1);
    let mut v = 0;
    if r == 0 {
        v |= ZF;
    }
    if r & sign != 0 {
        v |= SF;
    }
    if (r as u8).count_ones() % 2 == 0 {
        v |= PF;
    }
    let (carry, overflow) = match op {
        Arith::Add | Arith::Inc => (r < a, (a ^ r) & (b ^ r) & sign != 0),
        Arith::Sub | Arith::Dec => (a < b, (a ^ b) & (a ^ r) & sign != 0),
        Arith::Logic => (false, false),
    };
    if carry {
        v |= CF;
    }
    if overflow {
        v |= OF;
    }
    if (a ^ b ^ r) & 0x10 != 0 {
        v |= AF;
    }
    let mask = match op {
        Arith::Add | Arith::Sub => STATUS,
        Arith::Logic => STATUS & !AF,
        Arith::Inc | Arith::Dec => STATUS & !CF,
    };
    flags.put(mask, v);
    if op == Arith::Logic {
        flags.forget(AF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conditions_table_gives_what_the_general_evaluation_gives_of_known_flags() {
        use ConditionCode as C;
        let all = [
            C::o,
            C::no,
            C::b,
            C::ae,
            C::e,
            C::ne,
            C::be,
            C::a,
            C::s,
            C::ns,
            C::p,
            C::np,
            C::l,
            C::ge,
            C::le,
            C::g,
        ];
        let flags = [CF, PF, ZF, SF, OF];
        let spread = |bits: u32| (0..5).filter(|i| bits & (1 << i) != 0).map(|i| flags[i]).sum::<u64>();
        let mut answered = 0;
        for cc in all {
            let t = Truth::of(cc);
            let needs = u64::from(t.needs);
            for known in 0..32u32 {
                for value in 0..32u32 {
                    // IF and a reserved bit set too: the table looks at the five alone.
                    let f = Flags {
                        value: spread(value) | 0x202,
                        known: spread(known) | 0x202,
                        why: Why::default(),
                    };
                    match f.known_by(t) {
                        Some(v) => {
                            assert_eq!(f.condition(cc), Some(v), "{cc:?} known {known:05b} value {value:05b}");
                            answered += 1;
                        }
                        None => assert_ne!(f.known & needs, needs, "{cc:?} known {known:05b}"),
                    }
                }
            }
            // Each flag it says it reads is one the condition cannot do without.
            for flag in flags.iter().filter(|&&flag| needs & flag != 0) {
                let f = Flags {
                    value: 0,
                    known: STATUS & !flag,
                    why: Why::default(),
                };
                assert_eq!(f.condition(cc), None, "{cc:?} {flag:#x}");
            }
        }
        assert!(answered > 16 * 32, "{answered}");
        assert_eq!(Truth::of(C::None), Truth { needs: 0, table: 0 });
    }

    #[test]
    fn arithmetic_flags_match_the_cpu() {
        let mut f = Flags::default();
        // cmp eax, ebx with 1 - 2: borrow, negative, not zero.
        arith(&mut f, Arith::Sub, 1, 2, 1u64.wrapping_sub(2), 4);
        assert_eq!(f.bit(CF), Some(true));
        assert_eq!(f.bit(SF), Some(true));
        assert_eq!(f.bit(ZF), Some(false));
        assert_eq!(f.bit(OF), Some(false));
        assert_eq!(f.condition(ConditionCode::l), Some(true));
        assert_eq!(f.condition(ConditionCode::a), Some(false));
        // add al, 0x7f + 1: signed overflow, AF.
        arith(&mut f, Arith::Add, 0x7f, 1, 0x80, 1);
        assert_eq!(f.bit(OF), Some(true));
        assert_eq!(f.bit(AF), Some(true));
        assert_eq!(f.bit(PF), Some(false));
        let mut g = Flags::default();
        arith(&mut g, Arith::Logic, 3, 3, 3, 8);
        assert_eq!(g.bit(AF), None, "undefined after a logic op");
        assert_eq!(g.bit(CF), Some(false));
        // inc leaves CF alone.
        let mut h = Flags::known(CF | 0x202);
        arith(&mut h, Arith::Inc, u64::MAX, 1, 0, 8);
        assert_eq!(h.bit(CF), Some(true));
        assert_eq!(h.bit(ZF), Some(true));
    }

    #[test]
    fn branch_outcomes_constrain_what_they_read() {
        let mut f = Flags::default();
        f.constrain(ConditionCode::ne, false);
        assert_eq!(f.bit(ZF), Some(true));
        let mut g = Flags::default();
        g.constrain(ConditionCode::a, true);
        assert_eq!((g.bit(CF), g.bit(ZF)), (Some(false), Some(false)));
        let mut h = Flags::default();
        h.constrain(ConditionCode::be, true);
        assert_eq!((h.bit(CF), h.bit(ZF)), (None, None), "either could hold");
        let mut k = Flags::default();
        k.put(OF, 0);
        k.constrain(ConditionCode::l, true);
        assert_eq!(k.bit(SF), Some(true));
        assert_eq!(k.condition(ConditionCode::ge), Some(false));
        let mut n = Flags::default();
        n.constrain(ConditionCode::g, true);
        assert_eq!(n.bit(ZF), Some(false));
        assert_eq!(n.bit(SF), None);
    }
}

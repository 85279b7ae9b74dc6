//! The registers the state layer tracks, each known or unknown as a whole, and how iced-x86's
//! sub-registers (`eax`, `ax`, `al`, `ah`) read and write them.

use iced_x86::Register;

use super::why::{self, Why};

/// A tracked register: the 16 general-purpose registers in hardware order, the segment bases
/// the `fs:`/`gs:` prefixes add, and the segment selectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reg {
    /// General-purpose register `0..16` in hardware order (rax, rcx, rdx, rbx, rsp, rbp, rsi,
    /// rdi, r8–r15).
    Gpr(u8),
    /// The FS segment base (thread pointer).
    FsBase,
    /// The GS segment base.
    GsBase,
    /// Segment selector `0..6` in hardware order (es, cs, ss, ds, fs, gs).
    Segment(u8),
}

/// Number of tracked registers.
pub const COUNT: usize = 16 + 2 + 6;

/// Names of the general-purpose registers in hardware order.
const GPR: [&str; 16] = [
    "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
];
const SEGMENT: [&str; 6] = ["es", "cs", "ss", "ds", "fs", "gs"];

/// `rax`.
pub const RAX: Reg = Reg::Gpr(0);
/// `rcx`.
pub const RCX: Reg = Reg::Gpr(1);
/// `rdx`.
pub const RDX: Reg = Reg::Gpr(2);
/// `rbx`.
pub const RBX: Reg = Reg::Gpr(3);
/// `rsp`.
pub const RSP: Reg = Reg::Gpr(4);
/// `rbp`.
pub const RBP: Reg = Reg::Gpr(5);
/// `rsi`.
pub const RSI: Reg = Reg::Gpr(6);
/// `rdi`.
pub const RDI: Reg = Reg::Gpr(7);
/// `r8`.
pub const R8: Reg = Reg::Gpr(8);
/// `r9`.
pub const R9: Reg = Reg::Gpr(9);
/// `r10`.
pub const R10: Reg = Reg::Gpr(10);
/// `r11`.
pub const R11: Reg = Reg::Gpr(11);

impl Reg {
    /// Every tracked register.
    pub fn all() -> impl Iterator<Item = Reg> {
        (0..16)
            .map(Reg::Gpr)
            .chain([Reg::FsBase, Reg::GsBase])
            .chain((0..6).map(Reg::Segment))
    }

    fn index(self) -> usize {
        match self {
            Reg::Gpr(i) => usize::from(i),
            Reg::FsBase => 16,
            Reg::GsBase => 17,
            Reg::Segment(i) => 18 + usize::from(i),
        }
    }

    /// Its name as gdb and the recording's manifest spell it.
    pub fn name(self) -> &'static str {
        match self {
            Reg::Gpr(i) => GPR[usize::from(i)],
            Reg::FsBase => "fs_base",
            Reg::GsBase => "gs_base",
            Reg::Segment(i) => SEGMENT[usize::from(i)],
        }
    }

    /// The register of that name.
    pub fn from_name(name: &str) -> Option<Reg> {
        Reg::all().find(|r| r.name() == name)
    }
}

/// Where an iced register lives in a tracked one: which, at what bit shift, how many bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The tracked register.
    pub reg: Reg,
    /// 8 for `ah`, `ch`, `dh`, `bh`; else 0.
    pub shift: u32,
    /// 1, 2, 4 or 8.
    pub bytes: u32,
}

/// The tracked register an iced register is part of, if any (vector, control and other
/// registers are not tracked).
#[inline]
pub fn slot(r: Register) -> Option<Slot> {
    // By iced's numbering, in which each width's sixteen registers are consecutive in
    // hardware order (the byte registers with ah, ch, dh and bh after bl): each operand of
    // each step asks, and iced's `full_register` and `size` are a table lookup each.
    let v = r as u32;
    let (from, bytes) = match v {
        _ if (Register::RAX as u32..=Register::R15 as u32).contains(&v) => (Register::RAX, 8),
        _ if (Register::EAX as u32..=Register::R15D as u32).contains(&v) => (Register::EAX, 4),
        _ if (Register::AX as u32..=Register::R15W as u32).contains(&v) => (Register::AX, 2),
        _ if (Register::AH as u32..=Register::BH as u32).contains(&v) => {
            return Some(Slot {
                reg: Reg::Gpr((v - Register::AH as u32) as u8),
                shift: 8,
                bytes: 1,
            });
        }
        _ if (Register::AL as u32..=Register::BL as u32).contains(&v) => (Register::AL, 1),
        _ if (Register::SPL as u32..=Register::R15L as u32).contains(&v) => {
            return Some(Slot {
                reg: Reg::Gpr((v - Register::SPL as u32 + 4) as u8),
                shift: 0,
                bytes: 1,
            });
        }
        _ if r.is_segment_register() => {
            return Some(Slot {
                reg: Reg::Segment((v - Register::ES as u32) as u8),
                shift: 0,
                bytes: 2,
            });
        }
        _ => return None,
    };
    Some(Slot {
        reg: Reg::Gpr((v - from as u32) as u8),
        shift: 0,
        bytes,
    })
}

/// A mask of the low `bytes` bytes.
pub fn mask(bytes: u32) -> u64 {
    if bytes >= 8 {
        u64::MAX
    } else {
        (1u64 << (bytes * 8)) - 1
    }
}

/// The tracked registers, each known or not.
#[derive(Debug, Clone, Default)]
pub struct RegFile {
    values: [u64; COUNT],
    known: u32,
    /// Why each unknown register is unknown (meaningless where known).
    why: [Why; COUNT],
    /// The bits known of a register that is not wholly known (a `pmovmskb` of partly known
    /// bytes: `strlen` reads past the end of its string), with their values in `values`.
    partial: [u64; COUNT],
    /// Which registers have bits in `partial` (meaningful where not known): most steps
    /// ask whether any register is partly known, and nearly always none is.
    partly: u32,
}

/// Equal when the same registers are known with the same values; causes do not count.
impl PartialEq for RegFile {
    fn eq(&self, other: &Self) -> bool {
        self.known == other.known && (0..COUNT).all(|i| self.known & (1 << i) == 0 || self.values[i] == other.values[i])
    }
}

impl Eq for RegFile {}

impl RegFile {
    /// A register's value, if known. Reading an unknown one notes its cause for whatever
    /// the current transition makes unknown from it ([`why::saw`]).
    pub fn get(&self, r: Reg) -> Option<u64> {
        let i = r.index();
        if self.known & (1 << i) == 0 {
            why::saw(self.why[i]);
            return None;
        }
        Some(self.values[i])
    }

    /// Why a register is unknown (`None` if it is known).
    pub fn why(&self, r: Reg) -> Option<Why> {
        let i = r.index();
        (self.known & (1 << i) == 0).then_some(self.why[i])
    }

    /// Sets a register to a value or to unknown (for the current transition's cause).
    pub fn set(&mut self, r: Reg, value: Option<u64>) {
        let i = r.index();
        match value {
            Some(v) => {
                self.values[i] = v;
                self.known |= 1 << i;
            }
            None => {
                self.known &= !(1 << i);
                self.why[i] = why::current();
                self.partial[i] = 0;
                self.partly &= !(1 << i);
            }
        }
    }

    /// Whether this knows every bit `other` knows, with the same value.
    pub fn covers(&self, other: &RegFile) -> bool {
        let known = |f: &RegFile, i: usize| match (f.known >> i & 1, f.partly >> i & 1) {
            (1, _) => u64::MAX,
            (_, 1) => f.partial[i],
            _ => 0,
        };
        (0..COUNT).all(|i| {
            let (mine, theirs) = (known(self, i), known(other, i));
            theirs & !mine == 0 && (self.values[i] ^ other.values[i]) & theirs == 0
        })
    }

    /// A register's value and the mask of its known bits (all ones where wholly known).
    pub fn bits(&self, r: Reg) -> (u64, u64) {
        let i = r.index();
        if self.known & (1 << i) != 0 {
            return (self.values[i], u64::MAX);
        }
        why::saw(self.why[i]);
        (self.values[i] & self.partial[i], self.partial[i])
    }

    /// Whether some register is partly known (not wholly, and some of its bits).
    #[inline]
    pub fn any_partial(&self) -> bool {
        self.partly & !self.known != 0
    }

    /// Sets the bits of `known_mask` to those of `value` and the others to unknown.
    pub fn set_bits(&mut self, r: Reg, value: u64, known_mask: u64) {
        if known_mask == u64::MAX {
            return self.set(r, Some(value));
        }
        self.set(r, None);
        let i = r.index();
        self.values[i] = value & known_mask;
        self.partial[i] = known_mask;
        if known_mask != 0 {
            self.partly |= 1 << i;
        }
    }

    /// An iced register's value and known-bit mask (zero-extended, all known above it).
    pub fn read_bits(&self, r: Register) -> Option<(u64, u64)> {
        let s = slot(r)?;
        let (v, m) = self.bits(s.reg);
        let w = mask(s.bytes);
        Some(((v >> s.shift) & w, ((m >> s.shift) & w) | !w))
    }

    /// Writes an iced register with partly known bits, as [`Self::write`] writes values (a
    /// 32-bit write zeroes the upper half; 8 and 16-bit ones keep the rest).
    pub fn write_bits(&mut self, r: Register, value: u64, known_mask: u64) {
        let Some(s) = slot(r) else { return };
        let w = mask(s.bytes);
        let (v, m) = match s.bytes {
            8 => (value, known_mask),
            4 if matches!(s.reg, Reg::Gpr(_)) => (value & w, (known_mask & w) | !w),
            _ => {
                let (old, old_mask) = self.bits(s.reg);
                let at = w << s.shift;
                (
                    (old & !at) | ((value << s.shift) & at),
                    (old_mask & !at) | ((known_mask << s.shift) & at),
                )
            }
        };
        self.set_bits(s.reg, v, m);
    }

    /// Takes a register's value, or its unknown and cause, from another register file.
    pub fn copy_from(&mut self, other: &RegFile, r: Reg) {
        let i = r.index();
        self.values[i] = other.values[i];
        self.why[i] = other.why[i];
        self.partial[i] = other.partial[i];
        self.known = (self.known & !(1 << i)) | (other.known & (1 << i));
        self.partly = (self.partly & !(1 << i)) | (other.partly & (1 << i));
    }

    /// Makes every register unknown.
    pub fn forget_all(&mut self) {
        self.known = 0;
        self.partial = [0; COUNT];
        self.partly = 0;
        self.why = [why::current(); COUNT];
    }

    /// An iced register's value (zero-extended), if its tracked register is known.
    pub fn read(&self, r: Register) -> Option<u64> {
        self.read_slot(slot(r)?)
    }

    /// The value of the part of a tracked register `s` names (zero-extended), if known.
    #[inline]
    pub fn read_slot(&self, s: Slot) -> Option<u64> {
        Some((self.get(s.reg)? >> s.shift) & mask(s.bytes))
    }

    /// Writes an iced register as the CPU does: a 32-bit write zero-extends to 64 bits; an 8- or
    /// 16-bit write keeps the other bits, so it is known only if they were. Untracked registers
    /// are ignored.
    pub fn write(&mut self, r: Register, value: Option<u64>) {
        if let Some(s) = slot(r) {
            self.write_slot(s, value);
        }
    }

    /// Writes the part of a tracked register `s` names, as [`Self::write`] does.
    #[inline]
    pub fn write_slot(&mut self, s: Slot, value: Option<u64>) {
        let new = match (s.bytes, value) {
            (8, v) => v,
            (4, v) if matches!(s.reg, Reg::Gpr(_)) => v.map(|v| v & mask(4)),
            (_, Some(v)) => self.get(s.reg).map(|old| {
                let m = mask(s.bytes) << s.shift;
                (old & !m) | ((v << s.shift) & m)
            }),
            (_, None) => None,
        };
        self.set(s.reg, new);
    }

    /// What [`Self::read_slot`] gives for part of general-purpose register `n` (`bytes`
    /// bytes from bit `shift`): the translated instructions' reads, without the look up of a
    /// register's index by its kind.
    #[inline(always)]
    pub fn read_gpr(&self, n: u8, shift: u8, bytes: u8) -> Option<u64> {
        let i = usize::from(n & 15);
        if self.known & (1 << i) == 0 {
            why::saw(self.why[i]);
            return None;
        }
        Some((self.values[i] >> shift) & mask(u32::from(bytes)))
    }

    /// What [`Self::write_slot`] does for part of general-purpose register `n`, the common
    /// cases at once (a known value into a whole register, its low half, or a known one).
    #[inline(always)]
    pub fn write_gpr(&mut self, n: u8, shift: u8, bytes: u8, value: Option<u64>) {
        let i = usize::from(n & 15);
        match (bytes, value) {
            (8, Some(v)) => {
                self.values[i] = v;
                self.known |= 1 << i;
            }
            (4, Some(v)) => {
                self.values[i] = v & mask(4);
                self.known |= 1 << i;
            }
            (_, Some(v)) if self.known & (1 << i) != 0 => {
                let m = mask(u32::from(bytes)) << shift;
                self.values[i] = (self.values[i] & !m) | ((v << shift) & m);
            }
            _ => self.write_slot(
                Slot {
                    reg: Reg::Gpr(n),
                    shift: u32::from(shift),
                    bytes: u32::from(bytes),
                },
                value,
            ),
        }
    }

    /// Makes the tracked register holding `r` unknown.
    pub fn forget(&mut self, r: Register) {
        if let Some(s) = slot(r) {
            self.set(s.reg, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_registers_read_and_write_as_the_cpu_does() {
        let mut f = RegFile::default();
        f.write(Register::RAX, Some(0x1122_3344_5566_7788));
        assert_eq!(f.read(Register::EAX), Some(0x5566_7788));
        assert_eq!(f.read(Register::AH), Some(0x77));
        f.write(Register::AH, Some(0xff));
        assert_eq!(f.read(Register::RAX), Some(0x1122_3344_5566_ff88));
        f.write(Register::EAX, Some(0xffff_ffff_0000_0001));
        assert_eq!(f.read(Register::RAX), Some(1), "32-bit writes zero-extend");
        f.write(Register::RBX, None);
        f.write(Register::BL, Some(1));
        assert_eq!(f.read(Register::RBX), None, "an 8-bit write into an unknown register");
        f.write(Register::R9D, Some(5));
        assert_eq!(f.get(Reg::Gpr(9)), Some(5));
        assert_eq!(f.read(Register::XMM0), None);
        assert_eq!(Reg::from_name("r11"), Some(R11));
        assert_eq!(Reg::from_name("fs_base"), Some(Reg::FsBase));
        assert_eq!(slot(Register::FS).map(|s| s.reg), Some(Reg::Segment(4)));
        // Every iced register, against iced's own description of it.
        for r in Register::values() {
            let expected = if r.is_segment_register() {
                Some((Reg::Segment((r as u32 - Register::ES as u32) as u8), 0, 2))
            } else if r.is_gpr() {
                let high = (Register::AH..=Register::BH).contains(&r);
                let full = r.full_register() as u32 - Register::RAX as u32;
                Some((Reg::Gpr(full as u8), if high { 8 } else { 0 }, r.size() as u32))
            } else {
                None
            };
            assert_eq!(slot(r).map(|s| (s.reg, s.shift, s.bytes)), expected, "{r:?}");
        }
    }
}

//! Reading the two passes' states at one position together: a value is known if either pass
//! knows it; if both know it differently it is a model error, reported as unknown (a
//! [`Conflict`], which callers count).

use super::{Reg, State, Why};
use crate::image::AddressSpace;

/// The two passes' states at one position, read together.
pub struct Known {
    forward: State,
    backward: State,
    space: AddressSpace,
}

/// A value both passes know differently: a model error, reported as unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conflict;

/// The known bytes from an address on, as [`Known::memory_prefix`] finds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KnownPrefix {
    /// The bytes, up to the first unknown one (or the length asked for).
    pub bytes: Vec<u8>,
    /// Whether the prefix ends at a byte the passes know differently (unknown, and a model
    /// error the caller should count).
    pub conflict: bool,
}

impl Known {
    /// One state knowing what either pass knows (the forward one's value where both know
    /// it): what a walk from this position starts from.
    pub(super) fn merged(&self) -> State {
        let mut st = self.forward.clone();
        st.absorb(&self.backward);
        st
    }

    /// Both passes' states at one position, over the images of `space`.
    pub(super) fn new(forward: State, backward: State, space: AddressSpace) -> Self {
        Self {
            forward,
            backward,
            space,
        }
    }

    /// A register, if known; `Err` if the passes disagree.
    pub fn register(&self, r: Reg) -> Result<Option<u64>, Conflict> {
        merge(self.forward.regs.get(r), self.backward.regs.get(r))
    }

    /// Why a register is unknown to each pass (forward, backward); `None` where known.
    pub fn why_register(&self, r: Reg) -> (Option<Why>, Option<Why>) {
        (self.forward.regs.why(r), self.backward.regs.why(r))
    }

    /// Why a byte of the low `len` of vector register `i` (0–31) is unknown to each pass
    /// (forward, backward); `None` where all are known.
    pub fn why_vector(&self, i: usize, len: usize) -> (Option<Why>, Option<Why>) {
        (self.forward.vec.why(i, len), self.backward.vec.why(i, len))
    }

    /// Why a byte is unknown to each pass (forward, backward); `None` where known.
    pub fn why_memory(&self, addr: u64) -> (Option<Why>, Option<Why>) {
        (
            self.forward.mem.why(addr, &self.space),
            self.backward.mem.why(addr, &self.space),
        )
    }

    /// RFLAGS (all 32 bits), if known.
    pub fn eflags(&self) -> Result<Option<u64>, Conflict> {
        let (f, b) = (self.forward.flags, self.backward.flags);
        let both = f.known & b.known;
        if (f.value ^ b.value) & both != 0 {
            return Err(Conflict);
        }
        let mut m = f;
        m.put(b.known & !f.known, b.value);
        Ok(m.get())
    }

    /// Vector register `i` (0–31), byte by byte: zmm's 64 bytes, the low 32 being ymm and the
    /// low 16 xmm.
    pub fn vector(&self, i: usize) -> Result<[Option<u8>; 64], Conflict> {
        let (f, b) = (self.forward.vec.get(i), self.backward.vec.get(i));
        let mut out = [None; 64];
        for (at, slot) in out.iter_mut().enumerate() {
            *slot = merge(f.byte(at), b.byte(at))?;
        }
        Ok(out)
    }

    /// Opmask register `i` (0–7), if every bit is known.
    pub fn opmask(&self, i: usize) -> Result<Option<u64>, Conflict> {
        let ((fv, fk), (bv, bk)) = (self.forward.vec.k.get(i), self.backward.vec.k.get(i));
        if (fv ^ bv) & fk & bk != 0 {
            return Err(Conflict);
        }
        Ok((fk | bk == u64::MAX).then_some(fv | bv))
    }

    /// MXCSR, if every bit is known.
    pub fn mxcsr(&self) -> Result<Option<u32>, Conflict> {
        let (f, b) = (self.forward.mxcsr, self.backward.mxcsr);
        if (f.value() ^ b.value()) & f.known_bits() & b.known_bits() != 0 {
            return Err(Conflict);
        }
        let known = f.known_bits() | b.known_bits();
        let value = (f.value() & f.known_bits()) | (b.value() & b.known_bits() & !f.known_bits());
        Ok((known == u32::MAX).then_some(value))
    }

    /// The byte at `addr`, if known (memory of either pass, or a read-only image).
    fn byte(&self, addr: u64) -> Result<Option<u8>, Conflict> {
        merge(
            self.forward.mem.read_byte(addr, &self.space),
            self.backward.mem.read_byte(addr, &self.space),
        )
    }

    /// `len` bytes at `addr` if every one is known.
    pub fn memory(&self, addr: u64, len: usize) -> Result<Option<Vec<u8>>, Conflict> {
        let mut out = Vec::with_capacity(len);
        for i in 0..len as u64 {
            match self.byte(addr.wrapping_add(i))? {
                Some(v) => out.push(v),
                None => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    /// The longest run of known bytes at `addr`, at most `max_len`: what a debugger's memory
    /// read is answered with (gdb takes a short read as "the rest is unreadable"). One look
    /// per byte, so the cost is linear in the length; the run stops at the end of the address
    /// space.
    pub fn memory_prefix(&self, addr: u64, max_len: usize) -> KnownPrefix {
        let mut prefix = KnownPrefix::default();
        for i in 0..max_len as u64 {
            let Some(a) = addr.checked_add(i) else { break };
            match self.byte(a) {
                Ok(Some(v)) => prefix.bytes.push(v),
                Ok(None) => break,
                Err(Conflict) => {
                    prefix.conflict = true;
                    break;
                }
            }
        }
        prefix
    }
}

fn merge<T: PartialEq>(a: Option<T>, b: Option<T>) -> Result<Option<T>, Conflict> {
    match (a, b) {
        (Some(a), Some(b)) if a != b => Err(Conflict),
        (Some(a), _) => Ok(Some(a)),
        (None, b) => Ok(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Image;

    fn known(forward: &[(u64, &[u8])], backward: &[(u64, &[u8])]) -> Known {
        let state = |writes: &[(u64, &[u8])]| {
            let mut st = State::unknown();
            writes.iter().for_each(|&(a, b)| st.mem.write(a, b));
            st
        };
        let mut space = AddressSpace::new();
        space.add(Image::from_raw("ro", 0x1000, vec![1, 2, 3, 4])).expect("add");
        Known::new(state(forward), state(backward), space)
    }

    fn prefix(bytes: &[u8], conflict: bool) -> KnownPrefix {
        KnownPrefix {
            bytes: bytes.to_vec(),
            conflict,
        }
    }

    #[test]
    fn the_prefix_runs_over_either_pass_and_stops_at_the_first_unknown_byte() {
        // Forward knows 0x2000..0x2002, backward 0x2002..0x2004: one run of four.
        let k = known(&[(0x2000, &[9, 8])], &[(0x2002, &[7, 6])]);
        assert_eq!(k.memory_prefix(0x2000, 10), prefix(&[9, 8, 7, 6], false));
        assert_eq!(k.memory_prefix(0x2001, 2), prefix(&[8, 7], false), "at most max_len");
        assert_eq!(k.memory_prefix(0x1fff, 4), prefix(&[], false), "unknown first byte");
        assert_eq!(k.memory_prefix(0x2000, 0), prefix(&[], false));
        assert_eq!(k.memory(0x2000, 4), Ok(Some(vec![9, 8, 7, 6])), "the same as memory()");
        assert_eq!(k.memory(0x2000, 5), Ok(None));
    }

    #[test]
    fn read_only_image_bytes_are_known_and_end_where_the_image_ends() {
        let k = known(&[(0x1004, &[5])], &[]);
        assert_eq!(k.memory_prefix(0x1001, 100), prefix(&[2, 3, 4, 5], false));
        assert_eq!(k.memory_prefix(0x1000, 3), prefix(&[1, 2, 3], false));
    }

    #[test]
    fn a_byte_the_passes_know_differently_ends_the_prefix_and_is_reported() {
        let k = known(&[(0x3000, &[1, 2, 3])], &[(0x3001, &[2, 9])]);
        assert_eq!(k.memory_prefix(0x3000, 8), prefix(&[1, 2], true));
        assert_eq!(k.memory(0x3000, 3), Err(Conflict));
        assert_eq!(k.memory_prefix(0x3002, 8), prefix(&[], true), "nothing before it");
    }

    #[test]
    fn the_prefix_stops_at_the_end_of_the_address_space() {
        let k = known(&[(u64::MAX - 1, &[1, 2])], &[]);
        assert_eq!(k.memory_prefix(u64::MAX - 1, 4096), prefix(&[1, 2], false));
    }

    #[test]
    fn a_long_prefix_costs_one_look_per_byte() {
        // 4 MiB known: a search trying every length would not finish; a linear one takes
        // well under a second (the bound only catches a hang).
        let big = vec![0xab; 4 << 20];
        let k = known(&[(0x10_0000, &big)], &[]);
        let t = std::time::Instant::now();
        let p = k.memory_prefix(0x10_0000, 8 << 20);
        assert_eq!(p.bytes.len(), 4 << 20);
        assert!(p.bytes.iter().all(|&b| b == 0xab));
        assert!(t.elapsed().as_secs() < 30, "{:?}", t.elapsed());
    }
}

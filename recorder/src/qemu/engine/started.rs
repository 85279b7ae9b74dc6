//! A block that started, as the plugin's vCPU hands it to the engine's thread: the block and
//! the counts of the block before it, in one 64-bit word (the ring between the two cores
//! passes cache lines back and forth, so the fewer bytes an entry, the fewer lines).

use super::Counts;

/// Bits of the word holding the started count of the block before, then its accessed count.
const STARTED_BITS: u32 = 20;
const ACCESSED_BITS: u32 = 12;

/// A block that started, and the counts of the block that ran before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// The block's id (its index in the engine's table).
    pub id: u32,
    /// The counts of the block before it.
    pub before: Counts,
}

impl Started {
    /// As one word. A block holds at most a few hundred instructions, so its started count
    /// fits; an accessed count beyond its field only needs to stay above zero, and does.
    #[inline]
    pub fn word(self) -> u64 {
        let started = self.before.started.min((1 << STARTED_BITS) - 1);
        let accessed = self.before.accessed.min((1 << ACCESSED_BITS) - 1);
        u64::from(self.id) | started << 32 | accessed << (32 + STARTED_BITS)
    }

    /// From [`Self::word`].
    #[inline]
    pub fn from_word(word: u64) -> Self {
        Started {
            id: word as u32,
            before: Counts {
                started: (word >> 32) & ((1 << STARTED_BITS) - 1),
                accessed: word >> (32 + STARTED_BITS),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_keeps_the_block_and_its_counts() {
        let s = Started {
            id: 0xdead_beef,
            before: Counts {
                started: 17,
                accessed: 2,
            },
        };
        assert_eq!(Started::from_word(s.word()), s);
        let many = Started {
            id: 1,
            before: Counts {
                started: 512,
                accessed: 1 << 40,
            },
        };
        let back = Started::from_word(many.word());
        assert_eq!((back.id, back.before.started), (1, 512));
        assert_eq!(back.before.accessed, (1 << ACCESSED_BITS) - 1, "saturated, above zero");
    }
}

//! A block that started, as the plugin's vCPU hands it to the engine's thread: the block and
//! the counts of the block before it, in one 64-bit word (the ring between the two cores
//! passes cache lines back and forth, so the fewer bytes an entry, the fewer lines).

use super::Counts;

/// The id of an entry that marks a system call the plugin deferred to the engine's thread
/// (no block has it).
pub const SYSCALL_MARK: u32 = u32::MAX;

/// The id of an entry that marks where the plugin read what an instruction of the running
/// block wrote (`crate::qemu::timestamps`; no block has it, and the engine never sees it).
pub const RESULT_MARK: u32 = u32::MAX - 1;

/// The id of an entry that marks a switch between threads (`crate::qemu::engine::Switch`;
/// no block has it): what the switch is waits beside the ring, in order.
pub const SWITCH_MARK: u32 = u32::MAX - 2;

/// Bits of the word holding the started count of the block before.
const STARTED_BITS: u32 = 32;

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
    /// fits.
    #[inline]
    pub fn word(self) -> u64 {
        let started = self.before.started.min((1 << STARTED_BITS) - 1);
        u64::from(self.id) | started << 32
    }

    /// From [`Self::word`].
    #[inline]
    pub fn from_word(word: u64) -> Self {
        Started {
            id: word as u32,
            before: Counts { started: word >> 32 },
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
            before: Counts { started: 17 },
        };
        assert_eq!(Started::from_word(s.word()), s);
        let many = Started {
            id: 1,
            before: Counts { started: 1 << 40 },
        };
        let back = Started::from_word(many.word());
        assert_eq!((back.id, back.before.started), (1, (1 << 32) - 1), "saturated");
    }
}

//! The distinct runs of a history ("blocks") and their instructions' addresses, each decoded
//! once however often the block ran.

/// Blocks, numbered in the order they first ran.
#[derive(Debug, Clone)]
pub(super) struct Blocks {
    /// Every block's addresses, one block after another.
    pub(super) ips: Vec<u64>,
    /// Where each block's addresses start in `ips`, and one more: where the last ends.
    pub(super) starts: Vec<u32>,
}

impl Default for Blocks {
    fn default() -> Self {
        Self {
            ips: Vec::new(),
            starts: vec![0],
        }
    }
}

impl Blocks {
    /// Adds a block of these addresses; its number.
    pub(super) fn add(&mut self, ips: &[u64]) -> u32 {
        self.ips.extend_from_slice(ips);
        let end = u32::try_from(self.ips.len()).expect("fewer than 4 G distinct instructions");
        self.starts.push(end);
        (self.starts.len() - 2) as u32
    }

    /// A block of the one instruction at `ip`.
    pub(super) fn single(&mut self, ip: u64) -> u32 {
        self.add(&[ip])
    }

    /// Block `b`'s addresses.
    pub(super) fn ips(&self, b: u32) -> &[u64] {
        let b = b as usize;
        &self.ips[self.starts[b] as usize..self.starts[b + 1] as usize]
    }

    /// Where block `b`'s addresses start in `ips`.
    pub(super) fn start(&self, b: u32) -> usize {
        self.starts[b as usize] as usize
    }

    /// Block `b`'s number of instructions.
    pub(super) fn len(&self, b: u32) -> u32 {
        let b = b as usize;
        self.starts[b + 1] - self.starts[b]
    }

    /// Number of blocks.
    pub(super) fn count(&self) -> usize {
        self.starts.len() - 1
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.ips.capacity() * 8 + self.starts.capacity() * 4
    }
}

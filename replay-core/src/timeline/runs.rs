//! The sequence of runs' blocks, compressed: a run is told by which of the previous block's
//! successors it is, in a nibble when it is one of the first 15 (93 % of python3's runs, 99 %
//! of sort's: code runs where it ran before), so that the history stays smaller than the
//! trace it was decoded from (issue 40: 4.25 bytes a run before, 0.5–0.7 now).
//!
//! A run's code, after the block `prev` that ran before it:
//! - nibble `i` < 15: the `i`th successor of `prev` (the order in which they first followed it);
//! - nibble 15, then a byte `i` < 255 (two nibbles, low first): successor `15 + i`;
//! - nibble 15, byte 255, then the block's number in eight nibbles: a successor beyond those.
//!
//! Codes only say something after the block before them, so every [`STRIDE`]th run is marked
//! with its first position, where its code starts and the block before it: a run is found from
//! the mark before it, decoding at most `STRIDE` codes; a pass going backwards decodes a chunk
//! of `STRIDE` runs at a time.

use rustc_hash::FxHashMap;

/// Runs between two marks.
pub(super) const STRIDE: usize = 128;

/// Successors a block's list holds at most (those reachable by a nibble or a byte).
pub(super) const LISTED: usize = 15 + 255;

/// The block "before" the first run.
pub(super) const NONE: u32 = u32::MAX;

/// The runs of a history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Runs {
    /// Nibbles, two a byte, the low one first.
    pub(super) codes: Vec<u8>,
    /// Nibbles written.
    pub(super) nibbles: u64,
    /// Runs written.
    pub(super) count: usize,
    /// The successors of each block as they first followed it: list 0 is the first run's,
    /// list `b + 1` block `b`'s.
    pub(super) next: Vec<Vec<u32>>,
    /// Of every [`STRIDE`]th run: its first position, its first nibble, the block before it.
    pub(super) mark_positions: Vec<u64>,
    pub(super) mark_nibbles: Vec<u64>,
    pub(super) mark_before: Vec<u32>,
    /// The block of the last run.
    pub(super) last: Option<u32>,
    /// Where a block is in a long list, past its first [`NEAR`] entries: a return's list
    /// holds a successor for every call site, and scanning them at every run cost a tenth of
    /// the decode.
    pub(super) far: FxHashMap<(u32, u32), u16>,
    /// The first 15 entries of every list and its length in a row of one cache line:
    /// decoding or adding a run then costs one load that depends on the run before (two
    /// through `next`, the decode's critical path).
    pub(super) near: Vec<Near>,
}

/// A list's first entries ([`Runs::near`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(align(64))]
pub(super) struct Near([u32; 16]);

/// Entries of a list in its row of [`Runs::near`], looked through one by one before
/// [`Runs::far`]; the row's last word holds the list's length.
const NEAR: usize = 15;

/// The list of `prev`'s successors.
#[inline]
fn list(prev: u32) -> usize {
    prev.wrapping_add(1) as usize
}

impl Runs {
    /// Appends a run of `block` starting at `position`.
    #[inline]
    pub(super) fn push(&mut self, block: u32, position: u64) {
        let prev = self.last.unwrap_or(NONE);
        if self.count % STRIDE == 0 {
            self.mark_positions.push(position);
            self.mark_nibbles.push(self.nibbles);
            self.mark_before.push(prev);
        }
        let l = list(prev);
        if self.near.len() <= l {
            self.next.resize_with(l + 1, Vec::new);
            self.near.resize(l + 1, Near::default());
        }
        // The row holds the list's first entries and its length: most runs read nothing else.
        let row = &mut self.near[l].0;
        let listed = row[15] as usize;
        let index = match row[..listed.min(NEAR)].iter().position(|&b| b == block) {
            Some(i) => Some(i),
            None if listed <= NEAR => None,
            None => self.far.get(&(prev, block)).map(|&i| i as usize),
        }
        .or_else(|| {
            (listed < LISTED).then(|| {
                self.next[l].push(block);
                row[15] = listed as u32 + 1;
                if listed < NEAR {
                    row[listed] = block;
                } else {
                    self.far.insert((prev, block), listed as u16);
                }
                listed
            })
        });
        match index {
            Some(i) if i < 15 => self.put(i as u8),
            Some(i) => {
                self.put(15);
                self.put_byte((i - 15) as u8);
            }
            None => {
                self.put(15);
                self.put_byte(255);
                for k in 0..8 {
                    self.put((block >> (4 * k)) as u8 & 15);
                }
            }
        }
        self.count += 1;
        self.last = Some(block);
    }

    #[inline]
    fn put(&mut self, nibble: u8) {
        if self.nibbles % 2 == 0 {
            self.codes.push(nibble);
        } else {
            *self.codes.last_mut().expect("a byte with a free nibble") |= nibble << 4;
        }
        self.nibbles += 1;
    }

    fn put_byte(&mut self, byte: u8) {
        self.put(byte & 15);
        self.put(byte >> 4);
    }

    #[inline]
    fn nibble(&self, at: u64) -> u8 {
        (self.codes[(at / 2) as usize] >> ((at % 2) * 4)) & 15
    }

    /// The block of the run whose code starts at nibble `*at`, after `prev`; moves `at` past
    /// the code.
    #[inline]
    pub(super) fn decode(&self, at: &mut u64, prev: u32) -> u32 {
        let byte = self.codes[(*at / 2) as usize];
        let c = (byte >> ((*at % 2) * 4)) & 15;
        if c < 15 {
            *at += 1;
            return self.near[list(prev)].0[c as usize];
        }
        self.decode_long(at, prev)
    }

    /// [`Self::decode`] of a code longer than a nibble.
    #[inline(never)]
    fn decode_long(&self, at: &mut u64, prev: u32) -> u32 {
        let i = self.nibble(*at + 1) | (self.nibble(*at + 2) << 4);
        *at += 3;
        if i < 255 {
            return self.next[list(prev)][15 + i as usize];
        }
        let block = (0..8).fold(0u32, |b, k| b | u32::from(self.nibble(*at + k)) << (4 * k));
        *at += 8;
        block
    }

    /// Builds the lists' indexes ([`Self::near`], [`Self::far`]) for runs read back.
    pub(super) fn index(&mut self) {
        self.near = vec![Near::default(); self.next.len()];
        for (l, successors) in self.next.iter().enumerate() {
            let prev = (l as u32).wrapping_sub(1);
            self.near[l].0[15] = successors.len() as u32;
            for (i, &b) in successors.iter().enumerate() {
                if i < NEAR {
                    self.near[l].0[i] = b;
                } else {
                    self.far.insert((prev, b), i as u16);
                }
            }
        }
    }

    /// Number of marks (chunks of up to [`STRIDE`] runs).
    pub(super) fn chunks(&self) -> usize {
        self.mark_positions.len()
    }

    /// The runs of chunk `k`: their blocks, into `out` (cleared first).
    pub(super) fn chunk(&self, k: usize, out: &mut Vec<u32>) {
        out.clear();
        let n = (self.count - k * STRIDE).min(STRIDE);
        let (mut at, mut prev) = (self.mark_nibbles[k], self.mark_before[k]);
        for _ in 0..n {
            prev = self.decode(&mut at, prev);
            out.push(prev);
        }
    }

    /// The runs of chunks `first..first + out.len()`, each into its `out` (cleared first):
    /// decoded side by side, since each run's decode waits for the one before it, and
    /// several chains of such waits overlap where one cannot (a search over every run).
    pub(super) fn chunks_into(&self, first: usize, out: &mut [Vec<u32>]) {
        let mut lanes: Vec<(u64, u32, usize)> = (first..first + out.len())
            .map(|k| {
                let n = (self.count - k * STRIDE).min(STRIDE);
                (self.mark_nibbles[k], self.mark_before[k], n)
            })
            .collect();
        out.iter_mut().for_each(Vec::clear);
        for i in 0..STRIDE {
            for (lane, o) in lanes.iter_mut().zip(out.iter_mut()) {
                if i < lane.2 {
                    lane.1 = self.decode(&mut lane.0, lane.1);
                    o.push(lane.1);
                }
            }
        }
    }

    /// The blocks of runs `from..`, in order.
    pub(super) fn iter_from(&self, from: usize) -> Iter<'_> {
        let mut it = Iter {
            runs: self,
            at: 0,
            prev: NONE,
            left: self.count.saturating_sub(from),
        };
        if from < self.count {
            let k = from / STRIDE;
            (it.at, it.prev) = (self.mark_nibbles[k], self.mark_before[k]);
            for _ in k * STRIDE..from {
                it.prev = self.decode(&mut it.at, it.prev);
            }
        }
        it
    }

    /// Resident bytes.
    pub(super) fn heap_bytes(&self) -> usize {
        self.codes.capacity()
            + self.next.capacity() * size_of::<Vec<u32>>()
            + self.next.iter().map(|l| l.capacity() * 4).sum::<usize>()
            + self.mark_positions.capacity() * 8
            + self.mark_nibbles.capacity() * 8
            + self.mark_before.capacity() * 4
            + self.far.capacity() * 16
            + self.near.capacity() * size_of::<Near>()
    }

    /// Makes room for about `runs` more runs.
    pub(super) fn reserve(&mut self, runs: usize) {
        if self.codes.try_reserve(runs / 2).is_ok() {
            let marks = runs / STRIDE + 1;
            let _ = self.mark_positions.try_reserve(marks);
            let _ = self.mark_nibbles.try_reserve(marks);
            let _ = self.mark_before.try_reserve(marks);
        }
    }

    /// Gives back unused room.
    pub(super) fn shrink_to_fit(&mut self) {
        self.codes.shrink_to_fit();
        self.mark_positions.shrink_to_fit();
        self.mark_nibbles.shrink_to_fit();
        self.mark_before.shrink_to_fit();
    }

    /// Whether the runs can be decoded without a lookup out of bounds, every block below
    /// `blocks`, and the marks say where their runs are (their positions from `len`, each
    /// block's length): a stored history read back is checked so before it is used. Each
    /// chunk of runs is checked from its mark to the next, the chunks on every core.
    pub(super) fn check(&self, blocks: u32, len_of: impl Fn(u32) -> u64 + Sync, len: u64) -> Result<(), &'static str> {
        if self.next.iter().flatten().any(|&b| b >= blocks) || self.next.iter().any(|l| l.len() > LISTED) {
            return Err("a successor list out of range");
        }
        if self.next.len() > blocks as usize + 1 {
            return Err("more successor lists than blocks");
        }
        let marks = self.count.div_ceil(STRIDE);
        if [
            self.mark_nibbles.len(),
            self.mark_before.len(),
            self.mark_positions.len(),
        ] != [marks; 3]
        {
            return Err("run marks out of count");
        }
        if self.codes.len() as u64 != self.nibbles.div_ceil(2) {
            return Err("run codes out of count");
        }
        if marks > 0 && (self.mark_positions[0], self.mark_nibbles[0], self.mark_before[0]) != (0, 0, NONE) {
            return Err("a run mark that is not where its run is");
        }
        // Where each chunk must end: the next mark, or the end of everything.
        let end_of = |k: usize| match k + 1 < marks {
            true => (
                self.mark_positions[k + 1],
                self.mark_nibbles[k + 1],
                self.mark_before[k + 1],
            ),
            false => (len, self.nibbles, self.last.unwrap_or(NONE)),
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(marks.max(1));
        let share = marks.div_ceil(threads);
        let len_of = &len_of;
        let results: Vec<Result<(), &'static str>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    scope.spawn(move || {
                        (t * share..((t + 1) * share).min(marks))
                            .try_for_each(|k| self.check_chunk(k, blocks, len_of, end_of(k)))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(Err("the check stopped")))
                .collect()
        });
        results.into_iter().collect::<Result<(), _>>()?;
        if marks == 0 && (len != 0 || self.nibbles != 0 || self.last.is_some()) {
            return Err("runs that do not add up to the history's length");
        }
        Ok(())
    }

    /// Checks chunk `k`: every code decodes within its list and the codes, every block is
    /// below `blocks`, and the chunk ends at `end` (position, nibble, last block).
    fn check_chunk(
        &self,
        k: usize,
        blocks: u32,
        len_of: &impl Fn(u32) -> u64,
        end: (u64, u64, u32),
    ) -> Result<(), &'static str> {
        let (mut position, mut at, mut prev) = (self.mark_positions[k], self.mark_nibbles[k], self.mark_before[k]);
        for _ in k * STRIDE..((k + 1) * STRIDE).min(self.count) {
            if at >= self.nibbles {
                return Err("run codes end early");
            }
            let c = self.nibble(at);
            let listed = self.next.get(list(prev)).map_or(0, Vec::len);
            let code_end = match c {
                15 if at + 3 > self.nibbles => return Err("run codes end early"),
                15 => match self.nibble(at + 1) | (self.nibble(at + 2) << 4) {
                    255 => at + 11,
                    i if 15 + (i as usize) < listed => at + 3,
                    _ => return Err("a run code past its successor list"),
                },
                c if (c as usize) < listed => at + 1,
                _ => return Err("a run code past its successor list"),
            };
            if code_end > self.nibbles {
                return Err("run codes end early");
            }
            let block = self.decode(&mut at, prev);
            if block >= blocks {
                return Err("a run of a block that does not exist");
            }
            position += len_of(block);
            prev = block;
        }
        match (position, at, prev) == end {
            true => Ok(()),
            false => Err("runs that do not add up to the history's length"),
        }
    }
}

/// The blocks of consecutive runs ([`Runs::iter_from`]).
pub(super) struct Iter<'a> {
    runs: &'a Runs,
    at: u64,
    prev: u32,
    left: usize,
}

impl Iterator for Iter<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        self.prev = self.runs.decode(&mut self.at, self.prev);
        Some(self.prev)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_length_decodes_to_the_block_pushed() {
        // A block with more successors than a nibble and a byte can name.
        let mut r = Runs::default();
        let mut want = Vec::new();
        let mut position = 0;
        for round in 0..3u32 {
            for b in 1..(LISTED as u32 + 40) {
                for block in [0, b * 7 + round % 2] {
                    r.push(block, position);
                    want.push(block);
                    position += 1;
                }
            }
        }
        assert!(r.nibbles > r.count as u64, "some codes took more than a nibble");
        let got: Vec<u32> = r.iter_from(0).collect();
        assert_eq!(got, want);
        for from in [0, 1, STRIDE - 1, STRIDE, STRIDE + 1, want.len() - 1, want.len()] {
            assert_eq!(r.iter_from(from).collect::<Vec<_>>(), want[from..], "from {from}");
        }
        let mut chunk = Vec::new();
        r.chunk(r.chunks() - 1, &mut chunk);
        assert_eq!(chunk, want[(r.chunks() - 1) * STRIDE..]);
        let blocks = want.iter().max().unwrap() + 1;
        assert_eq!(r.check(blocks, |_| 1, position), Ok(()));
        assert!(r.check(blocks, |_| 1, position + 1).is_err());
        assert!(r.check(blocks - 1, |_| 1, position).is_err());
    }

    #[test]
    fn a_damaged_code_is_refused_by_the_check() {
        let mut r = Runs::default();
        for (i, b) in [0u32, 1, 0, 2, 0, 1].iter().enumerate() {
            r.push(*b, i as u64);
        }
        assert_eq!(r.check(3, |_| 1, 6), Ok(()));
        // The first run's list holds one block: code 5 is past it.
        r.codes[0] = (r.codes[0] & 0xf0) | 5;
        assert_eq!(r.check(3, |_| 1, 6), Err("a run code past its successor list"));
    }
}

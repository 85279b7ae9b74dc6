//! The decoded history against the recorder's list of the code each stretch ran
//! ([`CodeRan`]): a `continue` before the decode believed the list, so an instruction on a
//! page the list leaves out of its stretch must be found and said, never passed over.

use crate::recording::code_ran::CodeRan;

use super::runs::STRIDE;
use super::Timeline;

/// Chunks of runs decoded at once.
const GROUP: usize = 8;

impl Timeline {
    /// The first position (below what `code` covers) whose instruction is on a page `code`
    /// does not give for its stretch, and that instruction's address; `None` if there is none.
    /// Each block is looked at once per stretch; a run that crosses from one stretch into
    /// the next, instruction by instruction. The chunks of runs are shared out between the
    /// cores.
    pub fn code_outside(&self, code: &CodeRan) -> Option<(u64, u64)> {
        let chunks = self.runs.chunks();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let share = chunks.div_ceil(cores).max(1);
        std::thread::scope(|scope| {
            let parts: Vec<_> = (0..chunks)
                .step_by(share)
                .map(|k| scope.spawn(move || self.code_outside_in(code, k, (k + share).min(chunks))))
                .collect();
            parts.into_iter().filter_map(|p| p.join().ok().flatten()).min()
        })
    }

    /// [`Self::code_outside`] over the chunks of runs `first..end`.
    fn code_outside_in(&self, code: &CodeRan, first: usize, end: usize) -> Option<(u64, u64)> {
        let until = self.len.min(code.covers());
        // The stretch each block was last found inside, plus one (0: none yet).
        let mut checked = vec![0u32; self.blocks.count()];
        let mut group: Vec<Vec<u32>> = (0..GROUP).map(|_| Vec::with_capacity(STRIDE)).collect();
        let mut start = *self.runs.mark_positions.get(first)?;
        let mut stretch = code.stretch_of(start)?;
        let mut k = first;
        while k < end {
            let n = GROUP.min(end - k);
            self.runs.chunks_into(k, &mut group[..n]);
            for &b in group[..n].iter().flatten() {
                if start >= until {
                    return None;
                }
                let ips = self.blocks.ips(b);
                while start >= code.end_of(stretch) {
                    stretch += 1;
                }
                let next = start + ips.len() as u64;
                if next <= code.end_of(stretch) {
                    if checked[b as usize] != stretch as u32 + 1 {
                        if let Some(i) = ips.iter().position(|&ip| !code.ran(stretch, ip)) {
                            return Some((start + i as u64, ips[i]));
                        }
                        checked[b as usize] = stretch as u32 + 1;
                    }
                } else {
                    for (i, &ip) in ips.iter().enumerate() {
                        let p = start + i as u64;
                        if p >= until {
                            return None;
                        }
                        match code.stretch_of(p) {
                            Some(s) if code.ran(s, ip) => {}
                            _ => return Some((p, ip)),
                        }
                    }
                }
                start = next;
            }
            k += n;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use crate::flow::FlowSink;
    use crate::image::{AddressSpace, Image};
    use crate::recording::code_ran::{encode_stretch, CodeRan, MAGIC};
    use crate::timeline::Builder;

    fn list(stretches: &[(u64, &[u64])]) -> CodeRan {
        let mut out = MAGIC.to_vec();
        let mut before = 0;
        for &(end, pages) in stretches {
            encode_stretch(before, end, pages, &mut out);
            before = end;
        }
        CodeRan::decode(&out).expect("a list")
    }

    #[test]
    fn an_instruction_off_its_stretchs_pages_is_found() {
        // Three nops at 0x1ffe (the third on page 2), two at 0x5000: five rounds of both
        // blocks, five positions a round.
        let mut space = AddressSpace::new();
        space.add(Image::from_raw("a", 0x1ffe, vec![0x90; 3])).expect("add");
        space.add(Image::from_raw("b", 0x5000, vec![0x90; 2])).expect("add");
        let mut b = Builder::new(&space);
        for _ in 0..5 {
            b.run(0x1ffe, 3);
            b.run(0x5000, 2);
        }
        let t = b.finish();
        assert_eq!(t.len(), 25);
        assert_eq!(t.code_outside(&list(&[(25, &[1, 2, 5])])), None);
        assert_eq!(t.code_outside(&list(&[(10, &[1, 2, 5]), (25, &[1, 2, 5])])), None);
        // Past what the list covers nothing is checked.
        assert_eq!(t.code_outside(&list(&[(10, &[1, 2, 5])])), None);
        // Page 5 left out of the second stretch: its first instruction there, position 13.
        assert_eq!(
            t.code_outside(&list(&[(10, &[1, 2, 5]), (25, &[1, 2])])),
            Some((13, 0x5000))
        );
        // Page 2 left out of the first: position 2.
        assert_eq!(
            t.code_outside(&list(&[(10, &[1, 5]), (25, &[1, 2, 5])])),
            Some((2, 0x2000))
        );
        // A stretch that ends inside a block: each instruction in its own stretch (position
        // 6 is 0x1fff, in the first; 7 is 0x2000, in the second; 10 is 0x1ffe again).
        assert_eq!(t.code_outside(&list(&[(7, &[1, 2, 5]), (25, &[1, 2, 5])])), None);
        assert_eq!(
            t.code_outside(&list(&[(7, &[1, 2, 5]), (25, &[2, 5])])),
            Some((10, 0x1ffe))
        );
        assert_eq!(
            t.code_outside(&list(&[(6, &[1, 2, 5]), (25, &[2, 5])])),
            Some((6, 0x1fff))
        );
    }

    #[test]
    fn the_first_outside_is_found_whichever_core_looks() {
        let mut space = AddressSpace::new();
        space.add(Image::from_raw("a", 0x1ffe, vec![0x90; 3])).expect("add");
        space.add(Image::from_raw("b", 0x5000, vec![0x90; 2])).expect("add");
        let mut b = Builder::new(&space);
        for _ in 0..3000 {
            b.run(0x1ffe, 3);
            b.run(0x5000, 2);
        }
        let t = b.finish();
        let stretches = |leave: &[(u64, u64)]| {
            let pages: Vec<Vec<u64>> = (0..15)
                .map(|i| [1, 2, 5].into_iter().filter(|p| !leave.contains(&(i, *p))).collect())
                .collect();
            let ends: Vec<(u64, &[u64])> = (0..15).map(|i| ((i + 1) * 1000, &pages[i as usize][..])).collect();
            list(&ends)
        };
        assert_eq!(t.code_outside(&stretches(&[])), None);
        assert_eq!(t.code_outside(&stretches(&[(9, 5)])), Some((9003, 0x5000)));
        assert_eq!(t.code_outside(&stretches(&[(9, 5), (2, 1)])), Some((2000, 0x1ffe)));
    }
}

//! Membership in a sorted list of positions for a walk that asks about one position after
//! its neighbour: the answer's index is kept and moved a step at a time, so a step costs a
//! comparison or two. A binary search per step over python3's barriers (thousands of system
//! calls) missed the cache on every probe and took over half of its walk (issue 19).

/// Where the last question fell in a sorted list.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Nearby(usize);

impl Nearby {
    /// Whether `q` is in `list` (sorted).
    pub(super) fn contains(&mut self, list: &[u64], q: u64) -> bool {
        // The first index whose position is at or after q.
        let fits = |i: usize| (i == 0 || list[i - 1] < q) && (i == list.len() || list[i] >= q);
        let i = self.0.min(list.len());
        self.0 = if fits(i) {
            i
        } else if i < list.len() && fits(i + 1) {
            i + 1
        } else if i > 0 && fits(i - 1) {
            i - 1
        } else {
            list.partition_point(|&x| x < q)
        };
        list.get(self.0) == Some(&q)
    }

    /// The first entry of `list` (sorted) at or after `q`, if any: where a walk forwards
    /// meets the list next.
    pub(super) fn next_from(&mut self, list: &[u64], q: u64) -> Option<u64> {
        self.contains(list, q);
        list.get(self.0).copied()
    }

    /// The last entry of `list` (sorted) at or before `q`, if any: where a walk backwards
    /// meets the list next.
    pub(super) fn last_until(&mut self, list: &[u64], q: u64) -> Option<u64> {
        match self.contains(list, q) {
            true => Some(q),
            false => self.0.checked_sub(1).map(|i| list[i]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_like_a_search_whichever_way_and_however_far_it_moves() {
        let list = [3, 4, 9, 20, 21, 22, 40];
        let mut near = Nearby::default();
        let mut qs: Vec<u64> = (0..45).collect();
        qs.extend((0..45).rev());
        qs.extend([40, 0, 21, 5, 44, 3, 22, 22, 9]);
        for q in qs {
            assert_eq!(near.contains(&list, q), list.binary_search(&q).is_ok(), "at {q}");
        }
        assert!(!Nearby::default().contains(&[], 7));
        let mut near = Nearby::default();
        for q in (0..45).chain((0..45).rev()).chain([40, 0, 21, 5, 44, 3, 22, 22, 9]) {
            let first = list.iter().copied().find(|&x| x >= q);
            assert_eq!(near.next_from(&list, q), first, "from {q}");
            let last = list.iter().copied().rfind(|&x| x <= q);
            assert_eq!(near.last_until(&list, q), last, "until {q}");
        }
    }
}

//! The pages of a memory state in two levels: chunks of [`CHUNK`] pages, each shared until
//! written. A checkpoint clones the chunk map only (a few dozen entries for a real program),
//! not an entry per page: with a flat map, python3's 3,700 pages made every checkpoint cost
//! about 70 KB, which grew with the history (issue 19). A chunk is an array of 64 slots
//! (512 bytes to copy when one of its pages is first written since a checkpoint): a hash map
//! of 512 pages cost 12 % of python3's checkpoints.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::footprint::Footprint;

/// Pages a chunk covers (256 KiB of address space).
const CHUNK: u64 = 64;

type Chunk<T> = [Option<Arc<T>>; CHUNK as usize];

/// Page number → page, copied on write at both levels.
#[derive(Debug)]
pub(super) struct PageTable<T> {
    chunks: FxHashMap<u64, Arc<Chunk<T>>>,
    len: usize,
}

impl<T> Default for PageTable<T> {
    fn default() -> Self {
        Self {
            chunks: FxHashMap::default(),
            len: 0,
        }
    }
}

impl<T> Clone for PageTable<T> {
    fn clone(&self) -> Self {
        Self {
            chunks: self.chunks.clone(),
            len: self.len,
        }
    }
}

/// The chunk of page `p` and its slot there.
fn split(p: u64) -> (u64, usize) {
    (p / CHUNK, (p % CHUNK) as usize)
}

impl<T: Clone> PageTable<T> {
    /// Number of pages.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Page `p`.
    pub(super) fn get(&self, p: u64) -> Option<&Arc<T>> {
        let (c, i) = split(p);
        self.chunks.get(&c)?[i].as_ref()
    }

    /// Page `p`, its chunk made this table's own (the page itself is still shared: the
    /// caller copies it with `Arc::make_mut` if it writes).
    pub(super) fn get_mut(&mut self, p: u64) -> Option<&mut Arc<T>> {
        let (c, i) = split(p);
        let chunk = self.chunks.get_mut(&c)?;
        chunk[i].as_ref()?;
        Arc::make_mut(chunk)[i].as_mut()
    }

    /// The slot of page `p`, its chunk made this table's own (and made if absent).
    fn slot(&mut self, p: u64) -> &mut Option<Arc<T>> {
        let (c, i) = split(p);
        let chunk = self
            .chunks
            .entry(c)
            .or_insert_with(|| Arc::new(std::array::from_fn(|_| None)));
        &mut Arc::make_mut(chunk)[i]
    }

    /// Page `p`, made with `new` if absent.
    pub(super) fn get_or_insert_with(&mut self, p: u64, new: impl FnOnce() -> T) -> &mut Arc<T> {
        let len = &mut self.len;
        let (c, i) = split(p);
        let chunk = self
            .chunks
            .entry(c)
            .or_insert_with(|| Arc::new(std::array::from_fn(|_| None)));
        Arc::make_mut(chunk)[i].get_or_insert_with(|| {
            *len += 1;
            Arc::new(new())
        })
    }

    /// Puts `page` at `p` (sharing it).
    pub(super) fn insert(&mut self, p: u64, page: Arc<T>) {
        if self.slot(p).replace(page).is_none() {
            self.len += 1;
        }
    }

    /// The pages that lie whole within `ranges` ((start, length), bytes; pages of
    /// `page_bytes`), shared with this table: a chunk's worth of pages looked at a time.
    pub(super) fn within(&self, ranges: &[(u64, u64)], page_bytes: u64) -> Self {
        let mut out = Self::default();
        for &(start, len) in ranges {
            let (first, end) = (start.div_ceil(page_bytes), start.saturating_add(len) / page_bytes);
            let mut p = first;
            while p < end {
                let (c, _) = split(p);
                let stop = ((c + 1) * CHUNK).min(end);
                if let Some(chunk) = self.chunks.get(&c) {
                    for q in p..stop {
                        if let Some(page) = &chunk[(q % CHUNK) as usize] {
                            out.insert(q, page.clone());
                        }
                    }
                }
                p = stop;
            }
        }
        out
    }

    /// Every page, in no order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &Arc<T>)> {
        self.chunks.iter().flat_map(|(&c, chunk)| {
            chunk
                .iter()
                .enumerate()
                .filter_map(move |(i, page)| Some((c * CHUNK + i as u64, page.as_ref()?)))
        })
    }

    /// Counts the chunks and pages not seen yet, and (through `page`) what each new page holds.
    pub(super) fn footprint(&self, f: &mut Footprint, page: impl Fn(&T, &mut Footprint)) {
        f.first(
            &self.chunks as *const _,
            self.chunks.capacity() * (size_of::<(u64, usize)>() + 1),
        );
        for chunk in self.chunks.values() {
            if f.first(Arc::as_ptr(chunk), size_of::<Chunk<T>>()) {
                for p in chunk.iter().flatten() {
                    if f.first(Arc::as_ptr(p), size_of::<T>()) {
                        page(p, f);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_shares_until_written_and_counts_its_pages() {
        let mut a: PageTable<u32> = PageTable::default();
        *Arc::make_mut(a.get_or_insert_with(3, || 0)) = 30;
        *Arc::make_mut(a.get_or_insert_with(CHUNK + 1, || 0)) = 50;
        a.insert(7, Arc::new(70));
        assert_eq!(a.len(), 3);
        let b = a.clone();
        *Arc::make_mut(a.get_mut(3).expect("page 3")) = 31;
        assert!(a.get_mut(4).is_none(), "absent");
        assert_eq!((a.get(3).map(|p| **p), b.get(3).map(|p| **p)), (Some(31), Some(30)));
        assert!(
            Arc::ptr_eq(a.get(7).expect("a"), b.get(7).expect("b")),
            "untouched pages shared"
        );
        assert!(
            Arc::ptr_eq(&a.chunks[&1], &b.chunks[&1]),
            "an untouched chunk is shared"
        );
        let mut pages: Vec<(u64, u32)> = a.iter().map(|(p, v)| (p, **v)).collect();
        pages.sort_unstable();
        assert_eq!(pages, [(3, 31), (7, 70), (CHUNK + 1, 50)]);
        // Ranges in pages (a page of 1 byte here): the pages whole within them, shared.
        let w = a.within(&[(0, 4), (6, 1), (CHUNK + 1, 1)], 1);
        let mut kept: Vec<(u64, u32)> = w.iter().map(|(p, v)| (p, **v)).collect();
        kept.sort_unstable();
        assert_eq!(kept, [(3, 31), (CHUNK + 1, 50)]);
        assert_eq!(w.len(), 2);
        assert!(
            Arc::ptr_eq(w.get(3).expect("w"), a.get(3).expect("a")),
            "shared, not copied"
        );
    }
}

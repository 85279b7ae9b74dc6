//! The pages of a memory state in two levels: chunks of [`CHUNK`] pages, each shared until
//! written. A checkpoint clones the chunk map only (a few dozen entries for a real program),
//! not an entry per page: with a flat map, python3's 3,700 pages made every checkpoint cost
//! about 70 KB, which grew with the history (issue 19).

use std::sync::Arc;

use rustc_hash::FxHashMap;

/// Pages a chunk covers (2 MiB of address space).
const CHUNK: u64 = 512;

type Chunk<T> = FxHashMap<u64, Arc<T>>;

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

impl<T: Clone> PageTable<T> {
    /// Number of pages.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Page `p`.
    pub(super) fn get(&self, p: u64) -> Option<&Arc<T>> {
        self.chunks.get(&(p / CHUNK))?.get(&p)
    }

    /// Page `p`, its chunk made this table's own (the page itself is still shared: the
    /// caller copies it with `Arc::make_mut` if it writes).
    pub(super) fn get_mut(&mut self, p: u64) -> Option<&mut Arc<T>> {
        self.get(p)?;
        Arc::make_mut(self.chunks.get_mut(&(p / CHUNK))?).get_mut(&p)
    }

    /// Page `p`, made with `new` if absent.
    pub(super) fn get_or_insert_with(&mut self, p: u64, new: impl FnOnce() -> T) -> &mut Arc<T> {
        let chunk = Arc::make_mut(self.chunks.entry(p / CHUNK).or_default());
        let len = &mut self.len;
        chunk.entry(p).or_insert_with(|| {
            *len += 1;
            Arc::new(new())
        })
    }

    /// Puts `page` at `p` (sharing it).
    pub(super) fn insert(&mut self, p: u64, page: Arc<T>) {
        let chunk = Arc::make_mut(self.chunks.entry(p / CHUNK).or_default());
        if chunk.insert(p, page).is_none() {
            self.len += 1;
        }
    }

    /// Every page, in no order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &Arc<T>)> {
        self.chunks.values().flat_map(|c| c.iter().map(|(&p, page)| (p, page)))
    }

    /// No page.
    pub(super) fn clear(&mut self) {
        self.chunks.clear();
        self.len = 0;
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
        a.clear();
        assert_eq!((a.len(), b.len()), (0, 3));
    }
}

//! Anchors: whole states the recorder took while the program ran (issue 40). At each, every
//! register it could read and every page of the program's private memory written since the
//! anchor before (or since the start snapshot), so that a replay knows the state there
//! exactly without walking the history up to it: the values at any position come from the
//! anchors on either side of it, at once, and the stretches between anchors are independent
//! of each other.
//!
//! `anchors.jsonl`: one [`Anchor`] a line, in order of position. `anchor-pages.bin`: each
//! anchor's pages one after another from its `offset`, each an 8-byte little-endian address
//! whose lowest bit says the page could not be read (then no bytes follow: unknown there),
//! whose next bit says it holds zeros only (no bytes follow either), else followed by its
//! [`PAGE`] bytes.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::read_at::FileAt;
use super::{files, Recording, RecordingError};

/// Bytes in a page.
pub const PAGE: u64 = 4096;

/// The lowest bit of a page's address in `anchor-pages.bin`: the page could not be read.
pub const UNREADABLE: u64 = 1;

/// The second-lowest bit: the page holds zeros only, and no bytes follow (most pages a long
/// sort writes between two anchors are zeros: 73 % of them, 3 GB of its 4.2).
pub const ZEROS: u64 = 2;

/// What a page of [`ZEROS`] reads as.
static ZERO_PAGE: [u8; PAGE as usize] = [0; PAGE as usize];

/// One line of `anchors.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Anchor {
    /// The position: the state is the one before the instruction there.
    pub position: u64,
    /// Name → value (hex) of the registers the recorder read.
    pub registers: BTreeMap<String, String>,
    /// How many pages were written since the anchor before.
    pub pages: u64,
    /// Where in `anchor-pages.bin` they start.
    pub offset: u64,
}

/// A page of an anchor: its address, and its bytes (`None`: it could not be read).
pub type Page<'a> = (u64, Option<&'a [u8]>);

/// Encodes a page for `anchor-pages.bin`: its address and its bytes, or that it could not be
/// read.
pub fn encode_page(address: u64, bytes: Option<&[u8]>, out: &mut Vec<u8>) {
    match bytes {
        Some(b) if b.iter().all(|&x| x == 0) => out.extend_from_slice(&(address | ZEROS).to_le_bytes()),
        Some(b) => {
            out.extend_from_slice(&address.to_le_bytes());
            out.extend_from_slice(b);
        }
        None => out.extend_from_slice(&(address | UNREADABLE).to_le_bytes()),
    }
}

/// The pages of an anchor in `bytes` (the whole of `anchor-pages.bin`) from `offset`: each
/// page's address and bytes (`None`: unknown); an error names the byte offset where they do
/// not parse.
pub fn decode_pages(bytes: &[u8], offset: u64, count: u64) -> Result<Vec<Page<'_>>, String> {
    let rest = usize::try_from(offset)
        .ok()
        .and_then(|o| bytes.get(o..))
        .ok_or_else(|| format!("offset {offset} is past the file"))?;
    decode_from(rest, offset, bytes.len() as u64, count).map(|(pages, _)| pages)
}

/// The `count` pages at the start of `bytes`, which are the bytes of a file of `file_len`
/// from its byte `base` on (an error names the file's byte), and how many bytes they take.
fn decode_from(bytes: &[u8], base: u64, file_len: u64, count: u64) -> Result<(Vec<Page<'_>>, u64), String> {
    let mut at = 0usize;
    let mut pages = Vec::with_capacity(count.min(1 << 20) as usize);
    for _ in 0..count {
        let byte = base + at as u64;
        let word = bytes
            .get(at..at + 8)
            .ok_or_else(|| format!("byte {byte}: a page's address runs past the file's {file_len} bytes"))?;
        let word = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
        let address = word & !(UNREADABLE | ZEROS);
        if address % PAGE != 0 || word & (UNREADABLE | ZEROS) == UNREADABLE | ZEROS {
            return Err(format!("byte {byte}: {word:#x} is not a page's address and kind"));
        }
        at += 8;
        if word & UNREADABLE != 0 {
            pages.push((address, None));
            continue;
        }
        if word & ZEROS != 0 {
            pages.push((address, Some(&ZERO_PAGE[..])));
            continue;
        }
        let page = bytes.get(at..at + PAGE as usize).ok_or_else(|| {
            format!(
                "byte {}: the page at {address:#x} runs past the file's {file_len} bytes",
                byte + 8
            )
        })?;
        pages.push((address, Some(page)));
        at += PAGE as usize;
    }
    Ok((pages, at as u64))
}

/// The bytes of `anchor-pages.bin` parsed at a time when the anchors are opened.
const WINDOW: u64 = 16 << 20;

/// How many of `most` records lie whole at the start of `bytes` (each its address word,
/// then a page unless the word says it could not be read or holds zeros), each one's word
/// pushed on `words`.
fn whole_records(bytes: &[u8], most: u64, words: &mut Vec<u64>) -> u64 {
    let (mut at, mut n) = (0usize, 0u64);
    while n < most {
        let Some(word) = bytes.get(at..at + 8) else { break };
        let word = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
        let size = record_size(word) as usize;
        if at + size > bytes.len() {
            break;
        }
        words.push(word);
        at += size;
        n += 1;
    }
    n
}

/// The bytes a record whose address word is `word` takes in the file.
fn record_size(word: u64) -> u64 {
    match word & (UNREADABLE | ZEROS) {
        0 => 8 + PAGE,
        _ => 8,
    }
}

/// A recording's anchors: the index, each page's address and kind, and the pages' file,
/// read when a state is built (never whole: it holds gigabytes on a long run), and only the
/// pages that state needs.
#[derive(Debug, Clone, Default)]
pub struct Anchors {
    /// The anchors, in order of position.
    pub list: Vec<Anchor>,
    /// Every page's address word (its address and kind), one anchor's after another's, as
    /// checked when the anchors were opened: a few bytes a page, so that a state can leave
    /// out the pages a later anchor replaces without reading them.
    words: Arc<[u64]>,
    /// Where each anchor's words start in `words`.
    first_word: Vec<usize>,
    file: Option<Arc<FileAt>>,
}

/// The pages of one anchor, as read from the file.
#[derive(Debug, Clone, Default)]
pub struct AnchorPages {
    bytes: Vec<u8>,
    /// Each page's address word, and where its bytes start in `bytes` (a page of data).
    pages: Vec<(u64, usize)>,
}

impl AnchorPages {
    /// Each page's address and bytes (`None`: it could not be read).
    pub fn iter(&self) -> impl Iterator<Item = Page<'_>> {
        self.pages.iter().map(|&(word, at)| {
            let address = word & !(UNREADABLE | ZEROS);
            match word & (UNREADABLE | ZEROS) {
                UNREADABLE => (address, None),
                ZEROS => (address, Some(&ZERO_PAGE[..])),
                _ => (address, Some(&self.bytes[at..at + PAGE as usize])),
            }
        })
    }
}

impl Anchors {
    /// The first `k` anchors alone.
    pub fn first(&self, k: usize) -> Anchors {
        Anchors {
            list: self.list.iter().take(k).cloned().collect(),
            words: self.words.clone(),
            first_word: self.first_word.iter().take(k).copied().collect(),
            file: self.file.clone(),
        }
    }

    /// The address of each page anchor `i` holds, in the file's order (what
    /// [`Anchors::pages_kept`] takes a flag for).
    pub fn addresses(&self, i: usize) -> impl Iterator<Item = u64> + '_ {
        let from = self.first_word.get(i).copied().unwrap_or(0);
        let n = self.list.get(i).map_or(0, |a| a.pages as usize);
        let words = self.words.get(from..from + n).unwrap_or_default();
        words.iter().map(|w| w & !(UNREADABLE | ZEROS))
    }

    /// The pages anchor `i` holds: written since the anchor before, read from the file and
    /// checked against the seal again (an error if the file changed since it was opened).
    pub fn pages(&self, i: usize) -> Result<AnchorPages, RecordingError> {
        self.pages_kept(i, |_| true)
    }

    /// The pages of anchor `i` for which `keep` (given each page's index among the anchor's)
    /// says yes: only their bytes are read, each piece of the seal at most once.
    pub fn pages_kept(&self, i: usize, keep: impl Fn(usize) -> bool) -> Result<AnchorPages, RecordingError> {
        let (a, Some(file)) = (&self.list[i], &self.file) else {
            return Ok(AnchorPages::default());
        };
        let from = self.first_word[i];
        let words = &self.words[from..from + a.pages as usize];
        // Each kept page's word and, for a page of data, its bytes' place in the file.
        let mut at = a.offset;
        let mut kept = Vec::with_capacity(words.len());
        for (k, &w) in words.iter().enumerate() {
            if keep(k) {
                kept.push((w, (w & (UNREADABLE | ZEROS) == 0).then_some(at + 8)));
            }
            at += record_size(w);
        }
        // The pages' bytes in runs, one read a run: a run goes on while the next page lies
        // in a piece the run reads anyway, or the one after it.
        let grain = file.grain();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for start in kept.iter().filter_map(|k| k.1) {
            match runs.last_mut() {
                Some(r) if start / grain <= (r.1 - 1) / grain + 1 => r.1 = start + PAGE,
                _ => runs.push((start, start + PAGE)),
            }
        }
        let mut bytes = Vec::with_capacity(runs.iter().map(|r| (r.1 - r.0) as usize).sum());
        // Where each run's first byte lies in `bytes`, and its place in the file.
        let mut placed = Vec::with_capacity(runs.len());
        for (start, end) in runs {
            placed.push((start, end, bytes.len()));
            bytes.extend_from_slice(&file.read(start, end)?);
        }
        let mut run = 0;
        let pages = (kept.into_iter())
            .map(|(w, start)| match start {
                None => (w, 0),
                Some(s) => {
                    while placed[run].1 <= s {
                        run += 1;
                    }
                    (w, placed[run].2 + (s - placed[run].0) as usize)
                }
            })
            .collect();
        Ok(AnchorPages { bytes, pages })
    }
}

impl Recording {
    /// The recording as if it had no anchors: a replay's values then come from the passes'
    /// chains, as for a recording made without them (to compare the two, in tests and
    /// benchmarks).
    pub fn ignoring_anchors(mut self) -> Self {
        self.anchors_ignored = true;
        self
    }

    /// The anchors the recorder took, if any: in order of position, inside the history, with
    /// registers that are registers and pages that are whole, one anchor's after another's.
    pub fn anchors(&self) -> Result<Option<Anchors>, RecordingError> {
        if self.anchors_ignored {
            return Ok(None);
        }
        let path = self.dir.join(files::ANCHORS);
        let Some(list) = self.json_lines::<Anchor>(files::ANCHORS)? else {
            return Ok(None);
        };
        let pages_path = self.dir.join(files::ANCHOR_PAGES);
        let file = self
            .open_at(files::ANCHOR_PAGES)?
            .ok_or_else(|| super::read::missing(&pages_path, "every recording with anchors has it"))?;
        for (i, a) in list.iter().enumerate() {
            super::validate::anchor_registers(&path, i, a)?;
            let invalid = |what: String| RecordingError::Invalid {
                path: path.display().to_string(),
                message: format!("record {} (position {}): {what}", i + 1, a.position),
            };
            if i > 0 && a.position <= list[i - 1].position {
                return Err(invalid("not after the anchor before".into()));
            }
            if self.manifest.version >= 2 && a.position >= self.manifest.instructions {
                let what = format!(
                    "past the history's last position ({})",
                    self.manifest.instructions.saturating_sub(1)
                );
                return Err(invalid(what));
            }
        }
        Anchors::index(list, file, &path).map(Some)
    }
}

impl Anchors {
    /// The anchors of `list` (read from `path`) whose pages `file` holds: every page's
    /// address word read, and checked to be one whole record after another.
    fn index(list: Vec<Anchor>, file: FileAt, path: &std::path::Path) -> Result<Anchors, RecordingError> {
        let pages_path = file.path().to_path_buf();
        let mut next_offset = 0;
        let (mut words, mut first_word) = (Vec::new(), Vec::with_capacity(list.len()));
        // The window of the file read last: where it starts, its bytes.
        let mut window: (u64, Vec<u8>) = (0, Vec::new());
        for (i, a) in list.iter().enumerate() {
            if a.offset != next_offset {
                return Err(RecordingError::Invalid {
                    path: path.display().to_string(),
                    message: format!(
                        "record {} (position {}): its pages start at byte {}, not {next_offset}",
                        i + 1,
                        a.position,
                        a.offset
                    ),
                });
            }
            // A window at a time: an anchor's pages can be gigabytes, or, as zeros, a few
            // bytes each (a bound from the count alone read 1.3 GB for 2 MB of records). The
            // windows go through the file once: the next anchor's records are read from the
            // window that holds them (a window read for each anchor read and checked python3
            // 1e9's 80 MB 4 GB over before its first answer).
            let (mut at, mut left) = (a.offset, a.pages);
            first_word.push(words.len());
            while left > 0 {
                let held = (window.0..window.0 + window.1.len() as u64).contains(&at);
                let mut n = match held {
                    true => whole_records(&window.1[(at - window.0) as usize..], left, &mut words),
                    false => 0,
                };
                if n == 0 {
                    window = (at, file.read(at, (at + WINDOW).min(file.len()))?);
                    // Whole records in the window, at least one (a record cut by the file's
                    // end is the decode's error below).
                    n = whole_records(&window.1, left, &mut words).max(1);
                }
                let bytes = &window.1[(at - window.0) as usize..];
                let (_, taken) = decode_from(bytes, at, file.len(), n).map_err(|e| RecordingError::Invalid {
                    path: pages_path.display().to_string(),
                    message: format!("anchor {} (position {}): {e}", i + 1, a.position),
                })?;
                at += taken;
                left -= n;
            }
            next_offset = at;
        }
        if next_offset != file.len() {
            return Err(RecordingError::Invalid {
                path: pages_path.display().to_string(),
                message: format!("{} bytes, of which the anchors hold {next_offset}", file.len()),
            });
        }
        Ok(Anchors {
            list,
            words: words.into(),
            first_word,
            file: Some(Arc::new(file)),
        })
    }

    /// The anchors of `list` over the pages' file at `pages` (no seal): for tests that
    /// build a recording's anchors by hand.
    #[cfg(test)]
    pub(crate) fn over_file(list: Vec<Anchor>, pages: &std::path::Path) -> Result<Anchors, RecordingError> {
        Self::index(list, FileAt::unsealed(pages)?, pages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_round_trip_and_damage_is_placed() {
        let mut out = Vec::new();
        encode_page(0x1000, Some(&[7u8; 4096]), &mut out);
        encode_page(0x5000, None, &mut out);
        encode_page(0x2000, Some(&[9u8; 4096]), &mut out);
        let pages = decode_pages(&out, 0, 3).expect("decodes");
        assert_eq!(pages.len(), 3);
        assert_eq!(pages[0], (0x1000, Some(&[7u8; 4096][..])));
        assert_eq!(pages[1], (0x5000, None));
        assert_eq!(pages[2].0, 0x2000);
        assert_eq!(decode_pages(&out, 4104, 2).expect("from the second").len(), 2);
        let e = decode_pages(&out, 0, 4).expect_err("one too many");
        assert!(e.contains("runs past the file"), "{e}");
        let e = decode_pages(&out, 1, 1).expect_err("misaligned");
        assert!(e.contains("is not a page's address"), "{e}");
    }

    #[test]
    fn whole_records_counts_what_a_window_holds() {
        let mut out = Vec::new();
        encode_page(0x1000, Some(&[0u8; 4096]), &mut out);
        encode_page(0x2000, None, &mut out);
        encode_page(0x3000, Some(&[5u8; 4096]), &mut out);
        encode_page(0x4000, Some(&[0u8; 4096]), &mut out);
        assert_eq!(out.len(), 8 + 8 + 4104 + 8);
        let mut words = Vec::new();
        assert_eq!(whole_records(&out, 9, &mut words), 4);
        assert_eq!(words, [0x1000 | ZEROS, 0x2000 | UNREADABLE, 0x3000, 0x4000 | ZEROS]);
        assert_eq!(whole_records(&out, 3, &mut Vec::new()), 3, "no more than asked");
        let cut = whole_records(&out[..4000], 9, &mut Vec::new());
        assert_eq!(cut, 2, "the page cut by the window's end");
        assert_eq!(whole_records(&out[..16 + 4104], 9, &mut Vec::new()), 3);
        assert_eq!(whole_records(&out[..7], 9, &mut Vec::new()), 0);
    }

    /// Anchors of data, zeros and unreadable pages over a file of several windows, records
    /// cut by a window's end: every anchor's pages come back as written.
    #[test]
    fn the_index_reads_the_file_a_window_at_a_time_across_anchors() {
        let (mut out, mut list, mut written) = (Vec::new(), Vec::new(), Vec::new());
        let mut rng = crate::test_rng::Rng(0x9e37_79b9_7f4a_7c15);
        for k in 0..500u64 {
            let (offset, mut pages) = (out.len() as u64, Vec::new());
            for j in 0..1 + (k * 7) % 61 {
                let x = rng.next();
                let address = (k * 64 + j) * PAGE;
                let bytes = match x % 8 {
                    0 => None,
                    1 => Some(vec![0u8; PAGE as usize]),
                    _ => Some(vec![x as u8 | 1; PAGE as usize]),
                };
                encode_page(address, bytes.as_deref(), &mut out);
                pages.push((address, bytes));
            }
            list.push(Anchor {
                position: k * 1000,
                registers: BTreeMap::new(),
                pages: pages.len() as u64,
                offset,
            });
            written.push(pages);
        }
        assert!(out.len() as u64 > 2 * WINDOW, "{}", out.len());
        let dir = std::env::temp_dir().join(format!("rtit-anchor-windows-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let path = dir.join("anchor-pages.bin");
        std::fs::write(&path, &out).expect("written");
        let anchors = Anchors::over_file(list, &path).expect("indexed");
        for (i, pages) in written.iter().enumerate() {
            let read = anchors.pages(i).expect("read");
            let read: Vec<_> = read.iter().map(|(a, b)| (a, b.map(<[u8]>::to_vec))).collect();
            assert_eq!(read, *pages, "anchor {i}");
            let addresses: Vec<u64> = anchors.addresses(i).collect();
            assert_eq!(addresses, pages.iter().map(|p| p.0).collect::<Vec<_>>());
        }
        // A file longer than the anchors say, or an anchor whose records run past it.
        std::fs::write(&path, [&out[..], &[0u8; 8]].concat()).expect("written");
        let list = |extra| -> Vec<Anchor> {
            (0..1)
                .map(|_| Anchor {
                    position: 0,
                    registers: BTreeMap::new(),
                    pages: written.iter().map(|p| p.len() as u64).sum::<u64>() + extra,
                    offset: 0,
                })
                .collect()
        };
        let e = Anchors::over_file(list(0), &path).expect_err("refused");
        assert!(e.to_string().contains("of which the anchors hold"), "{e}");
        std::fs::write(&path, &out).expect("written");
        let e = Anchors::over_file(list(1), &path).expect_err("refused");
        assert!(e.to_string().contains("runs past the file"), "{e}");
        std::fs::remove_dir_all(&dir).expect("removed");
    }

    #[test]
    fn a_page_of_zeros_is_its_address_alone() {
        let mut out = Vec::new();
        encode_page(0x3000, Some(&[0u8; 4096]), &mut out);
        encode_page(0x4000, Some(&[1u8; 4096]), &mut out);
        assert_eq!(out.len(), 8 + 8 + 4096, "no bytes for the zeros");
        let (pages, taken) = decode_from(&out, 0, out.len() as u64, 2).expect("decodes");
        assert_eq!(taken, out.len() as u64);
        assert_eq!(pages[0], (0x3000, Some(&[0u8; 4096][..])));
        assert_eq!(pages[1], (0x4000, Some(&[1u8; 4096][..])));
        // Both kinds at once is no page.
        let both = (0x3000 | UNREADABLE | ZEROS).to_le_bytes();
        let e = decode_pages(&both, 0, 1).expect_err("unreadable zeros");
        assert!(
            e.contains("byte 0") && e.contains("not a page's address and kind"),
            "{e}"
        );
    }
}

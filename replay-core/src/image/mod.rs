//! The address space the trace ran in: code and data from ELF files placed at their addresses,
//! so the flow decoder can read the instructions the packets leave out, and addresses can be
//! named (file, symbol + offset, source line).
//!
//! - `elf`: loading an ELF file or in-memory ELF (the vDSO) into an [`Image`]: ET_EXEC at its
//!   addresses, ET_DYN (PIE, shared objects, vDSO) at a load bias, ET_REL (kernel modules,
//!   `.o` files) with an address per section and its relocations applied.
//! - `symbols`: symbol lookup and DWARF line information.

mod elf;
mod error;
mod symbols;

use std::path::Path;
use std::sync::Arc;

pub use error::ImageError;

/// The page-aligned lowest address of an ELF file's loadable segments: where its first
/// mapping starts when loaded at bias 0. A load address minus this is the bias.
pub fn lowest_vaddr(name: &str, bytes: &[u8]) -> Result<u64, ImageError> {
    elf::lowest_vaddr(name, bytes)
}
pub use elf::{defined_symbol, entry};
pub use symbols::{Location, SourceLine};

use symbols::Symbols;

/// A contiguous range of bytes of an image at its run-time address.
#[derive(Debug, Clone)]
pub struct Segment {
    /// First address.
    pub start: u64,
    /// The bytes (as many as the file holds; memory beyond them reads as absent).
    pub bytes: Arc<[u8]>,
    /// Whether it holds executable code.
    pub executable: bool,
    /// Whether the program may write it: then the file's bytes are only its initial contents,
    /// not what it holds later.
    pub writable: bool,
}

impl Segment {
    /// One past the last address.
    pub fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

/// One loaded file: its segments at their addresses, its symbols and line information.
#[derive(Debug)]
pub struct Image {
    name: String,
    segments: Vec<Segment>,
    symbols: Symbols,
    /// The whole file, for a linked ELF: what a run-time mapping of it holds.
    file: Option<Arc<[u8]>>,
}

impl Image {
    /// Loads an ELF file. ET_EXEC goes at its own addresses; ET_DYN at `bias` (its load
    /// address minus its first vaddr, 0 for a non-PIE); ET_REL needs section addresses,
    /// see [`Image::load_relocatable`].
    pub fn load(path: &Path, bias: u64) -> Result<Self, ImageError> {
        let bytes = read(path)?;
        Self::from_elf(&path.display().to_string(), bytes, bias)
    }

    /// Loads an ELF file whose lowest loadable segment is mapped at `address` (the start of
    /// its first mapping in `/proc/PID/maps`). For ET_EXEC, `address` must be where the file
    /// says, or `None`.
    pub fn load_at(path: &Path, address: Option<u64>) -> Result<Self, ImageError> {
        let bytes = read(path)?;
        let name = path.display().to_string();
        let bias = match address {
            Some(address) => address.wrapping_sub(elf::lowest_vaddr(&name, &bytes)?),
            None => 0,
        };
        Self::from_elf(&name, bytes, bias)
    }

    /// An ELF image from bytes (e.g. the vDSO as read from the traced process), at `bias`.
    pub fn from_elf(name: &str, bytes: Vec<u8>, bias: u64) -> Result<Self, ImageError> {
        elf::load_linked(name, bytes, bias)
    }

    /// Loads a relocatable object (a kernel module, a `.o`) with each allocated section at the
    /// address `section_address` gives for its name (as `/sys/module/NAME/sections/` lists
    /// them). Relocations against its own symbols are applied; those against undefined
    /// symbols use `external` when it has the name, else they are left as in the file.
    pub fn load_relocatable(
        path: &Path,
        section_address: &dyn Fn(&str) -> Option<u64>,
        external: &dyn Fn(&str) -> Option<u64>,
    ) -> Result<Self, ImageError> {
        let bytes = read(path)?;
        elf::load_relocatable(&path.display().to_string(), bytes, section_address, external)
    }

    /// [`Image::load_relocatable`] for bytes already read; `name` is for messages.
    pub fn relocatable_from_bytes(
        name: &str,
        bytes: Vec<u8>,
        section_address: &dyn Fn(&str) -> Option<u64>,
        external: &dyn Fn(&str) -> Option<u64>,
    ) -> Result<Self, ImageError> {
        elf::load_relocatable(name, bytes, section_address, external)
    }

    /// Raw code at an address, with no symbols: for JIT code and tests.
    pub fn from_raw(name: &str, start: u64, bytes: Vec<u8>) -> Self {
        Self {
            name: name.to_string(),
            segments: vec![Segment {
                start,
                bytes: bytes.into(),
                executable: true,
                writable: false,
            }],
            symbols: Symbols::new(Vec::new(), start),
            file: None,
        }
    }

    /// The file name (or the name given).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its segments.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }
}

fn read(path: &Path) -> Result<Vec<u8>, ImageError> {
    std::fs::read(path).map_err(|source| ImageError::Read {
        path: path.display().to_string(),
        source: Arc::new(source),
    })
}

/// Where an address falls: which image and segment.
#[derive(Debug, Clone, Copy)]
struct Placed {
    start: u64,
    end: u64,
    image: usize,
    segment: usize,
}

/// The images of one address space, searchable by address.
#[derive(Debug, Default, Clone)]
pub struct AddressSpace {
    images: Vec<Arc<Image>>,
    /// Segments sorted by start address, non-overlapping.
    placed: Vec<Placed>,
    /// Ranges of segments that are not writable in their image but that the program made
    /// writable at some point ([`Self::mark_writable`]): it may have rewritten their bytes,
    /// code included, which the image does not show.
    rewritable: Vec<(u64, u64)>,
}

impl AddressSpace {
    /// An empty address space.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an image. Its segments must not overlap those already present.
    pub fn add(&mut self, image: Image) -> Result<(), ImageError> {
        let index = self.images.len();
        let mut placed = self.placed.clone();
        for (segment, s) in image.segments.iter().enumerate() {
            if s.bytes.is_empty() {
                continue;
            }
            let new = Placed {
                start: s.start,
                end: s.end(),
                image: index,
                segment,
            };
            let at = placed.partition_point(|p| p.start < new.start);
            let clash = placed[at.saturating_sub(1)..(at + 1).min(placed.len())]
                .iter()
                .find(|p| p.start < new.end && new.start < p.end);
            if let Some(p) = clash {
                return Err(ImageError::Overlap {
                    name: image.name.clone(),
                    start: new.start,
                    other: self
                        .images
                        .get(p.image)
                        .map_or_else(|| image.name.clone(), |i| i.name.clone()),
                });
            }
            placed.insert(at, new);
        }
        self.placed = placed;
        self.images.push(Arc::new(image));
        Ok(())
    }

    /// The images, in the order added.
    pub fn images(&self) -> &[Arc<Image>] {
        &self.images
    }

    fn find(&self, ip: u64) -> Option<&Placed> {
        let at = self.placed.partition_point(|p| p.start <= ip);
        self.placed[..at].last().filter(|p| ip < p.end)
    }

    /// The bytes from `ip` to the end of the segment holding it.
    pub fn bytes_at(&self, ip: u64) -> Result<&[u8], ImageError> {
        let p = self.find(ip).ok_or(ImageError::NoImage { ip })?;
        let segment = &self.images[p.image].segments[p.segment];
        Ok(&segment.bytes[(ip - p.start) as usize..])
    }

    /// The bytes from `addr` to the end of its segment, only where the program cannot have
    /// changed them: a segment that is not writable, up to a range the program made writable.
    pub fn read_only_bytes_at(&self, addr: u64) -> Option<&[u8]> {
        let p = self.find(addr)?;
        let segment = &self.images[p.image].segments[p.segment];
        if segment.writable || self.may_rewrite(addr) {
            return None;
        }
        let bytes = &segment.bytes[(addr - p.start) as usize..];
        let until = self
            .rewritable
            .iter()
            .filter(|&&(s, _)| s > addr)
            .map(|&(s, _)| s - addr)
            .min();
        Some(until.map_or(bytes, |n| &bytes[..bytes.len().min(n as usize)]))
    }

    /// Notes that the program made `[start, end)` writable (an `mprotect`, a mapping with
    /// write permission): where that covers a segment the image has read-only, the program
    /// may have rewritten its bytes (code patched in place), so they are no longer taken from
    /// the image ([`Self::read_only_bytes_at`]) and the instructions there are not trusted
    /// to be the image's ([`Self::may_rewrite`]).
    pub fn mark_writable(&mut self, start: u64, end: u64) {
        for p in &self.placed {
            let segment = &self.images[p.image].segments[p.segment];
            let (s, e) = (start.max(p.start), end.min(p.end));
            if !segment.writable && s < e && !self.rewritable.contains(&(s, e)) {
                self.rewritable.push((s, e));
            }
        }
    }

    /// Whether `addr` is in a read-only segment the program made writable at some point.
    #[inline]
    pub fn may_rewrite(&self, addr: u64) -> bool {
        !self.rewritable.is_empty() && self.rewritable.iter().any(|&(s, e)| s <= addr && addr < e)
    }

    /// The bytes a private file mapping of `path` (`len` bytes from file offset `offset`)
    /// holds when it is made, if the recording has the file: those the file has there.
    pub fn file_mapping_bytes(&self, path: &str, len: u64, offset: u64) -> Option<&[u8]> {
        let image = self.images.iter().find(|i| i.name() == path)?;
        let file = image.file.as_deref()?;
        let from = usize::try_from(offset).ok().filter(|&o| o <= file.len())?;
        let to = from
            .saturating_add(usize::try_from(len).unwrap_or(usize::MAX))
            .min(file.len());
        Some(&file[from..to])
    }

    /// The image holding `ip`.
    pub fn image_at(&self, ip: u64) -> Option<&Arc<Image>> {
        self.find(ip).map(|p| &self.images[p.image])
    }

    /// Names `ip`: image, symbol and offset into it.
    pub fn locate(&self, ip: u64) -> Option<Location> {
        let image = self.image_at(ip)?;
        Some(image.symbols.locate(image.name(), ip))
    }

    /// The source file and line of `ip`, where the image has DWARF line information.
    pub fn source_line(&self, ip: u64) -> Option<SourceLine> {
        self.image_at(ip)?.symbols.source_line(ip)
    }
}

#[cfg(test)]
mod tests;

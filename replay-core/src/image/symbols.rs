//! Naming addresses: function symbols from the ELF symbol tables and source lines from DWARF
//! (through addr2line), both at run-time addresses.

use std::fmt;
use std::sync::{Arc, Mutex};

use addr2line::Context;
use gimli::EndianArcSlice;
use gimli::RunTimeEndian;

type Reader = EndianArcSlice<RunTimeEndian>;

/// An address named by image, symbol and offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The image's name.
    pub image: String,
    /// The function holding the address, if the image has symbols for it.
    pub symbol: Option<String>,
    /// Offset from the symbol, or from the image's first segment without one.
    pub offset: u64,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.symbol {
            Some(s) => write!(f, "{s}+{:#x}", self.offset),
            None => {
                let base = self.image.rsplit('/').next().unwrap_or(&self.image);
                write!(f, "{base}+{:#x}", self.offset)
            }
        }
    }
}

/// A source position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLine {
    /// The source file.
    pub file: String,
    /// The line.
    pub line: u32,
}

/// A function symbol at its run-time address.
#[derive(Debug, Clone)]
pub(crate) struct Symbol {
    pub addr: u64,
    pub size: u64,
    pub name: String,
}

/// The symbols and line information of one image.
#[derive(Default)]
pub(crate) struct Symbols {
    /// Sorted by address.
    functions: Vec<Symbol>,
    /// Start of the image, for offsets of unnamed addresses.
    base: u64,
    /// DWARF line information, with the bias to subtract from run-time addresses.
    lines: Option<(Mutex<Context<Reader>>, u64)>,
}

impl fmt::Debug for Symbols {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Symbols")
            .field("functions", &self.functions.len())
            .field("lines", &self.lines.is_some())
            .finish()
    }
}

impl Symbols {
    pub fn new(mut functions: Vec<Symbol>, base: u64) -> Self {
        functions.sort_by_key(|s| (s.addr, std::cmp::Reverse(s.size)));
        functions.dedup_by_key(|s| s.addr);
        Self {
            functions,
            base,
            lines: None,
        }
    }

    /// Adds DWARF from an object file's sections; `bias` maps link-time to run-time addresses.
    pub fn load_dwarf(&mut self, file: &object::File<'_>, bias: u64) {
        use object::{Object, ObjectSection};
        let endian = if file.is_little_endian() {
            RunTimeEndian::Little
        } else {
            RunTimeEndian::Big
        };
        let load = |id: gimli::SectionId| -> Result<Reader, gimli::Error> {
            let data = file
                .section_by_name(id.name())
                .and_then(|s| s.uncompressed_data().ok())
                .map(|d| Arc::<[u8]>::from(&*d))
                .unwrap_or_else(|| Arc::from(&[][..]));
            Ok(EndianArcSlice::new(data, endian))
        };
        let Ok(dwarf) = gimli::Dwarf::load(load) else {
            return;
        };
        if let Ok(ctx) = Context::from_dwarf(dwarf) {
            self.lines = Some((Mutex::new(ctx), bias));
        }
    }

    /// The function whose range holds `ip`; a symbol without a size covers up to the next.
    pub fn locate(&self, image: &str, ip: u64) -> Location {
        let at = self.functions.partition_point(|s| s.addr <= ip);
        match self.functions[..at].last() {
            Some(s) if s.size == 0 || ip - s.addr < s.size => Location {
                image: image.to_string(),
                symbol: Some(s.name.clone()),
                offset: ip - s.addr,
            },
            _ => Location {
                image: image.to_string(),
                symbol: None,
                offset: ip.wrapping_sub(self.base),
            },
        }
    }

    pub fn source_line(&self, ip: u64) -> Option<SourceLine> {
        let (ctx, bias) = self.lines.as_ref()?;
        let ctx = ctx.lock().ok()?;
        let loc = ctx.find_location(ip.wrapping_sub(*bias)).ok()??;
        Some(SourceLine {
            file: loc.file?.to_string(),
            line: loc.line?,
        })
    }
}

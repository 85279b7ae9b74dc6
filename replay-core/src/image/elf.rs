//! Loading ELF files with `object`: linked files (ET_EXEC, ET_DYN) by their PT_LOAD segments,
//! relocatable ones (ET_REL) by their allocated sections at given addresses.

use object::elf::{R_X86_64_32, R_X86_64_32S, R_X86_64_64, R_X86_64_PC32, R_X86_64_PC64, R_X86_64_PLT32};
use object::{
    Architecture, Object, ObjectKind, ObjectSection, ObjectSegment, ObjectSymbol, RelocationFlags, RelocationTarget,
    SectionFlags, SectionKind, SegmentFlags, SymbolKind, SymbolSection,
};

use super::symbols::{Symbol, Symbols};
use super::{Image, ImageError, Segment};

fn parse<'a>(name: &str, bytes: &'a [u8]) -> Result<object::File<'a>, ImageError> {
    let file = object::File::parse(bytes).map_err(|e| ImageError::elf(name, e))?;
    if file.architecture() != Architecture::X86_64 {
        return Err(ImageError::elf(
            name,
            format!("{:?} code, not x86-64", file.architecture()),
        ));
    }
    Ok(file)
}

/// Function symbols of `file`, each at its address plus `offset(symbol)`.
fn functions(file: &object::File<'_>, offset: impl Fn(&object::Symbol<'_, '_>) -> Option<u64>) -> Vec<Symbol> {
    file.symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
        .filter_map(|s| {
            let name = s.name().ok()?.to_string();
            Some(Symbol {
                addr: s.address().wrapping_add(offset(&s)?),
                size: s.size(),
                name,
            })
        })
        .collect()
}

/// The page-aligned lowest address of a linked file's loadable segments: what its first
/// mapping starts at when loaded with bias 0.
pub fn lowest_vaddr(name: &str, bytes: &[u8]) -> Result<u64, ImageError> {
    let file = parse(name, bytes)?;
    file.segments()
        .map(|s| s.address() & !0xfff)
        .min()
        .ok_or_else(|| ImageError::elf(name, "no loadable segment"))
}

/// Where a symbol a program defines lies as linked (bias 0), and whether the file is
/// position independent, so that its run-time address is that plus the load bias. The one
/// lookup of `--start SYMBOL` for every backend, so that the recorder's and the QEMU
/// plugin's idea of the start point cannot drift apart.
pub fn defined_symbol(name: &str, bytes: &[u8], symbol: &str) -> Result<(u64, bool), ImageError> {
    let file = parse(name, bytes)?;
    let found = file
        .symbols()
        .chain(file.dynamic_symbols())
        .find(|s| s.name() == Ok(symbol) && s.is_definition())
        .map(|s| s.address());
    let address = match found {
        Some(a) => a,
        None if symbol == "main" => main_from_entry(&file).ok_or_else(|| {
            ImageError::elf(
                name,
                "no symbol named main, and the entry point does not pass one to __libc_start_main",
            )
        })?,
        None => return Err(ImageError::elf(name, format!("no symbol named {symbol}"))),
    };
    Ok((address, file.kind() == ObjectKind::Dynamic))
}

/// `main` of a stripped glibc program: glibc's `_start` loads it into `rdi` (`lea
/// rdi,[rip+main]`, or `mov rdi, main` when not position independent) and calls
/// `__libc_start_main` with it, within its first few instructions. `None` when the entry
/// point's code does not read so.
pub(super) fn main_from_entry(file: &object::File<'_>) -> Option<u64> {
    use iced_x86::{Decoder, DecoderOptions, FlowControl, Mnemonic, OpKind, Register};
    let entry = file.entry();
    let code = file.segments().find_map(|seg| {
        let data = seg.data().ok()?;
        let offset = entry.checked_sub(seg.address())?;
        data.get(usize::try_from(offset).ok()?..)
    })?;
    let mut decoder = Decoder::with_ip(64, &code[..code.len().min(128)], entry, DecoderOptions::NONE);
    let mut main = None;
    for insn in decoder.iter().take(24) {
        if insn.flow_control() == FlowControl::Call || insn.flow_control() == FlowControl::IndirectCall {
            return main;
        }
        if insn.flow_control() != FlowControl::Next {
            return None;
        }
        if insn.op0_kind() == OpKind::Register && matches!(insn.op0_register(), Register::RDI | Register::EDI) {
            main = match (insn.mnemonic(), insn.op1_kind()) {
                (Mnemonic::Lea, OpKind::Memory) if insn.is_ip_rel_memory_operand() => {
                    Some(insn.ip_rel_memory_address())
                }
                (Mnemonic::Mov, OpKind::Immediate32 | OpKind::Immediate32to64 | OpKind::Immediate64) => {
                    Some(insn.immediate(1))
                }
                _ => None,
            };
        }
    }
    None
}

/// The entry point as linked (ELF `e_entry`).
pub fn entry(name: &str, bytes: &[u8]) -> Result<u64, ImageError> {
    Ok(parse(name, bytes)?.entry())
}

/// An executable, shared object or vDSO at `bias`.
pub fn load_linked(name: &str, bytes: Vec<u8>, bias: u64) -> Result<Image, ImageError> {
    let file = parse(name, &bytes)?;
    match file.kind() {
        ObjectKind::Executable | ObjectKind::Dynamic => {}
        ObjectKind::Relocatable => {
            return Err(ImageError::elf(name, "a relocatable object needs section addresses"));
        }
        kind => {
            return Err(ImageError::elf(
                name,
                format!("cannot load an ELF file of kind {kind:?}"),
            ))
        }
    }
    let mut segments = Vec::new();
    for seg in file.segments() {
        let data = seg.data().map_err(|e| ImageError::elf(name, e))?;
        let (executable, writable) = match seg.flags() {
            SegmentFlags::Elf { p_flags } => (p_flags & object::elf::PF_X != 0, p_flags & object::elf::PF_W != 0),
            _ => (false, true),
        };
        segments.push(Segment {
            start: seg.address().wrapping_add(bias),
            bytes: data.into(),
            executable,
            writable,
        });
    }
    if segments.is_empty() {
        return Err(ImageError::elf(name, "no loadable segment"));
    }
    let base = segments.iter().map(|s| s.start).min().unwrap_or(bias);
    let mut symbols = Symbols::new(functions(&file, |_| Some(bias)), base);
    symbols.load_dwarf(&file, bias);
    drop(file);
    Ok(Image {
        name: name.to_string(),
        segments,
        symbols,
        file: Some(bytes.into()),
    })
}

/// A relocatable object with its allocated sections at the addresses given.
pub fn load_relocatable(
    name: &str,
    bytes: Vec<u8>,
    section_address: &dyn Fn(&str) -> Option<u64>,
    external: &dyn Fn(&str) -> Option<u64>,
) -> Result<Image, ImageError> {
    let file = parse(name, &bytes)?;
    if file.kind() != ObjectKind::Relocatable {
        return Err(ImageError::elf(name, "not a relocatable object"));
    }
    let address_of = |index: object::SectionIndex| -> Option<u64> {
        let section = file.section_by_index(index).ok()?;
        section_address(section.name().ok()?)
    };
    let mut segments = Vec::new();
    for section in file.sections() {
        let allocated = matches!(section.flags(), SectionFlags::Elf { sh_flags } if sh_flags & u64::from(object::elf::SHF_ALLOC) != 0);
        let section_name = section.name().map_err(|e| ImageError::elf(name, e))?;
        let Some(start) = section_address(section_name).filter(|_| allocated) else {
            continue;
        };
        if section.kind() == SectionKind::UninitializedData {
            continue;
        }
        let mut data = section.data().map_err(|e| ImageError::elf(name, e))?.to_vec();
        for (offset, reloc) in section.relocations() {
            let target = match reloc.target() {
                RelocationTarget::Section(index) => address_of(index),
                RelocationTarget::Symbol(index) => {
                    let symbol = file.symbol_by_index(index).map_err(|e| ImageError::elf(name, e))?;
                    match symbol.section() {
                        SymbolSection::Section(s) => address_of(s).map(|a| a.wrapping_add(symbol.address())),
                        SymbolSection::Absolute => Some(symbol.address()),
                        _ => symbol.name().ok().and_then(external),
                    }
                }
                _ => None,
            };
            // A target with no known address is left as the file has it.
            if let Some(target) = target {
                let place = start.wrapping_add(offset);
                apply(
                    name,
                    &mut data,
                    offset,
                    reloc.flags(),
                    target.wrapping_add_signed(reloc.addend()),
                    place,
                )?;
            }
        }
        let executable = section.kind() == SectionKind::Text;
        let writable = matches!(section.flags(), SectionFlags::Elf { sh_flags } if sh_flags & u64::from(object::elf::SHF_WRITE) != 0);
        segments.push(Segment {
            start,
            bytes: data.into(),
            executable,
            writable,
        });
    }
    if segments.is_empty() {
        return Err(ImageError::elf(name, "no allocated section has an address"));
    }
    let base = segments.iter().map(|s| s.start).min().unwrap_or(0);
    let symbols = Symbols::new(
        functions(&file, |s| match s.section() {
            SymbolSection::Section(index) => address_of(index),
            _ => None,
        }),
        base,
    );
    Ok(Image {
        name: name.to_string(),
        segments,
        symbols,
        file: None,
    })
}

/// Writes one x86-64 relocation: `value` is S + A; `place` is P.
fn apply(
    name: &str,
    data: &mut [u8],
    offset: u64,
    flags: RelocationFlags,
    value: u64,
    place: u64,
) -> Result<(), ImageError> {
    let RelocationFlags::Elf { r_type } = flags else {
        return Err(ImageError::elf(name, "non-ELF relocation"));
    };
    let bytes: Vec<u8> = match r_type {
        R_X86_64_64 => value.to_le_bytes().to_vec(),
        R_X86_64_PC64 => value.wrapping_sub(place).to_le_bytes().to_vec(),
        R_X86_64_PC32 | R_X86_64_PLT32 => (value.wrapping_sub(place) as u32).to_le_bytes().to_vec(),
        R_X86_64_32 | R_X86_64_32S => (value as u32).to_le_bytes().to_vec(),
        // Other types (TLS, GOT) do not occur in the code paths traced here; leave them.
        _ => return Ok(()),
    };
    let at = offset as usize;
    let slot = data
        .get_mut(at..at + bytes.len())
        .ok_or_else(|| ImageError::elf(name, format!("relocation at offset {offset:#x} is outside its section")))?;
    slot.copy_from_slice(&bytes);
    Ok(())
}

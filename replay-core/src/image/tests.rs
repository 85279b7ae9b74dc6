//! Image tests on real ELF files: the test binary itself (a PIE with DWARF, loaded at the bias
//! it runs at and compared with its live memory), and a relocatable object written with
//! `object::write` (relocations against its own and external symbols).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use object::write::{Object as WriteObject, Relocation, StandardSection, Symbol as WriteSymbol, SymbolSection};
use object::{Architecture, BinaryFormat, Endianness, RelocationFlags, SymbolFlags, SymbolKind, SymbolScope};

use super::*;

/// The line of `fn marker_function` below: its entry address maps to it.
const MARKER_LINE: u32 = line!() + 2;
#[inline(never)]
fn marker_function(x: u64) -> u64 {
    x.wrapping_mul(0x9e37_79b9).rotate_left(7) ^ 0x5555
}

/// The test binary and the bias it runs at: the start of its first mapping (offset 0).
fn self_image() -> (PathBuf, u64) {
    let exe = std::env::current_exe().expect("current exe");
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    let exe_name = exe.to_str().expect("utf-8 path");
    let start = maps
        .lines()
        .find(|l| l.ends_with(exe_name) && l.split_whitespace().nth(2) == Some("00000000"))
        .and_then(|l| l.split('-').next())
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .expect("mapping of the test binary");
    (exe, start)
}

fn live_bytes(addr: u64, n: usize) -> Vec<u8> {
    let mut mem = std::fs::File::open("/proc/self/mem").expect("own memory");
    mem.seek(SeekFrom::Start(addr)).expect("seek");
    let mut buf = vec![0; n];
    mem.read_exact(&mut buf).expect("read own code");
    buf
}

#[test]
fn the_running_test_binary_reads_like_its_memory() {
    std::hint::black_box(marker_function(3));
    let (exe, bias) = self_image();
    let mut space = AddressSpace::new();
    space.add(Image::load(&exe, bias).expect("load self")).expect("add");
    let addr = marker_function as *const () as usize as u64;
    assert_eq!(space.bytes_at(addr).expect("code")[..32], live_bytes(addr, 32));

    let loc = space.locate(addr + 1).expect("located");
    assert!(
        loc.symbol.as_deref().is_some_and(|s| s.contains("marker_function")),
        "{loc:?}"
    );
    assert_eq!(loc.offset, 1);
    assert!(loc.to_string().ends_with("+0x1"), "{loc}");

    // Loaded by the address of its first mapping, as `--image FILE@ADDR` does.
    let mut by_address = AddressSpace::new();
    by_address
        .add(Image::load_at(&exe, Some(bias)).expect("load self"))
        .expect("add");
    assert_eq!(by_address.bytes_at(addr).expect("code")[..32], live_bytes(addr, 32));

    let line = space.source_line(addr).expect("DWARF line info");
    assert!(line.file.ends_with("image/tests.rs"), "{line:?}");
    assert_eq!(line.line, MARKER_LINE, "{line:?}");
}

#[test]
fn unknown_addresses_are_errors_naming_them() {
    let mut space = AddressSpace::new();
    space.add(Image::from_raw("code", 0x1000, vec![0x90; 16])).expect("add");
    assert_eq!(space.bytes_at(0x1008).expect("inside").len(), 8);
    let err = space.bytes_at(0x1010).expect_err("past the end");
    assert!(matches!(err, ImageError::NoImage { ip: 0x1010 }));
    assert_eq!(err.to_string(), "no image holds address 0x1010");
    assert!(space.bytes_at(0xfff).is_err());
    let loc = space.locate(0x1004).expect("raw image");
    assert_eq!((loc.symbol, loc.offset), (None, 4));
}

#[test]
fn overlapping_images_are_refused() {
    let mut space = AddressSpace::new();
    space.add(Image::from_raw("a", 0x1000, vec![0; 0x100])).expect("add a");
    space
        .add(Image::from_raw("b", 0x1100, vec![0; 0x100]))
        .expect("b is adjacent");
    let err = space
        .add(Image::from_raw("c", 0x10f0, vec![0; 0x20]))
        .expect_err("overlap");
    assert!(err.to_string().contains("overlaps a"), "{err}");
    assert_eq!(space.images().len(), 2);
}

#[test]
fn not_an_elf_file_is_a_clear_error() {
    let err = Image::from_elf("junk.bin", vec![0x7f, b'E', b'L', b'X', 0, 0], 0).expect_err("not ELF");
    assert!(err.to_string().starts_with("junk.bin: "), "{err}");
    let err = Image::load(Path::new("/no/such/file"), 0).expect_err("missing");
    assert!(err.to_string().contains("/no/such/file"), "{err}");
}

/// A relocatable object like a kernel module: `.text` calls a local function and an external
/// one, `.data` holds a pointer to the local function.
fn module_object() -> Vec<u8> {
    let mut obj = WriteObject::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
    let text = obj.section_id(StandardSection::Text);
    let data = obj.section_id(StandardSection::Data);
    // call f; call ext; ret; (pad) f: ret
    let code = [
        0xe8, 0, 0, 0, 0, 0xe8, 0, 0, 0, 0, 0xc3, 0x90, 0x90, 0x90, 0x90, 0x90, 0xc3,
    ];
    obj.append_section_data(text, &code, 16);
    obj.append_section_data(data, &[0; 8], 8);
    let f = obj.add_symbol(WriteSymbol {
        name: b"f".to_vec(),
        value: 16,
        size: 1,
        kind: SymbolKind::Text,
        scope: SymbolScope::Compilation,
        weak: false,
        section: SymbolSection::Section(text),
        flags: SymbolFlags::None,
    });
    let ext = obj.add_symbol(WriteSymbol {
        name: b"ext".to_vec(),
        value: 0,
        size: 0,
        kind: SymbolKind::Text,
        scope: SymbolScope::Unknown,
        weak: false,
        section: SymbolSection::Undefined,
        flags: SymbolFlags::None,
    });
    let reloc = |offset, symbol, r_type, addend| Relocation {
        offset,
        symbol,
        addend,
        flags: RelocationFlags::Elf { r_type },
    };
    obj.add_relocation(text, reloc(1, f, object::elf::R_X86_64_PLT32, -4))
        .expect("reloc");
    obj.add_relocation(text, reloc(6, ext, object::elf::R_X86_64_PLT32, -4))
        .expect("reloc");
    obj.add_relocation(data, reloc(0, f, object::elf::R_X86_64_64, 0))
        .expect("reloc");
    obj.write().expect("object file")
}

#[test]
fn relocatable_objects_get_section_addresses_and_relocations() {
    let path = std::env::temp_dir().join(format!("rtit-module-{}.o", std::process::id()));
    std::fs::write(&path, module_object()).expect("write object");
    let text = 0xffff_ffff_c000_0000_u64;
    let data = 0xffff_ffff_c000_1000_u64;
    let ext = 0xffff_ffff_8123_4560_u64;
    let image = Image::load_relocatable(
        &path,
        &|name| match name {
            ".text" => Some(text),
            ".data" => Some(data),
            _ => None,
        },
        &|name| (name == "ext").then_some(ext),
    )
    .expect("load module");
    std::fs::remove_file(&path).ok();
    let mut space = AddressSpace::new();
    space.add(image).expect("add");
    let code = space.bytes_at(text).expect("text");
    // call f: rel32 = (text + 16) - (text + 5) = 11
    assert_eq!(code[..5], [0xe8, 11, 0, 0, 0]);
    // call ext: rel32 = ext - (text + 10)
    let rel = (ext.wrapping_sub(text + 10)) as u32;
    assert_eq!(code[5..10], [&[0xe8][..], &rel.to_le_bytes()].concat()[..]);
    assert_eq!(space.bytes_at(data).expect("data")[..8], (text + 16).to_le_bytes());
    let loc = space.locate(text + 16).expect("f");
    assert_eq!(loc.symbol.as_deref(), Some("f"));
}

#[test]
fn main_of_a_stripped_program_is_what_its_entry_point_passes_to_libc() {
    let (exe, _) = self_image();
    let name = exe.display().to_string();
    let bytes = std::fs::read(&exe).expect("test binary");
    let (by_symbol, relocated) = defined_symbol(&name, &bytes, "main").expect("the test binary defines main");
    assert!(relocated, "the test binary is position independent");
    let file = object::File::parse(&*bytes).expect("ELF");
    assert_eq!(elf::main_from_entry(&file), Some(by_symbol));
    // A file whose entry point calls nothing with rdi set says so.
    let object = module_object();
    let err = defined_symbol("module.o", &object, "main").expect_err("no main in a module");
    assert!(err.to_string().starts_with("module.o: no symbol named main"), "{err}");
    let err = defined_symbol(&name, &bytes, "no_such_symbol_here").expect_err("absent");
    assert!(err.to_string().contains("no symbol named no_such_symbol_here"), "{err}");
}

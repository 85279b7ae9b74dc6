use std::path::{Path, PathBuf};

use super::*;
use crate::recording::Recording;

/// A copy of the small recording of the damaged-recordings corpus, sealed.
fn sealed_copy(name: &str) -> PathBuf {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corrupt/base");
    let dir = std::env::temp_dir().join(format!("rtit-seal-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join(files::IMAGES)).expect("mkdir");
    for entry in walk(&base) {
        let to = dir.join(entry.strip_prefix(&base).expect("inside"));
        std::fs::copy(&entry, to).expect("copy");
    }
    seal(&dir).expect("seal");
    dir
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        match e.file_type().expect("type").is_dir() {
            true => out.extend(walk(&e.path())),
            false => out.push(e.path()),
        }
    }
    out
}

/// Everything a replay reads, as `Recording` reads it.
fn read_all(dir: &Path) -> Result<(), RecordingError> {
    let rec = Recording::open(dir)?;
    rec.trace()?;
    rec.maps()?;
    rec.snapshot(false)?;
    rec.snapshot(true)?;
    rec.syscalls()?;
    rec.address_space()?;
    Ok(())
}

#[test]
fn a_sealed_recording_reads_as_written() {
    let dir = sealed_copy("whole");
    let rec = Recording::open(&dir).expect("open");
    assert!(rec.sealed());
    let sealed = rec.manifest.seal.as_ref().expect("seal");
    let names: Vec<&str> = sealed.files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "maps.json",
            "memory-end.bin",
            "memory-start.bin",
            "memory.json",
            "trace.rtit"
        ]
    );
    assert_eq!(sealed.files["trace.rtit"].bytes, 44);
    read_all(&dir).expect("every file as written");
    // Sealing again gives the same bytes: the seal is a function of the files.
    let before = std::fs::read(dir.join(files::MANIFEST)).expect("manifest");
    seal(&dir).expect("seal again");
    assert_eq!(std::fs::read(dir.join(files::MANIFEST)).expect("manifest"), before);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_flipped_bit_of_every_file_is_refused_naming_the_file() {
    let dir = sealed_copy("flips");
    let pristine: Vec<(PathBuf, Vec<u8>)> = walk(&dir)
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).expect("read");
            (p, bytes)
        })
        .collect();
    for (path, bytes) in &pristine {
        let name = path.file_name().expect("name").to_string_lossy().into_owned();
        // Bytes all over each file (every one of a small file), a bit each time (which bit
        // varies with the offset).
        let stride = (bytes.len() / 300).max(1);
        for at in (0..bytes.len()).step_by(stride) {
            let mut damaged = bytes.clone();
            damaged[at] ^= 1 << (at % 8);
            std::fs::write(path, &damaged).expect("write");
            let e = read_all(&dir).map_or_else(|e| e.to_string(), |()| panic!("{name} byte {at}: accepted"));
            assert!(e.contains(&name), "{name} byte {at}: {e}");
        }
        std::fs::write(path, bytes).expect("restore");
    }
    read_all(&dir).expect("restored");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_cut_and_added_files_are_refused_and_a_cut_trace_is_incomplete() {
    let dir = sealed_copy("files");
    let maps = dir.join(files::MAPS);
    let text = std::fs::read(&maps).expect("maps");

    std::fs::remove_file(&maps).expect("rm");
    let e = Recording::open(&dir).expect_err("missing").to_string();
    assert!(
        e.contains("maps.json: missing: the recording was written with it"),
        "{e}"
    );

    std::fs::write(&maps, &text[..text.len() - 1]).expect("cut");
    let e = read_all(&dir).expect_err("cut").to_string();
    assert!(e.contains("maps.json: ") && e.contains("it was cut short"), "{e}");

    let mut longer = text.clone();
    longer.push(b'\n');
    std::fs::write(&maps, &longer).expect("longer");
    let e = read_all(&dir).expect_err("longer").to_string();
    assert!(e.contains("it was changed after recording"), "{e}");
    std::fs::write(&maps, &text).expect("restore");

    std::fs::write(dir.join(files::SYSCALLS), b"").expect("add");
    let e = read_all(&dir).expect_err("added").to_string();
    assert!(
        e.contains("syscalls.jsonl: not one of the files the recording was written with"),
        "{e}"
    );
    std::fs::remove_file(dir.join(files::SYSCALLS)).expect("rm");

    // A trace cut short is returned as far as it goes: the replay calls it incomplete.
    let trace = dir.join(files::TRACE);
    let bytes = std::fs::read(&trace).expect("trace");
    std::fs::write(&trace, &bytes[..30]).expect("cut");
    let rec = Recording::open(&dir).expect("open");
    assert_eq!(rec.trace().expect("a prefix"), &bytes[..30]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn damage_is_placed_to_its_piece_and_the_whole_pieces_of_a_short_file_are_checked() {
    let bytes: Vec<u8> = (0..40u8).collect();
    let piece = 8;
    let sealed = FileSeal {
        bytes: 40,
        blake3: bytes.chunks(8).map(|c| hex(&blake3::hash(c))).collect(),
    };
    let path = Path::new("rec/trace.rtit");
    assert_eq!(check(path, &bytes, &sealed, piece).expect("whole"), Checked::Whole);
    let mut damaged = bytes.clone();
    damaged[27] ^= 0x40;
    let e = check(path, &damaged, &sealed, piece).expect_err("damaged").to_string();
    assert!(
        e.starts_with("rec/trace.rtit: bytes 24 to 32 are not what the recording wrote"),
        "{e}"
    );
    assert_eq!(
        check(path, &bytes[..21], &sealed, piece).expect("short"),
        Checked::Short { unchecked: 5 }
    );
    let e = check(path, &damaged[..33], &sealed, piece).expect_err("a damaged whole piece");
    assert!(e.to_string().contains("bytes 24 to 32"), "{e}");
    // The damage is in the piece cut in two: nothing there to compare with.
    assert_eq!(
        check(path, &damaged[..29], &sealed, piece).expect("unchecked"),
        Checked::Short { unchecked: 5 }
    );
    let wrong_count = FileSeal {
        blake3: sealed.blake3[..4].to_vec(),
        ..sealed.clone()
    };
    assert!(check(path, &bytes, &wrong_count, piece).is_err());
}

#[test]
fn check_seal_reads_every_file_whoever_reads_it_later() {
    let dir = sealed_copy("check");
    let rec = Recording::open(&dir).expect("open");
    let checked = rec.check_seal().expect("as written").expect("sealed");
    assert_eq!(checked.files, 7, "five sealed files and two images");
    assert!(checked.bytes > 8192, "{}", checked.bytes);
    assert!(checked.foreign.is_empty(), "{:?}", checked.foreign);
    std::fs::write(dir.join("notes.txt"), b"mine").expect("write");
    std::fs::create_dir(dir.join("extra")).expect("mkdir");
    std::fs::write(dir.join("images/evil"), b"x").expect("write");
    std::fs::write(dir.join("timeline.cache"), b"not a recording's file either").expect("write");
    let checked = rec.check_seal().expect("as written").expect("sealed");
    assert_eq!(checked.foreign, ["extra", "notes.txt", "images/evil"]);
    let start = dir.join(files::MEMORY_START);
    let pristine = std::fs::read(&start).expect("read");
    for (damaged, expect) in [
        (
            [&pristine[..100], &[pristine[100] ^ 0x10], &pristine[101..]].concat(),
            "bytes 0 to 4096 are not what",
        ),
        (
            pristine[..4000].to_vec(),
            "4000 bytes where the recording wrote 4096: it was cut short",
        ),
        (
            [&pristine[..], b"x"].concat(),
            "more than the 4096 bytes the recording wrote",
        ),
    ] {
        std::fs::write(&start, &damaged).expect("write");
        let e = rec.check_seal().expect_err(expect).to_string();
        assert!(e.contains("memory-start.bin: ") && e.contains(expect), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

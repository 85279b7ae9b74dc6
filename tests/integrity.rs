//! A recording damaged after it was written is never served as another history (issue 38).
//! RTIT packets carry no checksum: one flipped bit of a TIP's address in a recording of `grep`
//! decoded, without an error, to instructions that never ran, and an edited system call log
//! shows other values. A recording `rtit record` makes (here: Debian's grep under the qemu
//! backend, the default) is sealed; every change to any of its files is refused, naming the
//! file.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use rtit_replay_core::packet::{DecoderConfig, Packet, PacketDecoder};
use rtit_replay_core::recording::{files, Recording, RecordingError};

fn rtit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(args)
        .env("RTIT_QEMU_PLUGIN", common::plugin())
        .output()
        .expect("run rtit")
}

/// `grep -c a` over a few thousand lines, recorded once with the qemu backend.
fn recording() -> &'static Path {
    static REC: OnceLock<PathBuf> = OnceLock::new();
    REC.get_or_init(|| {
        let dir = common::scratch("integrity", "recorded");
        let input = dir.join("input.txt");
        let text: String = (0..3000).map(|i| format!("line {i} {}\n", i * 7919 % 1000)).collect();
        std::fs::write(&input, text).expect("input");
        let out = dir.join("rec");
        let args = [
            "record",
            "--backend",
            "qemu",
            "--out",
            s(&out),
            "--",
            "/usr/bin/grep",
            "-c",
            "1",
            s(&input),
        ];
        let done = rtit(&args);
        assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
        out
    })
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A copy of the recording to damage.
fn copy(name: &str) -> PathBuf {
    let dir = common::scratch("integrity", name).join("rec");
    let status = Command::new("cp")
        .arg("-r")
        .arg(recording())
        .arg(&dir)
        .status()
        .expect("cp");
    assert!(status.success());
    dir
}

/// Reads every file of the recording in `dir` as a replay does.
fn read_all(dir: &Path) -> Result<(), RecordingError> {
    let rec = Recording::open(dir)?;
    rec.trace()?;
    rec.maps()?;
    rec.snapshot(false)?;
    rec.snapshot(true)?;
    rec.syscalls()?;
    rec.signals()?;
    rec.results()?;
    rec.cpuid()?;
    rec.anchors()?;
    rec.code_ran()?;
    rec.sync_points()?;
    rec.address_space()?;
    Ok(())
}

/// Pseudo-random numbers, the same every run (a linear congruential generator).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

#[test]
fn random_flips_and_overwrites_anywhere_in_any_file_are_refused_naming_it() {
    let dir = copy("flips");
    read_all(&dir).expect("the recording as written");
    let rec = Recording::open(&dir).expect("open");
    let mut names: Vec<String> = rec
        .manifest
        .seal
        .as_ref()
        .expect("sealed")
        .files
        .keys()
        .cloned()
        .collect();
    for expected in [
        files::TRACE,
        files::MAPS,
        files::SYSCALLS,
        files::CPUID,
        files::MEMORY_START,
    ] {
        assert!(names.iter().any(|n| n == expected), "{expected} is sealed: {names:?}");
    }
    names.push(files::MANIFEST.to_string());
    names.extend(rec.manifest.images.iter().map(|i| i.file.clone()));
    let mut rng = Lcg(38);
    let mut tried = 0;
    for name in &names {
        let path = dir.join(name);
        let pristine = std::fs::read(&path).expect("read");
        // The trace gets the most: a flip there was the silent case.
        let (flips, overwrites) = if name == files::TRACE { (300, 100) } else { (30, 10) };
        for n in 0..flips + overwrites {
            let mut damaged = pristine.clone();
            let at = rng.below(damaged.len());
            match n < flips {
                true => damaged[at] ^= 1 << rng.below(8),
                false => damaged[at] = damaged[at].wrapping_add(1 + rng.below(255) as u8),
            }
            std::fs::write(&path, &damaged).expect("write");
            match read_all(&dir) {
                Ok(()) => panic!("{name}: byte {at} changed, and the recording was accepted"),
                Err(e) => assert!(e.to_string().contains(name.as_str()), "{name} byte {at}: {e}"),
            }
            tried += 1;
        }
        std::fs::write(&path, &pristine).expect("restore");
    }
    assert!(tried > 400);
    read_all(&dir).expect("restored, the recording reads again");
}

/// The TIP packets of a trace whose payload has at least its low byte: (offset of that byte).
fn tip_address_bytes(trace: &[u8]) -> Vec<usize> {
    PacketDecoder::new(trace, DecoderConfig::default())
        .filter_map(Result::ok)
        .filter(|d| matches!(d.packet, Packet::Tip(p) if p.size.bytes() > 0))
        .map(|d| d.offset + 1)
        .collect()
}

#[test]
fn a_flipped_tip_address_bit_that_decodes_cleanly_is_refused_by_the_seal() {
    let sealed = copy("tip");
    let unsealed = copy("tip-unsealed");
    // The same recording without its seal, as an older rtit wrote it (version 2).
    let manifest = unsealed.join(files::MANIFEST);
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest).expect("read")).expect("json");
    doc.as_object_mut().expect("object").remove("seal");
    doc["version"] = 2.into();
    std::fs::write(&manifest, serde_json::to_vec_pretty(&doc).expect("json")).expect("write");

    let trace = std::fs::read(sealed.join(files::TRACE)).expect("trace");
    let tips = tip_address_bytes(&trace);
    assert!(tips.len() > 100, "{} TIPs", tips.len());
    // The first flip of a TIP's lowest address bit that the decoder alone takes for another
    // history: the count comes out as recorded, no error.
    let mut silent = None;
    for &at in tips.iter().step_by(tips.len() / 40) {
        let mut damaged = trace.clone();
        damaged[at] ^= 1;
        std::fs::write(unsealed.join(files::TRACE), &damaged).expect("write");
        let out = rtit(&["info", "--decode", s(&unsealed)]);
        if out.status.success() && String::from_utf8_lossy(&out.stdout).contains(" 0 errors") {
            silent = Some((at, damaged));
            break;
        }
    }
    let (at, damaged) = silent.expect("a flipped TIP address bit that decodes without an error");
    std::fs::write(sealed.join(files::TRACE), &damaged).expect("write");
    for args in [
        vec!["info", "--decode", s(&sealed)],
        vec!["insns", s(&sealed)],
        vec!["replay", "--no-gdb", "--port", "0", s(&sealed)],
    ] {
        let out = rtit(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let piece = at / (4 << 20) * (4 << 20);
        let expect = format!("trace.rtit: bytes {piece} to ");
        assert_eq!(out.status.code(), Some(1), "rtit {}: {stderr}", args.join(" "));
        assert!(
            stderr.contains(&expect) && stderr.contains("are not what the recording wrote"),
            "rtit {}: {stderr}",
            args.join(" ")
        );
    }
}

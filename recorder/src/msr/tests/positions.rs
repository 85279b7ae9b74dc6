//! Sideband stops (map changes) in the trace: the collector's marks, their positions after
//! decoding, and the writer completing a recording from them.

use rtit_replay_core::flow::OffsetPositions;
use rtit_replay_core::recording::TraceGap;

use super::*;

#[test]
fn a_draining_flight_recorder_keeps_the_newest_region_full_from_a_psb() {
    let machine = SimMachine::new(PHYS, 1 << 12);
    let mut region = SimRegion {
        machine,
        at: 0,
        size: 128,
    };
    let mut c = Collector::keeping_last(&mut region);
    let mut marks = Vec::new();
    // Three drains of 100 bytes, each a PSB then filler.
    for fill in [1u8, 2, 3] {
        let mut bytes = [fill; 100];
        let psb = rtit_replay_core::packet::PSB_BYTES;
        bytes[..psb.len()].copy_from_slice(&psb);
        for (k, b) in bytes.iter().enumerate() {
            region.fill(k, 1, *b);
        }
        c.drain(&mut region, 100);
        marks.push(c.mark());
    }
    assert_eq!(marks, [100, 200, 300], "marks count every byte, kept or not");
    let kept = c.finish();
    assert_eq!(kept.trace.len(), 100, "only the last PSB on fits in 128 bytes");
    assert!(kept.trace[rtit_replay_core::packet::PSB_BYTES.len()..]
        .iter()
        .all(|&b| b == 3));
    assert_eq!(kept.dropped, 200);
    assert_eq!(
        kept.gaps,
        [TraceGap {
            offset: 0,
            lost_bytes: None
        }]
    );
    let placed: Vec<Option<u64>> = marks.iter().map(|&m| kept.offset_of(m)).collect();
    assert_eq!(placed, [None, Some(0), Some(100)]);
}

/// Where the sideband stops are in the decoded history.
fn stop_positions(space: &AddressSpace, t: &Traced) -> (u64, Vec<u64>) {
    let offsets: Vec<u64> = t.marks.iter().flatten().copied().collect();
    let mut sink = OffsetPositions::new(&offsets);
    decode_into(space, t, &mut sink);
    sink.finish()
}

#[test]
fn sideband_stops_are_placed_at_the_instruction_where_they_happened() {
    let mut r = rig(64 << 10, 400);
    r.target.sideband_every = 7;
    let t = run(&mut r, WrapMode::Drain).expect("records");
    assert!(t.gaps.is_empty());
    let stops = r.target.sideband_stops.clone();
    assert!(stops.len() > 5, "{} stops", stops.len());
    assert_eq!(t.marks.len(), stops.len());
    let (count, positions) = stop_positions(&r.space, &t);
    assert_eq!(count as usize, r.truth.len() - 1, "the decoded count is the run's");
    // The discovery step ran the first instruction before tracing.
    let expected: Vec<u64> = stops.iter().map(|n| n - 1).collect();
    assert_eq!(positions, expected);
}

#[test]
fn a_flight_recorder_places_the_stops_it_kept_and_drops_the_rest() {
    let mut r = rig(4 << 10, 100);
    r.target.sideband_every = 5;
    let t = run(&mut r, WrapMode::FlightRecorder).expect("records");
    let stops = r.target.sideband_stops.clone();
    assert_eq!(t.marks.len(), stops.len());
    assert!(t.trace.len() <= 4 << 10);
    let dropped = t.marks.iter().take_while(|m| m.is_none()).count();
    assert!(dropped > 0 && dropped < stops.len(), "{:?}", t.marks);
    assert!(t.marks[dropped..].iter().all(Option::is_some));
    // Positions in the kept history: it ends with the run, so count back from the end.
    let (count, positions) = stop_positions(&r.space, &t);
    let total = r.truth.len() as u64 - 1;
    let expected: Vec<u64> = stops[dropped..].iter().map(|n| n - 1 - (total - count)).collect();
    assert_eq!(positions, expected);
}

/// A minimal executable: one PT_LOAD segment holding `code` at `vaddr` (page aligned).
fn tiny_elf(vaddr: u64, code: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 0x1000];
    f[..4].copy_from_slice(b"\x7fELF");
    f[4..8].copy_from_slice(&[2, 1, 1, 0]); // 64-bit, little endian, version 1
    let put = |f: &mut Vec<u8>, at: usize, bytes: &[u8]| f[at..at + bytes.len()].copy_from_slice(bytes);
    put(&mut f, 16, &2u16.to_le_bytes()); // ET_EXEC
    put(&mut f, 18, &62u16.to_le_bytes()); // x86-64
    put(&mut f, 20, &1u32.to_le_bytes());
    put(&mut f, 24, &vaddr.to_le_bytes()); // entry
    put(&mut f, 32, &64u64.to_le_bytes()); // program headers at 64
    put(&mut f, 52, &64u16.to_le_bytes()); // header size
    put(&mut f, 54, &56u16.to_le_bytes()); // program header size
    put(&mut f, 56, &1u16.to_le_bytes()); // one
    put(&mut f, 58, &64u16.to_le_bytes()); // section header size
    let ph = 64;
    put(&mut f, ph, &1u32.to_le_bytes()); // PT_LOAD
    put(&mut f, ph + 4, &5u32.to_le_bytes()); // R+X
    put(&mut f, ph + 8, &0x1000u64.to_le_bytes()); // offset
    put(&mut f, ph + 16, &vaddr.to_le_bytes());
    put(&mut f, ph + 24, &vaddr.to_le_bytes());
    put(&mut f, ph + 32, &(code.len() as u64).to_le_bytes());
    put(&mut f, ph + 40, &(code.len() as u64).to_le_bytes());
    put(&mut f, ph + 48, &0x1000u64.to_le_bytes());
    f.extend_from_slice(code);
    f
}

/// The whole path a hardware recording takes after the session: the writer decodes what it
/// wrote, and the manifest and maps.json get the count and positions the hardware could
/// not give.
#[test]
fn the_writer_counts_the_instructions_and_places_the_map_changes_by_decoding() {
    use crate::outcome::{FromTrace, Outcome};
    use crate::writer::{self, Meta};
    use rtit_replay_core::recording::{MapChange, Mapping, Maps, Recording, SignalEntry};
    use rtit_replay_core::syscall::{MemoryWrite, SyscallRecord};

    let mut r = rig(64 << 10, 400);
    r.target.sideband_every = 5;
    let t = run(&mut r, WrapMode::Drain).expect("records");
    let root = std::env::temp_dir().join(format!("rtit-msr-writer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("temp dir");
    let exe = root.join("loops");
    std::fs::write(&exe, tiny_elf(BASE, &r.code)).expect("elf");
    let mut images = crate::sideband::Images::default();
    images.add(&exe.display().to_string(), BASE);
    let change = |k: u64| MapChange {
        position: 0,
        syscall: "mmap".into(),
        added: vec![Mapping {
            start: 0x7000_0000 + k * 0x1000,
            end: 0x7000_1000 + k * 0x1000,
            perms: "rw-p".into(),
            offset: 0,
            path: None,
        }],
        removed: Vec::new(),
        mapped_start: None,
        mapped_end: None,
    };
    let offsets: Vec<u64> = t.marks.iter().map(|m| m.expect("drain mode keeps all")).collect();
    // Each stop is also a system call's exit (the call is the instruction before the stop's
    // position), and the second a signal handler's entry.
    let stops = &r.target.sideband_stops;
    let syscalls: Vec<SyscallRecord> = stops
        .iter()
        .map(|&n| SyscallRecord {
            position: 0,
            ip: r.truth[n as usize - 1],
            nr: 39,
            before: Default::default(),
            after: [("rax".to_string(), "0x7".to_string())].into(),
            writes: Vec::new(),
            complete: true,
            unlogged: Vec::new(),
        })
        .collect();
    let signal = SignalEntry {
        position: 0,
        ip: r.truth[stops[1] as usize],
        registers: [("rsp".to_string(), "0x7ff0".to_string())].into(),
        frame: MemoryWrite::new(0x7ff0, &[1, 2]),
        only_kernel: true,
        switch: None,
    };
    let outcome = Outcome {
        trace: t.trace.clone().into(),
        instructions: 0,
        truth: None,
        memory_start: Default::default(),
        memory_end: Default::default(),
        maps: Maps {
            initial: Vec::new(),
            changes: (0..offsets.len() as u64).map(change).collect(),
        },
        images,
        registers_start: Default::default(),
        registers_end: Default::default(),
        start_ip: t.start_ip,
        cr3: t.cr3.unwrap_or(0),
        end: t.end.clone(),
        config: t.config,
        modules: Vec::new(),
        gaps: t.gaps.clone(),
        syscalls,
        results: Vec::new(),
        syscalls_file: None,
        anchor_files: None,
        code_file: None,
        sync_file: None,
        signals: vec![signal],
        cpuid: Vec::new(),
        xcr0: None,
        from_trace: Some(FromTrace {
            change_offsets: offsets.clone(),
            syscall_offsets: offsets.clone(),
            signal_offsets: vec![offsets[1]],
        }),
        kernel_text: None,
        trace_end: None,
        children: Vec::new(),
        warnings: Vec::new(),
    };
    let meta = Meta {
        command: vec!["loops".into()],
        backend: "msr".into(),
        aslr: false,
    };
    let dir = root.join("rec");
    let manifest = writer::write(&dir, &outcome, &meta).expect("writes");
    assert_eq!(manifest.instructions as usize, r.truth.len() - 1);
    let rec = Recording::open(&dir).expect("opens");
    assert_eq!(rec.manifest, manifest, "the manifest on disk is the completed one");
    let positions: Vec<u64> = rec.maps().expect("maps").changes.iter().map(|c| c.position).collect();
    let expected: Vec<u64> = r.target.sideband_stops.iter().map(|n| n - 1).collect();
    assert!(expected.len() > 5);
    assert_eq!(positions, expected);
    let calls: Vec<u64> = rec.syscalls().expect("syscalls").iter().map(|c| c.position).collect();
    let before: Vec<u64> = expected.iter().map(|p| p - 1).collect();
    assert_eq!(calls, before, "each call is the instruction before its exit stop");
    let signals = rec.signals().expect("signals");
    assert_eq!(signals.len(), 1);
    assert_eq!(signals[0].position, expected[1], "the handler's first instruction");
    let _ = std::fs::remove_dir_all(&root);
}

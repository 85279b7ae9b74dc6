use super::format::{read, write};
use super::temporary::abandon_where;
use super::*;
use crate::flow::{EventKind, FlowEvent};

fn sample() -> Timeline {
    let mut t = Timeline::default();
    // Blocks that follow one another in several ways, over more than one mark of runs.
    let blocks: Vec<u32> = (0..20u64)
        .map(|i| t.blocks.add(&[0x1000 + 8 * i, 0x1004 + 8 * i]))
        .collect();
    for round in 0..150u64 {
        for i in [0, 1 + round % 17, 2, 1 + round % 3] {
            t.push_run(blocks[i as usize], 2);
        }
    }
    for ip in [0x1000, 0x1004, 0x1008, 0x2000] {
        t.push_ip(ip);
    }
    t.events.push(FlowEvent {
        kind: EventKind::Interrupt {
            ip: 0x1004,
            target: 0x9000,
        },
        offset: 17,
        position: 5,
    });
    t.events.push(FlowEvent {
        kind: EventKind::Error {
            ip: None,
            message: "a TIP with no branch to take".to_string(),
        },
        offset: 99,
        position: 120,
    });
    t.events.push(FlowEvent {
        kind: EventKind::Spins {
            ip: 0x1008,
            instructions: Some(7),
        },
        offset: 130,
        position: 199,
    });
    t
}

/// An empty directory of the test's own, removed when dropped (even when the test fails).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rtit-cache-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch directory");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn key(n: u8) -> Key {
    Key([n; 32])
}

fn bytes(t: &Timeline, k: &Key) -> Vec<u8> {
    let mut out = Vec::new();
    write(t, Prefix::of(t), k, &mut out).expect("write");
    out
}

fn back(b: &[u8], k: &Key) -> Result<Timeline, CacheError> {
    read(b, k, b.len() as u64)
}

#[test]
fn a_stored_timeline_reads_back_the_same() {
    let t = sample();
    let r = back(&bytes(&t, &key(1)), &key(1)).expect("read");
    assert_eq!(t.first_difference(&r), None);
    assert_eq!((&t.runs, t.len), (&r.runs, r.len));
    assert_eq!(t.events, r.events);
    for p in [0, 1, 77, 199, 1203] {
        assert_eq!(t.ip_at(p), r.ip_at(p));
    }
}

#[test]
fn a_long_history_of_few_blocks_reads_back() {
    // Half a byte a run: the file is far smaller than its run count in words.
    let mut t = Timeline::default();
    let a = t.blocks.add(&[0x1000]);
    let b = t.blocks.add(&[0x2000, 0x2002]);
    for i in 0..100_000 {
        t.push_run(if i % 3 == 0 { b } else { a }, if i % 3 == 0 { 2 } else { 1 });
    }
    let stored = bytes(&t, &key(1));
    assert!(stored.len() < 100_000, "{} bytes for 100000 runs", stored.len());
    let r = back(&stored, &key(1)).expect("read");
    assert_eq!(t.first_difference(&r), None);
}

#[test]
fn blocks_whose_instructions_do_not_follow_one_another_are_stored_as_they_are() {
    let mut t = sample();
    let odd = t.blocks.add(&[0x9000, 0x1000, 0x1000 + 300]);
    t.push_run(odd, 3);
    let r = back(&bytes(&t, &key(1)), &key(1)).expect("read");
    assert_eq!(t.first_difference(&r), None);
    assert_eq!(r.ip_at(t.len() - 2), Some(0x1000));
}

#[test]
fn only_the_prefix_is_stored() {
    let mut t = sample();
    let before = t.clone();
    let prefix = Prefix::of(&t);
    t.push_ip(0xdead);
    let mut out = Vec::new();
    write(&t, prefix, &key(1), &mut out).expect("write");
    let r = back(&out, &key(1)).expect("read");
    assert_eq!(before.first_difference(&r), None);
    assert_eq!(r.len(), t.len() - 1);
}

#[test]
fn another_key_or_another_file_is_refused() {
    let b = bytes(&sample(), &key(1));
    assert!(matches!(back(&b, &key(2)), Err(CacheError::OtherKey)));
    assert!(matches!(
        back(b"not a timeline at all, no", &key(1)),
        Err(CacheError::NotACache)
    ));
}

#[test]
fn a_file_an_older_rtit_stored_unpacked_is_named_as_such() {
    let scratch = Scratch::new("unpacked");
    let t = sample();
    fs::write(scratch.0.join(FILE), bytes(&t, &key(6))).expect("written");
    assert!(matches!(load(&scratch.0, &key(6)), Err(CacheError::Unpacked)));
    fs::write(scratch.0.join(FILE), b"neither form").expect("written");
    assert!(matches!(load(&scratch.0, &key(6)), Err(CacheError::NotACache)));
    // The packed form of the same history is read back.
    store(&scratch.0, key(6), Arc::new(t), Prefix::of(&sample()))
        .expect("writable")
        .join()
        .unwrap()
        .expect("written");
    let r = load(&scratch.0, &key(6)).expect("readable").expect("there");
    assert_eq!(sample().first_difference(&r), None);
}

#[test]
fn any_damaged_byte_or_a_cut_is_refused_with_where() {
    let b = bytes(&sample(), &key(1));
    // Every byte after the key, one at a time: the checksum or a check catches each.
    for at in 40..b.len() {
        let mut d = b.clone();
        d[at] ^= 0x40;
        match back(&d, &key(1)) {
            Err(CacheError::Corrupt { offset, .. }) => assert!(offset <= b.len() as u64),
            other => panic!("byte {at} changed: {other:?}"),
        }
    }
    for cut in [41, 100, b.len() - 1] {
        match back(&b[..cut], &key(1)) {
            Err(CacheError::Corrupt { what, .. }) => assert!(
                what.contains("ends early") || what.contains("checksum") || what.contains("sizes"),
                "{what}"
            ),
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
    let mut longer = b.clone();
    longer.push(0);
    assert!(matches!(
        back(&longer, &key(1)),
        Err(CacheError::Corrupt {
            what: "bytes after the checksum",
            ..
        })
    ));
}

#[test]
fn the_key_follows_the_trace_and_every_file_of_the_recording() {
    let scratch = Scratch::new("key");
    let dir = scratch.0.clone();
    fs::create_dir_all(dir.join("images")).unwrap();
    fs::write(dir.join("manifest.json"), "{}").unwrap();
    fs::write(dir.join("images/a"), "abc").unwrap();
    let k = Key::of(&dir, b"trace", None).expect("key");
    assert_eq!(
        Key::of(&dir, b"trace", None),
        Some(k.clone()),
        "the same recording, the same key"
    );
    assert_ne!(Key::of(&dir, b"trace!", None), Some(k.clone()), "another trace");
    assert_ne!(
        Key::of(&dir, b"tracf", None),
        Some(k.clone()),
        "a trace of the same size"
    );
    // A sealed trace, checked against its hashes, is known by them.
    let sealed = |h: &str| Key::of(&dir, b"trace", Some(&[h.to_string()]));
    assert_eq!(sealed("ab"), sealed("ab"));
    assert_ne!(sealed("ab"), sealed("ac"), "other hashes");
    assert_ne!(sealed("ab"), Some(k.clone()), "hashes, not the bytes");
    fs::write(dir.join(FILE), "anything").unwrap();
    assert_eq!(
        Key::of(&dir, b"trace", None),
        Some(k.clone()),
        "the stored timeline is not part of it"
    );
    fs::write(dir.join("images/a"), "abcd").unwrap();
    assert_ne!(Key::of(&dir, b"trace", None), Some(k), "an image changed");
}

#[test]
fn obtain_decodes_once_then_reads_back() {
    let scratch = Scratch::new("obtain");
    let dir = scratch.0.clone();
    let (t, origin, pending) = obtain(&dir, b"trace", None, Policy::Always, sample);
    assert!(matches!(origin, Origin::Decoded { set_aside: None, .. }), "{origin:?}");
    let path = pending
        .store(Arc::new(t))
        .expect("stored")
        .join()
        .unwrap()
        .expect("written");
    assert_eq!(path, dir.join(FILE));
    let (r, origin, pending) = obtain(&dir, b"trace", None, Policy::Always, || panic!("decoded again"));
    assert!(matches!(origin, Origin::Read(_)), "{origin:?}");
    assert!(pending.store(Arc::new(r.clone())).is_none(), "nothing to store again");
    assert_eq!(sample().first_difference(&r), None);
    // Another trace: the stored one is set aside and the new one stored over it.
    let (_, origin, _) = obtain(&dir, b"other", None, Policy::Always, sample);
    assert!(
        matches!(
            origin,
            Origin::Decoded {
                set_aside: Some(CacheError::OtherKey),
                ..
            }
        ),
        "{origin:?}"
    );
    // Damaged: set aside too.
    let mut b = fs::read(dir.join(FILE)).unwrap();
    let last = b.len() - 1;
    b[last] ^= 1;
    fs::write(dir.join(FILE), b).unwrap();
    let (_, origin, _) = obtain(&dir, b"trace", None, Policy::Auto, sample);
    assert!(
        matches!(
            origin,
            Origin::Decoded {
                set_aside: Some(CacheError::Corrupt { .. }),
                ..
            }
        ),
        "{origin:?}"
    );
    let (_, origin, _) = obtain(&dir, b"trace", None, Policy::Off, sample);
    assert!(
        matches!(origin, Origin::Decoded { set_aside: None, .. }),
        "Off reads nothing: {origin:?}"
    );
}

#[test]
fn only_the_copies_of_replays_that_ended_are_removed() {
    let scratch = Scratch::new("stale");
    let dir = scratch.0.clone();
    let gone = dir.join(format!("{FILE}.4000000000.0.tmp"));
    let running = dir.join(format!("{FILE}.1.0.tmp"));
    fs::write(&gone, "half").unwrap();
    fs::write(&running, "half").unwrap();
    let t = Arc::new(sample());
    store(&dir, key(3), t.clone(), Prefix::of(&t))
        .expect("writable")
        .join()
        .unwrap()
        .expect("written");
    assert!(!gone.exists(), "left by a process that is gone");
    assert!(running.exists(), "being written by pid 1");
    assert!(dir.join(FILE).exists());
    // Two stores of one process at once write to files of their own.
    let (a, b) = (
        store(&dir, key(4), t.clone(), Prefix::of(&t)).expect("writable"),
        store(&dir, key(4), t.clone(), Prefix::of(&t)).expect("writable"),
    );
    a.join().unwrap().expect("first written");
    b.join().unwrap().expect("second written");
    let r = load(&dir, &key(4)).expect("readable").expect("there");
    assert_eq!(sample().first_difference(&r), None);
}

/// The temporaries being written in `dir`.
fn temporaries(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .expect("readable")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "tmp"))
        .collect();
    found.sort();
    found
}

#[test]
fn a_store_abandoned_while_it_writes_leaves_nothing_behind() {
    let scratch = Scratch::new("abandoned");
    let dir = scratch.0.clone();
    let (started, wait_started) = std::sync::mpsc::channel();
    let (go_on, wait_go_on) = std::sync::mpsc::channel::<()>();
    // A writer that has written a first buffer and stays in the middle of its store until
    // the test lets it go on: the store is in progress, deterministically.
    let handle = write_in_background(&dir, move |out| {
        out.write_all(&[7; 4096])?;
        out.flush()?;
        started.send(()).expect("the test waits");
        wait_go_on.recv().expect("the test lets it go on");
        out.write_all(&[7; 4096])?;
        out.flush()
    })
    .expect("writable");
    wait_started.recv().expect("the writer started");
    let being_written = temporaries(&dir);
    assert_eq!(being_written.len(), 1, "{being_written:?}");
    // The magic, and the first buffer packed as a block of its own.
    let written = fs::metadata(&being_written[0]).expect("there").len();
    assert!((17..4096).contains(&written), "{written} bytes");

    assert_eq!(abandon_where(|p| p.starts_with(&dir)), 1, "one store was in progress");
    assert_eq!(
        temporaries(&dir),
        [] as [PathBuf; 0],
        "removed at once, the writer still running"
    );
    go_on.send(()).expect("the writer waits");
    let result = handle.join().expect("no panic");
    assert!(matches!(result, Err(CacheError::Abandoned)), "{result:?}");
    assert_eq!(temporaries(&dir), [] as [PathBuf; 0]);
    assert!(!dir.join(FILE).exists(), "nothing renamed into place");

    // A store that was renamed into place is not the abandoning's to remove.
    let t = Arc::new(sample());
    store(&dir, key(5), t.clone(), Prefix::of(&t))
        .expect("writable")
        .join()
        .expect("no panic")
        .expect("written");
    assert_eq!(abandon_where(|p| p.starts_with(&dir)), 0);
    assert!(load(&dir, &key(5)).expect("readable").is_some(), "kept");
}

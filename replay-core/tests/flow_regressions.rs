//! Inputs that broke the flow decoder, replayed on every `cargo test`: the fuzzer's finds in
//! `fuzz/regressions/flow_decode/` (out-of-memory decodes of the decoder before it caught
//! walks the trace cannot end) and its seeds in `fuzz/seeds/flow_decode/`, each checked as
//! the fuzz target checks it, each given a time limit so a decode that loops fails instead
//! of hanging the suite.

mod flow_input;

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn every_input_the_fuzzer_found_decodes_within_its_bound() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut inputs = Vec::new();
    for dir in ["regressions/flow_decode", "seeds/flow_decode"] {
        for entry in std::fs::read_dir(fuzz.join(dir)).expect("the corpus is checked in") {
            let path = entry.expect("entry").path();
            inputs.push((path.clone(), std::fs::read(&path).expect("input")));
        }
    }
    assert!(inputs.len() >= 6, "the regressions and seeds are all there");
    for (path, data) in inputs {
        let (done, wait) = mpsc::channel();
        std::thread::spawn(move || {
            flow_input::check(&data);
            let _ = done.send(());
        });
        match wait.recv_timeout(Duration::from_secs(60)) {
            Ok(()) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("{}: the decode did not end", path.display()),
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{}: a check failed (above)", path.display()),
        }
    }
}

//! Fuzzes the flow decoder with the inputs and checks of `replay-core/tests/flow_input`
//! (shared with the regression test that replays `fuzz/regressions/flow_decode/`). A decode
//! that loops shows as a libFuzzer timeout, one that grows as an out-of-memory.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../replay-core/tests/flow_input/mod.rs"]
mod flow_input;

fuzz_target!(|data: &[u8]| flow_input::check(data));

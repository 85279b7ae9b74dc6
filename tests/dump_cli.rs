//! `rtit dump` end to end: the real binary on hand-encoded byte streams (figure 2, §4.2),
//! its `--json` output compared field by field.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

#[allow(dead_code)] // the example's `main` is not used here
#[path = "../examples/sample_trace.rs"]
mod sample_trace;

/// A scratch file under the target directory, unique per test.
fn trace_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dump_cli");
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write trace");
    path
}

fn rtit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(args)
        .output()
        .expect("run rtit")
}

fn dump_json(bytes: &[u8], name: &str, extra: &[&str]) -> Vec<Value> {
    let path = trace_file(name, bytes);
    let mut args = vec!["dump", "--json"];
    args.extend_from_slice(extra);
    let path = path.to_str().expect("utf-8 path");
    args.push(path);
    let out = rtit(&args);
    assert!(
        out.status.success(),
        "rtit dump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8 output")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

/// Checks that every expected field is present with the expected value (other fields may be
/// added by `rtit dump`).
fn assert_fields(got: &[Value], want: &[Value]) {
    assert_eq!(got.len(), want.len(), "packet count\ngot:  {got:#?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        for (key, value) in w.as_object().expect("object") {
            assert_eq!(g.get(key), Some(value), "line {i} field {key}: {g}");
        }
    }
}

#[test]
fn json_fields_for_every_packet_type_and_compression() {
    let bytes = [
        0xc0, 0, 0, 0, 0, 0, 0, 0, 0, // PSB
        0x82, 0x34, 0x12, 0x40, 0x00, 0x00, 0x00, // FUP.PGE, 6 bytes
        0x05, // TNT: N T
        0x7e, // TNT: T T T T T N
        0xb0, 0x78, 0x56, // TIP, 2 bytes against the last IP
        0xb1, 0x00, 0x10, 0x41, 0x00, // TIP, 4 bytes against the last IP
        0xbd, 0x00, 0x10, 0x50, 0x00, // FUP.FAR, 4 bytes zero-extended
        0xb4, 0x00, 0x20, // TIP, 2 bytes zero-extended
        0xb2, 0x00, 0x10, 0x00, 0x81, 0xff, 0xff, // TIP, kernel address: bit 47 sign-extends
        0x91, 0x00, 0x30, 0x40, 0x00, // FUP.BuffOvf, 4 bytes against the last IP
        0x98, 0x10, 0x30, // FUP.PCC
        0xc3, 0x00, 0x70, 0x56, 0x34, 0x12, // PIP, PG set
        0xc2, 0x00, 0x10, 0x00, 0x00, 0x00, // PIP, PG clear
        0xc5, 0xab, // MTC
        0xdb, 0x53, 0x23, 0x01, 0xef, 0xcd, 0xab, // STS
        0x88, 0x99, 0x30, // FUP.PGD
        0xc1, // TraceSTOP
    ];
    let got = dump_json(&bytes, "all.rtit", &[]);
    assert_fields(
        &got,
        &[
            json!({"offset": 0, "type": "psb"}),
            json!({"offset": 9, "type": "fup.pge", "ip": "0x401234"}),
            json!({"offset": 16, "type": "tnt", "bits": "NT"}),
            json!({"offset": 17, "type": "tnt", "bits": "TTTTTN"}),
            json!({"offset": 18, "type": "tip", "ip": "0x405678"}),
            json!({"offset": 21, "type": "tip", "ip": "0x411000"}),
            json!({"offset": 26, "type": "fup.far", "ip": "0x501000"}),
            json!({"offset": 31, "type": "tip", "ip": "0x2000"}),
            json!({"offset": 34, "type": "tip", "ip": "0xffffffff81001000"}),
            json!({"offset": 41, "type": "fup.ovf", "ip": "0xffffffff00403000"}),
            json!({"offset": 46, "type": "fup.pcc", "ip": "0xffffffff00403010"}),
            json!({"offset": 49, "type": "pip", "cr3": "0x1234567000", "pg": true}),
            json!({"offset": 55, "type": "pip", "cr3": "0x1000", "pg": false}),
            json!({"offset": 61, "type": "mtc", "rng": 1, "tsc": 0xab}),
            json!({"offset": 63, "type": "sts", "acbr": 45, "ecbr": 19, "btc": 0xab_cdef_0123_u64}),
            json!({"offset": 70, "type": "fup.pgd", "ip": "0xffffffff00403099"}),
            json!({"offset": 73, "type": "stop"}),
        ],
    );
}

#[test]
fn cycle_accurate_mode_reports_cycle_counts() {
    let bytes = [
        0xc0, 0, 0, 0, 0, 0, 0, 0, 0, // PSB: no cycle count
        0x85, 0x00, 0x10, 0x40, 0x00, 0x05, // FUP.PGE + CYC 1
        0x23, // partial TNT: no cycle count
        0x40, 0xd2, 0x48, // full TNT + 2-byte CYC 0x1234
        0xb0, 0x00, 0x20, 0xff, 0xff, 0xff, // TIP + 3-byte CYC
        0xc4, 0x07, 0x09, // MTC + CYC 2
        0xc1, // TraceSTOP: no cycle count
    ];
    let got = dump_json(&bytes, "cyc.rtit", &["--cycle-accurate"]);
    assert_fields(
        &got,
        &[
            json!({"offset": 0, "type": "psb"}),
            json!({"offset": 9, "type": "fup.pge", "ip": "0x401000"}),
            json!({"offset": 14, "type": "cyc", "cycles": 1}),
            json!({"offset": 15, "type": "tnt", "bits": "NNNTT"}),
            json!({"offset": 16, "type": "tnt", "bits": "NNNNNN"}),
            json!({"offset": 17, "type": "cyc", "cycles": 0x1234}),
            json!({"offset": 19, "type": "tip", "ip": "0x402000"}),
            json!({"offset": 22, "type": "cyc", "cycles": 0x3f_ffff}),
            json!({"offset": 25, "type": "mtc", "rng": 0, "tsc": 7}),
            json!({"offset": 27, "type": "cyc", "cycles": 2}),
            json!({"offset": 28, "type": "stop"}),
        ],
    );
}

#[test]
fn a_bad_byte_gives_one_error_line_then_decoding_resumes_at_the_next_psb() {
    let mut bytes = vec![
        0x84, 0x00, 0x10, // FUP.PGE, zero-extended
        0x03, // TNT
        0xc9, // reserved header
        0x02, 0x03, 0xb0, 0x11, // junk that would decode: must not be reported
    ];
    bytes.extend_from_slice(&[0xc0, 0, 0, 0, 0, 0, 0, 0, 0]);
    bytes.extend_from_slice(&[0xb0, 0x22, 0x11]); // compressed: no previous IP after the resync
    bytes.extend_from_slice(&[0xc0, 0, 0, 0, 0, 0, 0, 0, 0]);
    bytes.push(0x05);
    let got = dump_json(&bytes, "bad.rtit", &[]);
    assert_fields(
        &got,
        &[
            json!({"offset": 0, "type": "fup.pge", "ip": "0x1000"}),
            json!({"offset": 3, "type": "tnt", "bits": "T"}),
            json!({"offset": 4, "type": "error"}),
            json!({"offset": 9, "type": "psb"}),
            json!({"offset": 18, "type": "error"}),
            json!({"offset": 21, "type": "psb"}),
            json!({"offset": 30, "type": "tnt", "bits": "NT"}),
        ],
    );
    let message = got[2]["message"].as_str().expect("message");
    assert!(message.contains("reserved") && message.contains("0xc9"), "{message}");
    let message = got[4]["message"].as_str().expect("message");
    assert!(message.contains("no previous IP"), "{message}");
}

#[test]
fn limit_stops_after_n_lines() {
    let bytes = [0x02, 0x03, 0x04, 0x05, 0x06];
    let got = dump_json(&bytes, "limit.rtit", &["--limit", "3"]);
    assert_eq!(got.len(), 3);
    assert_eq!(got[2]["bits"], "NN");
}

#[test]
fn human_listing_shows_offset_bytes_name_and_ip() {
    let path = trace_file("human.rtit", &[0x82, 0x26, 0x11, 0x40, 0, 0, 0, 0x0d, 0xe0]);
    let out = rtit(&["dump", path.to_str().expect("utf-8")]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("0000000000000000  82 26 11 40 00 00 00"), "{text}");
    assert!(
        lines[0].contains("fup.pge") && lines[0].contains("0x0000000000401126"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("0000000000000007  0d") && lines[1].ends_with("TNT"),
        "{text}"
    );
    assert!(lines[2].contains("error") && lines[2].contains("0xe0"), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 decode error"));
}

#[test]
fn bad_sources_name_the_path() {
    let missing = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-such-trace.rtit");
    let out = rtit(&["dump", missing.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-trace.rtit"), "{err}");

    // A directory is read as a recording; one without a manifest is not a recording.
    let out = rtit(&["dump", env!("CARGO_TARGET_TMPDIR")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a recording (no manifest.json)"), "{err}");
}

/// The committed samples (the README's first command dumps one) are what the example writes,
/// and they decode without an error.
#[test]
fn committed_samples_are_current_and_decode_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (path, cycle_accurate) in sample_trace::SAMPLES {
        let committed = std::fs::read(root.join(path)).expect("sample present");
        assert_eq!(
            committed,
            sample_trace::sample(cycle_accurate),
            "{path} is stale: run `cargo run --example sample_trace`"
        );
        let flag: &[&str] = if cycle_accurate { &["--cycle-accurate"] } else { &[] };
        let got = dump_json(&committed, &format!("sample-{cycle_accurate}.rtit"), flag);
        assert!(got.iter().all(|v| v["type"] != "error"), "{got:#?}");
        assert!(got.iter().any(|v| v["type"] == "fup.ovf"));
        assert_eq!(got.last().map(|v| &v["type"]), Some(&json!("stop")));
    }
}

//! The manifest's optional fields: written as hex strings, left out when empty, and absent
//! in recordings written before they existed.

use rtit_replay_core::recording::Manifest;
use serde_json::{json, Value};

/// Adds the fields of `extra` to the object `base`.
fn with(mut base: Value, extra: Value) -> Value {
    if let (Value::Object(b), Value::Object(e)) = (&mut base, extra) {
        b.extend(e);
    }
    base
}

fn manifest(extra: Value, image_extra: Value) -> Value {
    let image = json!({
        "path": "/lib/modules/6.1/kernel/drivers/net/demo.ko",
        "file": "images/demo.ko-0011223344556677",
        "load_address": "0xffffffffc0a01000",
        "kind": "relocatable",
        "build_id": null,
        "sha256": "00",
        "sections": { ".text": "0xffffffffc0a01000" }
    });
    let image = with(image, image_extra);
    let m = json!({
        "format": "rtit-recording",
        "version": 1,
        "command": ["./prog"],
        "cwd": "/",
        "environment_variables": 3,
        "backend": "msr",
        "cpu": { "vendor": "GenuineIntel", "model_name": "Atom", "family": 6, "model": 77, "stepping": 8 },
        "rtit": { "ctl": "0x1", "cr3_match": "0x0", "events": "0x0", "lip": ["0x0", "0x0", "0x0", "0x0"], "pkt_cnt": "0x0" },
        "cr3": "0x1000",
        "aslr": false,
        "start_ip": "0x401000",
        "trace_bytes": 10,
        "instructions": 5,
        "images": [image],
        "registers_start": {},
        "registers_end": {},
        "end": { "kind": "exited", "code": 0 }
    });
    with(m, extra)
}

#[test]
fn kernel_text_and_module_externals_round_trip_as_hex() {
    let text = manifest(
        json!({ "kernel_text": "0xffffffff9a000000" }),
        json!({ "externals": { "printk": "0xffffffff9a123450" } }),
    );
    let m: Manifest = serde_json::from_value(text.clone()).expect("parses");
    assert_eq!(m.kernel_text, Some(0xffff_ffff_9a00_0000));
    assert_eq!(m.images[0].externals.get("printk"), Some(&0xffff_ffff_9a12_3450));
    let back = serde_json::to_value(&m).expect("serializes");
    assert_eq!(back["kernel_text"], "0xffffffff9a000000");
    assert_eq!(back["images"][0]["externals"]["printk"], "0xffffffff9a123450");
}

#[test]
fn recordings_without_them_still_read_and_write_without_them() {
    let m: Manifest = serde_json::from_value(manifest(json!({}), json!({}))).expect("parses");
    assert_eq!(m.kernel_text, None);
    assert!(m.images[0].externals.is_empty());
    let back = serde_json::to_value(&m).expect("serializes");
    assert!(back.get("kernel_text").is_none());
    assert!(back["images"][0].get("externals").is_none());
    let bad = manifest(json!({ "kernel_text": "0xnothex" }), json!({}));
    assert!(serde_json::from_value::<Manifest>(bad).is_err());
}

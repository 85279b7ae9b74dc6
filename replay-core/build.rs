//! A digest of this crate's sources (and the workspace's Cargo.lock), for the key of stored
//! timelines (src/timeline/cache): a timeline decoded by one version of the decoder is never
//! read back by another, while every program built from the same sources (`rtit`, the tests,
//! the benchmarks) shares it.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    list(&root.join("src"), &mut files);
    files.sort();
    files.push(root.join("../Cargo.lock"));
    let mut digest = Sha256::new();
    for file in &files {
        digest.update(file.strip_prefix(&root).unwrap_or(file).as_os_str().as_encoded_bytes());
        digest.update([0]);
        // A file that cannot be read (no Cargo.lock when built as a dependency) counts as empty.
        digest.update(std::fs::read(file).unwrap_or_default());
        digest.update([0]);
    }
    let hex: String = digest.finalize().iter().map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=RTIT_DECODER_DIGEST={hex}");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=../Cargo.lock");
}

fn list(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the crate's sources").flatten() {
        let path = entry.path();
        if path.is_dir() {
            list(&path, out);
        } else {
            out.push(path);
        }
    }
}

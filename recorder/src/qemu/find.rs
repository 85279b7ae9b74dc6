//! Where the qemu backend's two parts are: `qemu-x86_64` on PATH and rtit's plugin library.

use std::path::PathBuf;

/// The plugin library's file name.
pub const PLUGIN_FILE: &str = "librtit_qemu_plugin.so";

/// `qemu-x86_64` on PATH, if any.
pub fn find_qemu() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("qemu-x86_64"))
        .find(|p| p.is_file())
}

/// The plugin library: `$RTIT_QEMU_PLUGIN`, else next to the running executable (or one
/// directory up, for test binaries under `target/*/deps`).
pub fn find_plugin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("RTIT_QEMU_PLUGIN") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join(PLUGIN_FILE))
        .find(|p| p.is_file())
}

//! The QEMU plugin that release builds of `rtit` carry (see build.rs). `cargo install`
//! installs binaries only, so an installed `rtit` has no `librtit_qemu_plugin.so` next to it:
//! it writes the one it carries to its cache directory once (named by its hash, so versions
//! never mix) and points the qemu backend at it. A plugin next to `rtit` or named by
//! `$RTIT_QEMU_PLUGIN` comes first.

use std::path::PathBuf;

use rtit_recorder::qemu::find::{find_plugin, PLUGIN_FILE};
use sha2::{Digest, Sha256};

/// The plugin library this binary carries (empty in debug builds).
static EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/librtit_qemu_plugin.so"));

/// `$XDG_CACHE_HOME/rtit`, else `~/.cache/rtit`.
fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("rtit");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache/rtit")
}

/// Makes sure the qemu backend finds a plugin: if none is installed and this binary carries
/// one, writes it out and sets `$RTIT_QEMU_PLUGIN` to it. Returns where the plugin is, or
/// why it is not.
pub fn ensure() -> Result<PathBuf, String> {
    if let Some(found) = find_plugin() {
        return Ok(found);
    }
    if EMBEDDED.is_empty() {
        return Err(format!(
            "{PLUGIN_FILE} is not next to rtit (this build does not carry it: build with `cargo build --release`)"
        ));
    }
    let hash: String = Sha256::digest(EMBEDDED)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = cache_dir();
    let path = dir.join(format!("librtit_qemu_plugin-{hash}.so"));
    if !path.is_file() {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let tmp = dir.join(format!(".plugin-{}.tmp", std::process::id()));
        std::fs::write(&tmp, EMBEDDED)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    std::env::set_var("RTIT_QEMU_PLUGIN", &path);
    Ok(path)
}

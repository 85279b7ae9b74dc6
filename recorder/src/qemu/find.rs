//! Where the qemu backend's two parts are: a `qemu-x86_64` that can load plugins, and rtit's
//! plugin library.
//!
//! Distributions do not all build QEMU with plugins: Debian 13's `qemu-user` is static with
//! plugins disabled. A QEMU that can load them exports the plugin API (`qemu_plugin_*`) from
//! its dynamic symbol table, which is how one is told apart without running it.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol};

/// The plugin library's file name.
pub const PLUGIN_FILE: &str = "librtit_qemu_plugin.so";

/// The environment variable naming the `qemu-x86_64` to record with.
pub const QEMU_ENV: &str = "RTIT_QEMU";

/// Why no `qemu-x86_64` rtit can record with was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoQemu {
    /// None on PATH, none built by rtit.
    #[error(
        "qemu-x86_64 is not installed (Debian/Ubuntu: apt-get install qemu-user; or `rtit build-qemu` builds one)"
    )]
    NotInstalled,
    /// The one named (`--qemu`, `$RTIT_QEMU`) is not there.
    #[error("{0}: no such qemu-x86_64")]
    Missing(PathBuf),
    /// The only one found cannot load plugins.
    #[error(
        "{0} cannot load plugins (it was built static or without --enable-plugins, as Debian 13's is): `rtit build-qemu` builds one that rtit then finds, or pass --qemu PATH"
    )]
    NoPlugins(PathBuf),
}

/// The `qemu-x86_64` to record with: `named` (`--qemu`), else `$RTIT_QEMU`, else the newer
/// of the first on PATH that can load plugins and the newest rtit built (`rtit build-qemu`,
/// in [`built_dir`]): PATH's where it is as new, the built one where it is newer or PATH's
/// version cannot be read. A user who built a QEMU for rtit means it to be used: Debian 12's
/// 7.2 on PATH would otherwise hide the 10.0 built beside it, and with it threads, parked
/// anchors and what `rdtsc` returned.
pub fn find_qemu(named: Option<&Path>) -> Result<PathBuf, NoQemu> {
    let env = std::env::var_os(QEMU_ENV).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(path) = named.map(Path::to_path_buf).or(env) {
        return match path.is_file() {
            false => Err(NoQemu::Missing(path)),
            true if loads_plugins(&path) => Ok(path),
            true => Err(NoQemu::NoPlugins(path)),
        };
    }
    let on_path = on_path();
    let first = on_path.iter().find(|p| loads_plugins(p)).cloned();
    let newest_built = built().into_iter().find(|p| loads_plugins(p));
    match (first, newest_built) {
        (Some(path), Some(built)) => Ok(match (version(&path), built_version(&built)) {
            (Some(v), Some(b)) if v >= b => path,
            _ => built,
        }),
        (Some(found), None) | (None, Some(found)) => Ok(found),
        (None, None) => Err(on_path
            .into_iter()
            .next()
            .map_or(NoQemu::NotInstalled, NoQemu::NoPlugins)),
    }
}

/// Every `qemu-x86_64` on PATH, in PATH's order, each file once (`/bin` is `/usr/bin` on a
/// merged-/usr system).
fn on_path() -> Vec<PathBuf> {
    let mut seen = std::collections::HashSet::new();
    std::env::var_os("PATH").map_or_else(Vec::new, |p| {
        std::env::split_paths(&p)
            .map(|d| d.join("qemu-x86_64"))
            .filter(|p| p.is_file())
            .filter(|p| seen.insert(std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())))
            .collect()
    })
}

/// `path (version)`, for what `rtit record -v` says.
pub fn described(qemu: &Path) -> String {
    match version(qemu) {
        Some(v) => {
            let v: Vec<String> = v.iter().map(u64::to_string).collect();
            format!("{} ({})", qemu.display(), v.join("."))
        }
        None => qemu.display().to_string(),
    }
}

/// The plugin-capable `qemu-x86_64`s on PATH that [`find_qemu`], naming none, passed over
/// for `chosen`, a newer one rtit built (none where `chosen` is on PATH).
pub fn older_on_path(chosen: &Path) -> Vec<PathBuf> {
    let all = on_path();
    if all.iter().any(|p| p == chosen) {
        return Vec::new();
    }
    all.into_iter().filter(|p| loads_plugins(p)).collect()
}

/// A QEMU's version as numbers, from `--version` ("qemu-x86_64 version 7.2.19 (Debian
/// 1:7.2+dfsg-7+deb12u18)" → 7, 2, 19).
pub fn version(qemu: &Path) -> Option<Vec<u64>> {
    let out = std::process::Command::new(qemu).arg("--version").output().ok()?;
    parse_version(&String::from_utf8_lossy(&out.stdout))
}

/// The version in `--version`'s first line, its first three numbers.
fn parse_version(text: &str) -> Option<Vec<u64>> {
    let rest = text.lines().next()?.split(" version ").nth(1)?;
    let number = rest.split_whitespace().next()?;
    let v: Vec<u64> = version_key(number).into_iter().take(3).collect();
    (!v.is_empty()).then_some(v)
}

/// The version of a QEMU rtit built, from its directory's name.
fn built_version(qemu: &Path) -> Option<Vec<u64>> {
    let name = qemu.parent()?.file_name()?.to_string_lossy().into_owned();
    let v: Vec<u64> = version_key(&name).into_iter().take(3).collect();
    (!v.is_empty()).then_some(v)
}

/// The `qemu-x86_64`s on PATH that cannot load plugins (which [`find_qemu`] passes over).
pub fn passed_over() -> Vec<PathBuf> {
    on_path().into_iter().filter(|p| !loads_plugins(p)).collect()
}

/// Whether the executable at `path` exports QEMU's plugin API.
pub fn loads_plugins(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    let Ok(file) = object::File::parse(&*bytes) else {
        return false;
    };
    file.dynamic_symbols()
        .any(|s| s.is_definition() && s.name() == Ok("qemu_plugin_outs"))
}

/// Where `rtit build-qemu` puts the QEMUs it builds: `$XDG_CACHE_HOME/rtit/qemu`, else
/// `~/.cache/rtit/qemu`, one directory per version.
pub fn built_dir() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("HOME")
                .map_or_else(|| PathBuf::from("."), PathBuf::from)
                .join(".cache")
        });
    cache.join("rtit/qemu")
}

/// The QEMUs `rtit build-qemu` built, newest version first.
pub fn built() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(built_dir()) else {
        return Vec::new();
    };
    let mut found: Vec<(Vec<u64>, PathBuf)> = entries
        .flatten()
        .map(|e| e.path().join("qemu-x86_64"))
        .filter(|p| p.is_file())
        .filter_map(|p| {
            let name = p.parent()?.file_name()?.to_string_lossy().into_owned();
            Some((version_key(&name), p))
        })
        .collect();
    found.sort();
    found.into_iter().rev().map(|(_, p)| p).collect()
}

/// A version directory's name as numbers to sort by ("10.0.13+ds-0+deb13u1" → 10, 0, 13, …).
fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_by_their_numbers() {
        let mut v = ["9.2.1", "10.0.13+ds-0+deb13u1", "10.0.2"].map(version_key);
        v.sort();
        assert_eq!(v[2], vec![10, 0, 13, 0, 13, 1]);
        assert_eq!(v[0], vec![9, 2, 1]);
    }

    #[test]
    fn a_version_is_read_from_what_qemu_says() {
        let debian = "qemu-x86_64 version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u18)\nCopyright (c) 2003-2022";
        assert_eq!(parse_version(debian), Some(vec![7, 2, 19]));
        assert_eq!(parse_version("qemu-x86_64 version 10.0.13\n"), Some(vec![10, 0, 13]));
        assert_eq!(parse_version("qemu-x86_64: unknown option\n"), None);
        let built = Path::new("/c/rtit/qemu/10.0.13+ds-0+deb13u1/qemu-x86_64");
        assert_eq!(built_version(built), Some(vec![10, 0, 13]));
        assert!(parse_version(debian) < built_version(built), "7.2 is older than 10.0");
    }

    #[test]
    fn a_program_without_the_plugin_api_cannot_load_plugins() {
        // This test binary exports no qemu_plugin_outs; a missing file loads nothing either.
        let me = std::env::current_exe().expect("test binary");
        assert!(!loads_plugins(&me));
        assert!(!loads_plugins(Path::new("/nonexistent/qemu-x86_64")));
        assert_eq!(
            find_qemu(Some(&me)),
            Err(NoQemu::NoPlugins(me.clone())),
            "a named QEMU is taken or refused, never passed over"
        );
        let missing = Path::new("/nonexistent/qemu-x86_64");
        assert_eq!(find_qemu(Some(missing)), Err(NoQemu::Missing(missing.into())));
    }

    #[test]
    fn what_qemu_says_of_its_plugin_option_agrees() {
        let mut qemus: Vec<PathBuf> = built();
        qemus.extend(
            ["/usr/bin/qemu-x86_64"]
                .map(PathBuf::from)
                .into_iter()
                .filter(|p| p.is_file()),
        );
        if qemus.is_empty() {
            eprintln!("skipped: no qemu-x86_64 installed or built");
        }
        for qemu in qemus {
            // A QEMU without plugins does not know the option; one with them tries to load it.
            let out = std::process::Command::new(&qemu)
                .args(["-plugin", "/nonexistent/plugin.so", "/bin/true"])
                .output()
                .expect("run qemu");
            let text = String::from_utf8_lossy(&out.stderr);
            let knows = text.contains("Could not load plugin");
            assert_eq!(loads_plugins(&qemu), knows, "{}: {text}", qemu.display());
        }
    }
}

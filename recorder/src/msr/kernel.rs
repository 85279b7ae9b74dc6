//! The kernel's side of a recording that traces ring 0: the kernel's symbols as
//! `/proc/kallsyms` lists them (root sees addresses, others zeros), which give a module's
//! external symbols and the run-time `_text` the KASLR slide is measured from, and the
//! `vmlinux` whose code replay needs to decode kernel code outside modules.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol, SegmentFlags};

/// Where the kernel lists its symbols.
pub const KALLSYMS: &str = "/proc/kallsyms";

/// The kernel's symbols (the first address listed for each name: the kernel's own come
/// before modules').
#[derive(Debug, Clone, Default)]
pub struct Kallsyms {
    path: PathBuf,
    symbols: HashMap<String, u64>,
}

impl Kallsyms {
    /// Reads a kallsyms listing (`ADDRESS TYPE NAME [MODULE]` per line).
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(path, &text)
    }

    fn parse(path: &Path, text: &str) -> Result<Self, String> {
        let mut symbols = HashMap::new();
        let mut nonzero = false;
        for (n, line) in text.lines().enumerate() {
            let mut fields = line.split_whitespace();
            let (Some(addr), Some(_kind), Some(name)) = (fields.next(), fields.next(), fields.next()) else {
                if line.trim().is_empty() {
                    continue;
                }
                return Err(format!("{}:{}: expected ADDRESS TYPE NAME", path.display(), n + 1));
            };
            let addr = u64::from_str_radix(addr, 16)
                .map_err(|_| format!("{}:{}: `{addr}` is not a hex address", path.display(), n + 1))?;
            nonzero |= addr != 0;
            symbols.entry(name.to_string()).or_insert(addr);
        }
        if !symbols.is_empty() && !nonzero {
            return Err(format!(
                "{} lists every address as 0: kernel addresses need root (kernel.kptr_restrict)",
                path.display()
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
            symbols,
        })
    }

    /// A symbol's address.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.symbols.get(name).copied()
    }

    /// The run-time address of the kernel's `_text`.
    pub fn text(&self) -> Result<u64, String> {
        self.get("_text")
            .ok_or_else(|| format!("{} has no _text symbol", self.path.display()))
    }

    /// The addresses of `needed`, the symbols `object` uses but does not define (a module's
    /// calls into the kernel, [`undefined_symbols`]), so replay applies its relocations as the
    /// kernel did.
    pub fn externals(&self, object: &Path, needed: &BTreeSet<String>) -> Result<BTreeMap<String, u64>, String> {
        let missing: Vec<&str> = needed
            .iter()
            .filter(|n| self.get(n).is_none())
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{} uses {} that {} does not list",
                object.display(),
                missing.join(", "),
                self.path.display()
            ));
        }
        Ok(needed.iter().filter_map(|n| Some((n.clone(), self.get(n)?))).collect())
    }
}

/// The names of the undefined symbols of an object file.
pub fn undefined_symbols(object: &Path) -> Result<BTreeSet<String>, String> {
    let bytes = std::fs::read(object).map_err(|e| format!("cannot read {}: {e}", object.display()))?;
    let file = object::File::parse(&*bytes).map_err(|e| format!("{}: {e}", object.display()))?;
    Ok(file
        .symbols()
        .filter(|s| s.is_undefined())
        .filter_map(|s| s.name().ok().filter(|n| !n.is_empty()).map(str::to_string))
        .collect())
}

/// Where distributions put the uncompressed kernel image with symbols, for `release`.
pub fn vmlinux_candidates(release: &str) -> Vec<PathBuf> {
    vec![
        PathBuf::from(format!("/usr/lib/debug/boot/vmlinux-{release}")),
        PathBuf::from(format!("/usr/lib/debug/lib/modules/{release}/vmlinux")),
        PathBuf::from(format!("/boot/vmlinux-{release}")),
        PathBuf::from(format!("/lib/modules/{release}/build/vmlinux")),
    ]
}

/// The running kernel's release (`uname -r`).
pub fn release() -> Result<String, String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("cannot read /proc/sys/kernel/osrelease: {e}"))
}

/// Where `vmlinux` runs: the address its lowest segment is loaded at, shifted by the KASLR
/// slide (the run-time `_text` from kallsyms minus the file's `_text`; where the file has no
/// symbols, its lowest executable segment stands for `_text`).
pub fn vmlinux_load_address(vmlinux: &Path, bytes: &[u8], run_text: u64) -> Result<u64, String> {
    let file = object::File::parse(bytes).map_err(|e| format!("{}: {e}", vmlinux.display()))?;
    let lowest = file
        .segments()
        .map(|s| s.address() & !0xfff)
        .min()
        .ok_or_else(|| format!("{}: no loadable segment", vmlinux.display()))?;
    let file_text = file
        .symbols()
        .find(|s| s.name() == Ok("_text"))
        .map(|s| s.address())
        .or_else(|| file.segments().filter(|s| executable(s)).map(|s| s.address()).min())
        .ok_or_else(|| format!("{}: neither a _text symbol nor executable code", vmlinux.display()))?;
    Ok(lowest.wrapping_add(run_text.wrapping_sub(file_text)))
}

fn executable(segment: &object::Segment<'_, '_>) -> bool {
    matches!(segment.flags(), SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0)
}

/// What a kernel-tracing recording keeps of the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSideband {
    /// The run-time `_text`.
    pub text: u64,
    /// The vmlinux found, with its load address.
    pub vmlinux: Option<(PathBuf, u64)>,
    /// Where rtit looked for a vmlinux and found none.
    pub searched: Vec<PathBuf>,
}

/// Reads `_text` from `kallsyms` and finds the vmlinux (`given`, else the usual places).
pub fn sideband(kallsyms: &Kallsyms, given: Option<&Path>) -> Result<KernelSideband, String> {
    let text = kallsyms.text()?;
    let searched = match given {
        Some(p) => vec![p.to_path_buf()],
        None => vmlinux_candidates(&release()?),
    };
    let Some(path) = searched.iter().find(|p| p.is_file()) else {
        if given.is_some() {
            return Err(format!("--vmlinux {}: no such file", searched[0].display()));
        }
        return Ok(KernelSideband {
            text,
            vmlinux: None,
            searched,
        });
    };
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let load = vmlinux_load_address(path, &bytes, text)?;
    Ok(KernelSideband {
        text,
        vmlinux: Some((path.clone(), load)),
        searched,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kallsyms_gives_the_first_address_of_each_name_and_refuses_hidden_ones() {
        let text = "ffffffff9a000000 T _text\nffffffff9a123450 T printk\n\
                    ffffffffc0a01000 t printk\t[other]\n";
        let k = Kallsyms::parse(Path::new("ks"), text).expect("parses");
        assert_eq!(k.text(), Ok(0xffff_ffff_9a00_0000));
        assert_eq!(k.get("printk"), Some(0xffff_ffff_9a12_3450));
        let hidden = Kallsyms::parse(Path::new("ks"), "0000000000000000 T _text\n0000000000000000 T x\n");
        assert!(hidden.expect_err("zeros").contains("need root"));
        let bad = Kallsyms::parse(Path::new("ks"), "ffff T _text\nzz T y\n");
        assert_eq!(bad.expect_err("bad line"), "ks:2: `zz` is not a hex address");
    }

    #[test]
    fn this_machines_kernel_symbols_read_as_root() {
        // The real /proc/kallsyms: root sees addresses (this machine runs tests as root).
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let k = Kallsyms::read(Path::new(KALLSYMS)).expect("readable as root");
        let text = k.text().expect("_text");
        assert!(text >= 0xffff_8000_0000_0000, "a kernel address: {text:#x}");
    }

    #[test]
    fn vmlinux_moves_by_the_kaslr_slide() {
        // This test binary is an ELF with symbols but no `_text`: its lowest executable
        // segment stands in for it.
        let exe = std::env::current_exe().expect("exe");
        let bytes = std::fs::read(&exe).expect("read");
        let file = object::File::parse(&*bytes).expect("ELF");
        let lowest = file.segments().map(|s| s.address() & !0xfff).min().expect("segments");
        let code = file
            .segments()
            .filter(|s| executable(s))
            .map(|s| s.address())
            .min()
            .expect("code");
        let slide = 0x3a00_0000;
        assert_eq!(vmlinux_load_address(&exe, &bytes, code + slide), Ok(lowest + slide));
        assert!(vmlinux_load_address(&exe, b"not elf", 0).is_err());
    }
}

//! Kernel modules as the msr backend traces them: the section addresses the kernel lists in
//! `/sys/module/NAME/sections/` (one file per section holding its address), the `.ko` file,
//! and the IP filter range of its text (§2.4.3: RTIT_LIP0 to RTIT_LIP2, the limit excluded).
//! A program that loads a `.o` the way the kernel loads a module can write the same layout
//! under another root, which is how the tests use it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection};

use super::kernel::{undefined_symbols, Kallsyms};
use crate::outcome::Module;

/// Where the kernel lists loaded modules.
pub const SYS_MODULE: &str = "/sys/module";

/// The section addresses of module `name` under `root` (`root/NAME/sections/*`).
pub fn sections(root: &Path, name: &str) -> Result<BTreeMap<String, u64>, String> {
    let dir = root.join(name).join("sections");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("module {name}: cannot list {}: {e}", dir.display()))?;
    let mut out = BTreeMap::new();
    for entry in entries.flatten() {
        let file = entry.path();
        let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let text = text.trim();
        let addr = u64::from_str_radix(text.trim_start_matches("0x"), 16)
            .map_err(|_| format!("{}: `{text}` is not a hex address", file.display()))?;
        // The kernel shows 0 to those who may not see addresses.
        if addr == 0 {
            return Err(format!("{} reads 0: section addresses need root", file.display()));
        }
        out.insert(entry.file_name().to_string_lossy().into_owned(), addr);
    }
    if out.is_empty() {
        return Err(format!("module {name}: {} lists no sections", dir.display()));
    }
    Ok(out)
}

/// The `.ko` of a loaded module, as `modinfo -n` finds it.
pub fn module_file(name: &str) -> Result<PathBuf, String> {
    let out = crate::tether::die_with_this_thread(std::process::Command::new("modinfo").args(["-n", name]))
        .output()
        .map_err(|e| format!("module {name}: cannot run modinfo to find its .ko ({e}); give it with --module-file"))?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || !path.is_file() {
        return Err(format!(
            "module {name}: modinfo does not know its .ko; give it with --module-file"
        ));
    }
    if path.extension().is_some_and(|e| e != "ko" && e != "o") {
        return Err(format!(
            "module {name}: {} is compressed; decompress it and give the .ko with --module-file",
            path.display()
        ));
    }
    Ok(path)
}

/// A module: its file, section addresses, and the addresses of the symbols it uses from
/// the kernel (from `kallsyms`, read only if it uses any).
pub fn module(name: &str, root: &Path, file: Option<&Path>, kallsyms: &Path) -> Result<Module, String> {
    let sections = sections(root, name)?;
    let file = match file {
        Some(f) => f.to_path_buf(),
        None => module_file(name)?,
    };
    let needed = undefined_symbols(&file)?;
    let externals = if needed.is_empty() {
        BTreeMap::new()
    } else {
        Kallsyms::read(kallsyms)?.externals(&file, &needed)?
    };
    Ok(Module {
        name: name.to_string(),
        file,
        sections,
        externals,
    })
}

/// The IP filter range of a module's code: each of `names` (`.text`, `.init.text`) as
/// [address, address + its size in the object).
pub fn code_ranges(module: &Module, names: &[&str]) -> Result<Vec<(u64, u64)>, String> {
    let bytes = std::fs::read(&module.file).map_err(|e| format!("cannot read {}: {e}", module.file.display()))?;
    let file = object::File::parse(&*bytes).map_err(|e| format!("{}: {e}", module.file.display()))?;
    names
        .iter()
        .map(|&name| {
            let addr = module
                .sections
                .get(name)
                .ok_or_else(|| format!("module {}: no address for section {name}", module.name))?;
            let size = file
                .section_by_name(name)
                .map(|s| s.size())
                .ok_or_else(|| format!("{}: no section {name}", module.file.display()))?;
            Ok((*addr, addr + size))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_read_as_sysfs_lists_them() {
        let root = std::env::temp_dir().join(format!("rtit-sysmodule-{}", std::process::id()));
        let dir = root.join("demo/sections");
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join(".text"), "0xffffffffc0a01000\n").expect("write");
        std::fs::write(dir.join(".data"), "0xffffffffc0a03000\n").expect("write");
        let s = sections(&root, "demo").expect("sections");
        assert_eq!(s.get(".text"), Some(&0xffff_ffff_c0a0_1000));
        assert_eq!(s.len(), 2);
        std::fs::write(dir.join(".bss"), "0x0000000000000000\n").expect("write");
        let e = sections(&root, "demo").expect_err("hidden addresses");
        assert!(e.contains("need root"), "{e}");
        let e = sections(&root, "nosuch").expect_err("no module");
        assert!(e.contains("module nosuch"), "{e}");
        let _ = std::fs::remove_dir_all(&root);
    }
}

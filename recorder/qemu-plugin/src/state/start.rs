//! Where the program starts and where tracing starts: the program's memory map at its first
//! instruction (its own view from QEMU's gdbstub where QEMU gives one), its entry registers,
//! the start symbol resolved; then, where tracing starts, the images, the vDSO and the start
//! snapshot.

use std::path::Path;

use super::{
    elf_headers, entry, files, find_initial_rsp, guest_mappings, host_maps, name_stack, parse_map_line, snapshot_with,
    with_elf_perms, write_snapshot, GuestMaps, Mapping, Plugin, Start,
};

impl Plugin {
    /// The guest's map at its first instruction; the start symbol resolved.
    pub(super) fn first_exec(&mut self, entry: u64) {
        let told = Path::new(&self.args.out).join(files::GUEST_MAPS);
        let mut guest = match std::fs::read_to_string(told) {
            // The program's own view, as `rtit record` read it from QEMU's gdbstub (8.1 and
            // later); the vsyscall page is the host kernel's, no mapping the program made.
            Ok(text) => text
                .lines()
                .filter_map(parse_map_line)
                .filter(|m| m.path.as_deref() != Some("[vsyscall]"))
                .collect(),
            Err(_) => with_elf_perms(guest_mappings(&host_maps(), &self.host_before), elf_headers),
        };
        let tops: Vec<Mapping> = guest
            .iter()
            .map(|m| Mapping {
                start: m.start.max(m.end.saturating_sub(256 << 10)),
                ..m.clone()
            })
            .collect();
        let rsp = find_initial_rsp(&tops, self.args.argc, |m| {
            let mut b = vec![0u8; (m.end - m.start) as usize];
            let n = self.read(m.start, &mut b);
            b.truncate(n);
            b
        });
        if let Some(rsp) = rsp {
            name_stack(&mut guest, rsp);
        }
        self.entry_registers = entry::registers(entry, rsp);
        self.maps = Some(GuestMaps::new(guest));
        // A program that does not define the start symbol (a wrapper) is recorded whole: the
        // programs it runs are recorded from it where they define it (`--start`).
        let defined = |s: &String| (self.args.exe.as_ref()).is_some_and(|exe| rtit_recorder::exec::defines(exe, s));
        if let Some(symbol) = self.args.start.clone().filter(|s| !s.starts_with("0x") && defined(s)) {
            match self.resolve_symbol(&symbol) {
                Ok(at) => self.engine.set_start(Start::At(at)),
                Err(e) => {
                    self.notes.push(format!("start={symbol}: {e}"));
                    self.engine.set_start(Start::At(u64::MAX));
                }
            }
        }
    }

    fn resolve_symbol(&self, name: &str) -> Result<u64, String> {
        let exe = self
            .args
            .exe
            .clone()
            .ok_or("rtit record did not say which program runs (exe=)")?;
        let exe = std::fs::canonicalize(&exe).map_err(|e| format!("{}: {e}", exe.display()))?;
        let bytes = std::fs::read(&exe).map_err(|e| format!("{}: {e}", exe.display()))?;
        let path = exe.display().to_string();
        let (address, relocated) =
            rtit_replay_core::image::defined_symbol(&path, &bytes, name).map_err(|e| e.to_string())?;
        let bias = if relocated {
            let load = self
                .maps
                .as_ref()
                .and_then(|m| {
                    m.current()
                        .iter()
                        .filter(|m| m.path.as_deref() == Some(&path) && m.offset == 0)
                        .map(|m| m.start)
                        .min()
                })
                .ok_or_else(|| format!("{path} is not mapped"))?;
            load - rtit_replay_core::image::lowest_vaddr(&path, &bytes).map_err(|e| e.to_string())?
        } else {
            0
        };
        Ok(address + bias)
    }

    pub(super) fn begin(&mut self, ip: u64) {
        self.start_ip = Some(ip);
        let maps = self.maps.as_ref().map(|m| m.current().to_vec()).unwrap_or_default();
        self.images.note(&maps);
        // QEMU 8.1 and later give the program a vDSO of their own (the map QEMU's gdbstub
        // shows names it): its code runs and the dynamic loader reads its symbols.
        if let Some(m) = maps.iter().find(|m| m.path.as_deref() == Some("[vdso]")) {
            let mut bytes = vec![0u8; (m.end - m.start) as usize];
            let n = self.read(m.start, &mut bytes);
            bytes.truncate(n);
            let path = Path::new(&self.args.out).join(files::VDSO);
            match std::fs::write(&path, bytes) {
                Ok(()) => self.vdso = Some(m.start),
                Err(e) => self.notes.push(format!("{}: {e}", path.display())),
            }
        }
        let snap = snapshot_with(&maps, |a, b| self.read(a, b));
        let path = Path::new(&self.args.out).join(files::MEMORY_START);
        match write_snapshot(&path, &snap) {
            Ok(regions) => self.memory_start = (regions, snap.truncated),
            Err(e) => self.notes.push(e.to_string()),
        }
        if self.args.anchors {
            // From the start snapshot on: every page written after it shows at an anchor.
            match crate::written::Written::start(&maps) {
                Ok(w) => self.written = Some(w),
                Err(e) => self.notes.push(format!("no anchors: {e}")),
            }
        }
        self.registers_start = if self.args.start.is_none() {
            self.entry_registers.clone()
        } else {
            [("rip".to_string(), format!("{ip:#x}"))].into_iter().collect()
        };
        self.initial = maps;
    }
}

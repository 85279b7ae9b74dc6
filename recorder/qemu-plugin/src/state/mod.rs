//! The plugin's state between callbacks: the retirement engine, the guest's memory map, the
//! output files, and what the report needs; how it ends (the program's end, a stop before
//! something unsupported, or `rtit record`'s request).

mod deferred;
mod entry;
pub mod exec;
mod outputs;
mod start;
mod syscalls;
mod threads;

pub use deferred::MARK;
pub(crate) use syscalls::RT_SIGACTION;

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use nix::fcntl::{fcntl, FcntlArg};
use rtit_recorder::model::{ModelOptions, RtitConfig};
use rtit_recorder::outcome::RegisterMap;
use rtit_recorder::qemu::block::Block;
use rtit_recorder::qemu::capture::{self, Capture};
use rtit_recorder::qemu::engine::{Counts, Engine, Start, Started, RESULT_MARK, SWITCH_MARK};
use rtit_recorder::qemu::guest_maps::GuestMaps;
use rtit_recorder::qemu::initial::{elf_headers, find_initial_rsp, guest_mappings, name_stack, with_elf_perms};
use rtit_recorder::qemu::report::{files, Args, PluginEnd, Report, HIGH_FD};
use rtit_recorder::sideband::{parse_map_line, snapshot_with, Images};
use rtit_recorder::writer::write_snapshot;
use rtit_replay_core::recording::{ChildProcess, MapChange, Mapping, Maps, MemoryRegion};
use rtit_replay_core::syscall::SyscallRecord;

/// Moves `file` to a descriptor at or above [`HIGH_FD`], so that the program's descriptors
/// are numbered as they would be without the plugin.
fn high(file: File) -> Result<File, String> {
    let fd = fcntl(file.as_raw_fd(), FcntlArg::F_DUPFD_CLOEXEC(HIGH_FD)).map_err(|e| format!("fcntl: {e}"))?;
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Ends QEMU after `rtit record`'s request, with the status a shell reports for `signal`.
fn exit_for(signal: i32) -> ! {
    // SAFETY: as in `Plugin::stop_now`: no exit path of QEMU's runs, none calls back.
    unsafe { nix::libc::_exit(128 + signal) }
}

fn host_maps() -> Vec<Mapping> {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_default()
        .lines()
        .filter_map(parse_map_line)
        .collect()
}

/// Bytes of trace (and truth) kept before they are written to their file.
const FLUSH_BYTES: usize = 1 << 16;

/// The plugin.
pub struct Plugin {
    args: Args,
    engine: Engine,
    pid: u32,
    host_before: Vec<Mapping>,
    maps: Option<GuestMaps>,
    initial: Vec<Mapping>,
    changes: Vec<MapChange>,
    images: Images,
    /// Where the program's vDSO is, once its bytes are in `files::VDSO`.
    vdso: Option<u64>,
    /// What RDTSC, RDTSCP and RDPID returned, where the plugin could read it
    /// (`crate::timestamps`).
    results: Vec<rtit_replay_core::recording::InsnResult>,
    mem: File,
    /// The trace, the truth and the code each stretch ran, as they are written.
    outputs: outputs::Outputs,
    syscall: Option<(u64, [u64; 6])>,
    /// The traced system call under way, completed at its return.
    syscall_record: Option<SyscallRecord>,
    /// The deferred call under way, by its number in order (see `deferred`).
    syscall_seq: Option<usize>,
    /// System calls the engine settles when it reaches them in the ring.
    deferred: deferred::Deferred,
    /// A running `rt_sigaction`'s signal and new handler, set in the table if it succeeds.
    new_action: Option<(u64, u64)>,
    syscalls: Vec<SyscallRecord>,
    memory_start: (Vec<MemoryRegion>, bool),
    registers_start: RegisterMap,
    entry_registers: RegisterMap,
    start_ip: Option<u64>,
    exit_code: Option<i32>,
    stop: Option<String>,
    /// The program an execve ran, which the recording follows (`exec`).
    exec: Option<PluginEnd>,
    /// What starts QEMU again on it, once this recording is written.
    relaunch: Option<exec::Relaunch>,
    /// The signal `rtit record` received, when it asked the recording to end.
    interrupted: Option<i32>,
    /// Processes the program created.
    children: Vec<ChildProcess>,
    notes: Vec<String>,
    flush_check: u32,
    /// What the engine is handed, captured for `cargo bench --bench qemu_engine` when
    /// `RTIT_QEMU_CAPTURE` names a directory.
    capture: Option<Capture>,
    /// The pages the program writes, tracked from tracing's start (`anchors=on`).
    written: Option<crate::written::Written>,
    /// The program's threads: the switches between them (`threads`).
    threads: threads::Threads,
}

impl Plugin {
    /// Set up at install: QEMU's own memory map, the output files.
    pub fn new(args: Args) -> Result<Self, String> {
        let out = PathBuf::from(&args.out);
        let create = |name: &str| -> Result<File, String> {
            let path = out.join(name);
            high(File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?)
        };
        let outputs = outputs::Outputs::create(args.truth, create)?;
        let mem = high(File::open("/proc/self/mem").map_err(|e| format!("/proc/self/mem: {e}"))?)?;
        let config = RtitConfig {
            ctl: args.ctl,
            cr3_match: args.cr3,
            events: args.events,
            lip: args.lip,
            pkt_cnt: args.pkt_cnt,
        };
        let start = match args.start.as_deref() {
            Some(s) if s.starts_with("0x") => {
                Start::At(u64::from_str_radix(&s[2..], 16).map_err(|_| format!("start={s}: not an address"))?)
            }
            _ => Start::Entry,
        };
        let engine = Engine::checked(ModelOptions::default(), config, start, args.truth, args.check);
        Ok(Self {
            engine,
            pid: std::process::id(),
            host_before: host_maps(),
            maps: None,
            initial: Vec::new(),
            changes: Vec::new(),
            images: Images::default(),
            vdso: None,
            results: Vec::new(),
            mem,
            outputs,
            syscall: None,
            syscall_record: None,
            syscall_seq: None,
            deferred: deferred::Deferred::default(),
            new_action: None,
            syscalls: Vec::new(),
            memory_start: (Vec::new(), false),
            registers_start: RegisterMap::new(),
            entry_registers: RegisterMap::new(),
            start_ip: None,
            exit_code: None,
            exec: None,
            relaunch: None,
            stop: None,
            interrupted: None,
            children: Vec::new(),
            notes: Vec::new(),
            flush_check: 0,
            written: None,
            threads: threads::Threads::default(),
            capture: std::env::var_os(capture::ENV).and_then(|dir| {
                let dir = Path::new(&dir);
                let file = |name: &str| {
                    let path = dir.join(name);
                    high(File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?)
                };
                match (file(capture::BLOCKS), file(capture::ENTRIES)) {
                    (Ok(b), Ok(e)) => Some(Capture::with_files(dir, b, e)),
                    (Err(e), _) | (_, Err(e)) => {
                        crate::ffi::say(&e);
                        None
                    }
                }
            }),
            args,
        })
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
        let mut done = 0;
        while done < buf.len() {
            match self.mem.read_at(&mut buf[done..], addr + done as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => done += n,
            }
        }
        done
    }

    /// The program's 8 bytes at `addr`, if readable.
    pub(crate) fn read_u64(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        (self.read(addr, &mut b) == 8).then(|| u64::from_le_bytes(b))
    }

    /// Hands the engine the blocks the vCPU translated since the last call
    /// (`translated`): called where the ring says how far it goes, before any of its blocks.
    fn take_translated(&mut self) {
        for t in crate::translated::take() {
            let (id, raw, kept) = match t {
                crate::translated::Translated::Block { id, raw, kept } => (id, raw, kept),
                crate::translated::Translated::Untranslatable(ip) => {
                    self.notes.push(format!("no decodable instruction at {ip:#x}"));
                    continue;
                }
            };
            let insns = raw.insns();
            if let Some(c) = self.capture.as_mut() {
                if let Err(e) = c.translation(id, &insns) {
                    self.notes.push(e.to_string());
                    self.capture = None;
                }
            }
            let block = match Block::translate(insns) {
                // The vCPU counted what translation keeps (`translations::kept`).
                Ok(block) if block.kept() == kept => block,
                other => {
                    let why = match other {
                        Ok(block) => format!("keeps {} instructions, the vCPU counted {kept}", block.kept()),
                        Err(e) => e.to_string(),
                    };
                    self.refuse_now(format!("block {id} at {:#x}: {why}", raw.start()));
                }
            };
            if !self.engine.push_block(id, block) {
                self.refuse_now(format!("block {id} came to the engine out of order"));
            }
        }
    }

    /// Block `id` starts; `counts` are the previous block's.
    pub fn executed(&mut self, id: u32, counts: Counts) {
        if self.maps.is_none() {
            let entry = self.engine.block(id).start();
            self.first_exec(entry);
        }
        match self.engine.executed(id, counts) {
            Ok(Some(ip)) => self.begin(ip),
            Ok(None) => {}
            Err(e) => {
                self.notes
                    .push(format!("the unit model refused the configuration: {e}"));
                self.stop_now(Counts::default(), "the unit model refused the configuration".into());
            }
        }
        self.flush_check += 1;
        if self.flush_check & 0xfff == 0 {
            self.flush(false);
        }
    }

    /// Appends what the engine produced since the last flush to the output files (with
    /// `end`, the last stretch of code too); a failed write is noted in the report.
    fn flush(&mut self, end: bool) {
        self.outputs.append(&mut self.engine, end, &mut self.notes);
    }

    /// Ends the recording before something it cannot follow (a thread, execve), and lets the
    /// program run on to its own end unrecorded (issue 43: a refused program is not harmed):
    /// every callback is inert from here on, and the caller drops the plugin
    /// (`shared::retire`), which tells the stop thread the recording is over.
    fn stop_and_run_on(&mut self, counts: Counts, reason: String) {
        self.stop = Some(reason);
        self.finish(counts, None);
        crate::published::go_inert();
    }

    /// Ends the recording now and the program with it.
    fn stop_now(&mut self, counts: Counts, reason: String) -> ! {
        self.stop = Some(reason);
        self.finish(counts, None);
        // SAFETY: _exit ends the process without running QEMU's exit paths, which would
        // call back into the plugin.
        unsafe { nix::libc::_exit(1) }
    }

    /// Whether the program is inside a system call (entered, not returned): the vCPU may
    /// not reach another block for as long as the call blocks.
    pub fn in_syscall(&self) -> bool {
        self.syscall.is_some() || crate::threads::nobody_runs()
    }

    /// Feeds the engine up to `max` blocks from the ring, with a signal delivery `rtit
    /// record` wrote (see `published::DELIVERED`), then publishes where it is (see
    /// `published::POSITION`) before the ring says the blocks are taken: `rtit record` reads
    /// the position once they all are.
    pub fn take_blocks(&mut self, max: usize) {
        self.take(max, false);
    }

    /// [`Self::take_blocks`] for the feeder: a batch that ends early, and leaves the trace's
    /// write for later, while another thread waits for the lock (`ring::WANTED`).
    pub fn take_batch(&mut self, max: usize) {
        self.take(max, true);
    }

    fn take(&mut self, max: usize, yielding: bool) {
        crate::ring::take(max, yielding, |blocks| {
            self.take_translated();
            self.take_delivered();
            if !self.engine.tracing() {
                for b in blocks {
                    match b.id {
                        RESULT_MARK => self.settle_result(),
                        SWITCH_MARK => self.settle_switch(),
                        _ => self.executed(b.id, b.before),
                    }
                }
            } else {
                match self.capture.as_mut() {
                    None => self.feed(blocks),
                    Some(c) => {
                        let batch: Vec<Started> = blocks.collect();
                        let engine: Vec<Started> = batch.iter().filter(|b| b.id != RESULT_MARK).copied().collect();
                        if let Err(e) = c.entries(&engine, self.deferred.queued()) {
                            self.notes.push(e.to_string());
                            self.capture = None;
                        }
                        self.feed(batch.into_iter());
                    }
                }
            }
            self.publish();
        });
        // The trace goes to its file 64 KiB at a time: a write every 4096 blocks took 4 % of
        // the feeder's time on gzip (issue 20).
        if self.engine.tracing() && self.engine.buffered() >= FLUSH_BYTES && !(yielding && crate::ring::wanted()) {
            self.flush(false);
        }
    }

    /// The feeder's loop: the engine settles a batch at a time, and a deferred system call
    /// where its mark is.
    fn feed(&mut self, mut blocks: impl Iterator<Item = Started>) {
        loop {
            let mut mark = None;
            self.engine.executed_all(blocks.by_ref().map_while(|b| match b.id {
                MARK | RESULT_MARK | SWITCH_MARK => {
                    mark = Some(b);
                    None
                }
                _ => Some((b.id, b.before)),
            }));
            match mark {
                Some(Started { id: MARK, before }) => self.settle_deferred(before),
                Some(Started { id: SWITCH_MARK, .. }) => self.settle_switch(),
                Some(_) => self.settle_result(),
                None => break,
            }
        }
    }

    /// The engine reached a result's mark (`crate::timestamps`): the running block is the one
    /// whose instruction the callback read.
    fn settle_result(&mut self) {
        if let Some(r) = crate::timestamps::settle(self.engine.block_base()) {
            self.results.push(r);
        }
    }

    /// Hands the engine the signal delivery `rtit record` wrote, if it wrote one. Read after
    /// the ring's entries (which it wrote before the program went on to push the handler's
    /// block); one load per batch otherwise.
    fn take_delivered(&mut self) {
        let [handler, resume, signal] = &crate::published::DELIVERED.0;
        let at = handler.load(Ordering::Acquire);
        if at != 0 {
            let signal = signal.load(Ordering::Relaxed) as i32;
            self.engine.signal_delivered(at, resume.load(Ordering::Relaxed), signal);
            handler.store(0, Ordering::Relaxed);
        }
    }

    /// Feeds the engine one block that started, now, on the vCPU: before tracing starts,
    /// where what the engine does then (the memory map at the first block, the start
    /// snapshot where tracing starts, QEMU's name of the program) must see the program as it
    /// is at that block, and QEMU's API answers on a vCPU only.
    pub fn take_now(&mut self, b: Started) {
        self.take_blocks(usize::MAX);
        self.executed(b.id, b.before);
        self.publish();
    }

    /// Publishes where the engine is (see `published::POSITION`) and whether it traces.
    fn publish(&self) {
        // Written only when it changes: the vCPU reads it at every block.
        if crate::published::TRACING.load(Ordering::Relaxed) != self.engine.tracing() {
            crate::published::TRACING.store(self.engine.tracing(), Ordering::Relaxed);
            match self.engine.tracing() {
                true => crate::published::open(crate::published::NOT_TRACING),
                false => crate::published::close(crate::published::NOT_TRACING),
            }
        }
        let position = self.engine.block_base().unwrap_or(u64::MAX);
        crate::published::POSITION.store(position, Ordering::Relaxed);
        let pending = self.engine.pending_start().unwrap_or(0);
        crate::published::PENDING_START.store(pending, Ordering::Relaxed);
    }

    /// Whether tracing has started.
    pub fn tracing(&self) -> bool {
        self.engine.tracing()
    }

    /// `rtit record` asked to stop (it received `signal`) and block `id` is about to run
    /// (`counts`: the previous block's): the trace ends exactly before it, the recording is
    /// written and QEMU ends.
    pub fn interrupt_before(&mut self, id: u32, counts: Counts, signal: i32) -> ! {
        self.engine.stop_before(id, counts);
        self.interrupted = Some(signal);
        self.finish(Counts::default(), None);
        exit_for(signal)
    }

    /// `rtit record` asked to stop (it received `signal`), and this runs beside the vCPU
    /// (the stop thread, with the lock held). Inside a system call the trace ends with the
    /// call, exactly; before tracing started there is no trace; otherwise the vCPU did not
    /// reach a block in time, and the block it runs is left out, what it did being unknown.
    pub fn interrupt_now(&mut self, signal: i32) -> ! {
        self.engine.stop();
        // A call under way never returned within the recording: no log entry for it.
        self.syscall_record = None;
        self.interrupted = Some(signal);
        self.finish(Counts::default(), None);
        exit_for(signal)
    }

    /// Ends the recording where the engine is, for `reason`, which may run beside the vCPU
    /// (the feeder): as [`Self::interrupt_now`], the block the vCPU runs is left out.
    fn refuse_now(&mut self, reason: String) -> ! {
        self.notes.push(reason.clone());
        self.engine.stop();
        self.syscall_record = None;
        self.stop = Some(reason);
        self.finish(Counts::default(), None);
        // SAFETY: as in `stop_now`.
        unsafe { nix::libc::_exit(1) }
    }

    /// Whether the program called exit or exit_group.
    pub fn exit_called(&self) -> bool {
        self.exit_code.is_some()
    }

    /// The program ended (of the signal `fatal`, where QEMU said which): settles the last
    /// block, writes the trace, the end snapshot and the report.
    pub fn finish(&mut self, counts: Counts, fatal: Option<i32>) {
        if std::process::id() != self.pid {
            // A child the program forked: only the parent is traced (its CR3).
            return;
        }
        if fatal.is_some() {
            // Where the signal that ends the program found it, as `rtit record` read it.
            match crate::published::FAULTED.load(Ordering::Relaxed) {
                0 => {}
                ip => self.engine.signal_at(ip),
            }
        }
        let fault = self.engine.finish(counts, fatal);
        if let Some(e) = self.capture.as_mut().and_then(|c| c.flush().err()) {
            self.notes.push(e.to_string());
        }
        self.deferred
            .settle(&mut self.syscalls, &mut self.children, &mut self.changes);
        self.flush(true);
        let maps = self.maps.as_ref().map(|m| m.current().to_vec()).unwrap_or_default();
        let snap = snapshot_with(&maps, |a, b| self.read(a, b));
        let path = Path::new(&self.args.out).join(files::MEMORY_END);
        let memory_end = match write_snapshot(&path, &snap) {
            Ok(regions) => (regions, snap.truncated),
            Err(e) => {
                self.notes.push(e.to_string());
                (Vec::new(), false)
            }
        };
        if self.start_ip.is_none() {
            let _ = File::create(Path::new(&self.args.out).join(files::MEMORY_START));
        }
        let end = match (self.interrupted, &self.stop, self.exit_code) {
            (Some(signal), _, _) => PluginEnd::Interrupted { signal },
            (None, None, _) if self.exec.is_some() => self.exec.clone().unwrap_or(PluginEnd::Died { fault_ip: None }),
            (None, Some(reason), _) => PluginEnd::Stopped { reason: reason.clone() },
            (None, None, Some(code)) if self.engine.ended() || self.start_ip.is_none() => PluginEnd::Exited { code },
            _ => PluginEnd::Died { fault_ip: fault },
        };
        if !self.results.is_empty() {
            let path = Path::new(&self.args.out).join(files::RESULTS);
            if let Err(e) = syscalls::write_lines(&path, &self.results) {
                self.notes.push(format!("{}: {e}", files::RESULTS));
            }
        }
        // The system calls go to their own file, as the recording holds them; into the
        // report only if that cannot be written.
        let mut syscalls = std::mem::take(&mut self.syscalls);
        if let Err(e) = syscalls::write_lines(&Path::new(&self.args.out).join(files::SYSCALLS), &syscalls) {
            self.notes.push(format!("{}: {e}", files::SYSCALLS));
        } else {
            syscalls.clear();
        }
        let registers_end: RegisterMap = fault
            .map(|ip| ("rip".to_string(), format!("{ip:#x}")))
            .into_iter()
            .collect();
        let report = Report {
            syscalls,
            instructions: self.engine.position(),
            start_ip: self.start_ip,
            maps: Maps {
                initial: std::mem::take(&mut self.initial),
                changes: std::mem::take(&mut self.changes),
            },
            images: self.images.files().map(|(p, a)| (p.to_string(), a)).collect(),
            vdso: self.vdso,
            memory_start: self.memory_start.0.clone(),
            memory_start_truncated: self.memory_start.1,
            memory_end: memory_end.0,
            memory_end_truncated: memory_end.1,
            registers_start: self.registers_start.clone(),
            registers_end,
            end,
            stats: self.engine.stats,
            notes: std::mem::take(&mut self.notes),
            tnt_buff: self.start_ip.map(|_| self.engine.tnt_buff()),
            children: std::mem::take(&mut self.children),
            check: self.engine.checked_so_far(),
            deliveries: self.engine.deliveries().to_vec(),
            switches: {
                let mut all = std::mem::take(&mut self.threads.switches);
                all.extend(self.waiting_threads());
                all
            },
        };
        let out = Path::new(&self.args.out);
        let tmp = out.join(format!("{}.tmp", files::REPORT));
        let written = serde_json::to_vec_pretty(&report)
            .map_err(std::io::Error::from)
            .and_then(|text| std::fs::write(&tmp, text))
            .and_then(|()| std::fs::rename(&tmp, out.join(files::REPORT)));
        if let Err(e) = written {
            crate::ffi::say(&format!("cannot write the report: {e}"));
        }
    }
}

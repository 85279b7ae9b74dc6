//! The plugin at system calls: what the call wrote (the log), the memory map it changed,
//! threads and execve (which stop the recording), and the processes it created.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use rtit_recorder::exec::Target;
use rtit_recorder::outcome::RegisterMap;
use rtit_recorder::qemu::engine::{Call, Counts, SyscallAction};
use rtit_recorder::qemu::report::PluginEnd;
use rtit_recorder::sideband::{diff, nr};
use rtit_replay_core::recording::ChildProcess;
use rtit_replay_core::syscall::{effect, logged_writes, SyscallRecord};

use super::threads::FORK_BLOCKED;
use super::{deferred, Plugin};

/// A system call's log entry as it starts (`a`: its arguments), at `position` and `ip`.
fn record(number: u64, a: [u64; 6], position: u64, ip: u64) -> SyscallRecord {
    let names = ["rdi", "rsi", "rdx", "r10", "r8", "r9"];
    let mut before: RegisterMap = names
        .iter()
        .zip(a)
        .map(|(n, v)| (n.to_string(), format!("{v:#x}")))
        .collect();
    before.insert("rax".into(), format!("{number:#x}"));
    SyscallRecord {
        position,
        ip,
        nr: number,
        before,
        after: RegisterMap::new(),
        writes: Vec::new(),
        complete: false,
        unlogged: Vec::new(),
    }
}

/// rt_sigaction.
pub(crate) const RT_SIGACTION: u64 = 13;
/// MAP_ANONYMOUS.
const MAP_ANONYMOUS: u64 = 0x20;

impl Plugin {
    /// Whether system call `number` (arguments `a`) can be settled by the engine when it
    /// reaches its mark in the ring ([`Self::syscall_deferred`]); else the vCPU takes the
    /// blocks waiting and calls [`Self::syscall`] (see `deferred`).
    pub fn deferrable(&self, number: u64, a: [u64; 6]) -> bool {
        self.engine.tracing()
            && !self.engine.ended()
            && !self.creates_thread(number, a)
            && !self.fork_blocked(number, a)
            && !matches!(number, nr::EXECVE | nr::EXECVEAT | nr::EXIT | nr::EXIT_GROUP)
    }

    fn creates_thread(&self, number: u64, a: [u64; 6]) -> bool {
        match number {
            nr::CLONE => a[0] & nr::CLONE_THREAD != 0,
            nr::CLONE3 => self.read_u64(a[0]).is_some_and(|f| f & nr::CLONE_THREAD != 0),
            _ => false,
        }
    }

    /// What a system call's entry sets on the vCPU: the call under way, and the handler a
    /// `rt_sigaction` installs, which it returns.
    fn entering(&mut self, number: u64, a: [u64; 6]) -> Option<u64> {
        self.syscall = Some((number, a));
        self.new_action = None;
        self.syscall_seq = None;
        if number == RT_SIGACTION && a[1] != 0 {
            let handler = self.read_u64(a[1]);
            self.new_action = handler.map(|h| (a[0], h));
            return handler.filter(|&h| h > 1);
        }
        None
    }

    /// A system call starts, and its mark goes into the ring after this (see `deferred`):
    /// its log entry waits for the position the engine finds there.
    pub fn syscall_deferred(&mut self, number: u64, a: [u64; 6]) {
        let handler = self.entering(number, a);
        let seq = self.deferred.defer(deferred::Call { number, handler });
        self.syscall_seq = Some(seq);
        self.syscall_record = Some(record(number, a, 0, 0));
    }

    /// The engine reached a deferred call's mark (`counts`: its block's).
    pub fn settle_deferred(&mut self, counts: Counts) {
        let Some(call) = self.deferred.next() else {
            self.notes
                .push("a system call's mark in the ring without its call".into());
            return;
        };
        if let Some(h) = call.handler {
            self.engine.note_handler(h);
        }
        // Not a call that stops the recording (those are not deferred).
        let _ = self.engine.syscall(call.number, Call::Returns, counts);
        let placed = self.engine.take_last_syscall();
        self.deferred.placed(placed, self.engine.position());
    }

    /// A system call starts; the engine is up to date. An execve that runs a program rtit
    /// follows ends the recording here, and what starts QEMU again on that program is kept
    /// for [`Self::take_relaunch`].
    pub fn syscall(&mut self, number: u64, a: [u64; 6], counts: Counts) {
        if let Some(h) = self.entering(number, a) {
            self.engine.note_handler(h);
        }
        let creates_thread = self.creates_thread(number, a);
        let thread_exit = self.thread_exit(number);
        if matches!(number, nr::EXIT | nr::EXIT_GROUP) && !thread_exit {
            self.exit_code = Some(a[0] as i32);
        }
        let (exec, relaunch) = match number {
            nr::EXECVE | nr::EXECVEAT => {
                let (target, relaunch) = self.exec_target(number, a);
                (Some(target), relaunch)
            }
            _ => (None, None),
        };
        let call = match &exec {
            _ if creates_thread && self.engine.tracing() => self.thread_created(),
            _ if self.fork_blocked(number, a) => Call::Stops(FORK_BLOCKED.into()),
            _ if creates_thread => Call::Stops(rtit_recorder::unfollowed::THREAD.into()),
            Some(Target::Unsupported(why)) => Call::Stops(format!("the program calls execve, which {why}")),
            Some(Target::Follow(_)) => Call::Ends,
            _ => Call::Returns,
        };
        let tracing = self.engine.tracing() && !self.engine.ended();
        match self.engine.syscall(number, call.clone(), counts) {
            SyscallAction::Stop(reason) => self.stop_and_run_on(counts, reason),
            SyscallAction::Continue if !tracing && call != Call::Returns => {
                // Before tracing started: the recording cannot follow these either.
                let what = if creates_thread {
                    "created a thread"
                } else {
                    "called execve"
                };
                self.stop_and_run_on(
                    counts,
                    format!("the program {what} before tracing started; not supported"),
                );
            }
            SyscallAction::Continue if call == Call::Ends && exec.is_some() => {
                self.exec = relaunch.as_ref().map(|r| PluginEnd::Exec {
                    program: r.program.clone(),
                    file: r.file.clone(),
                    argv: r.command.clone(),
                    start: r.start.clone(),
                });
                self.relaunch = relaunch;
                self.finish(counts, None);
            }
            SyscallAction::Continue => {}
        }
        if let Some((position, ip)) = self.engine.take_last_syscall() {
            self.syscall_record = Some(record(number, a, position, ip));
        }
        if thread_exit {
            // It never returns: its entry is complete now, and the next thread runs.
            self.syscall = None;
            let record = self.syscall_record.take();
            self.thread_ends(record);
        }
    }

    /// What starts QEMU again on the program an execve ran, once this one's recording is
    /// written (`crate::relaunch`).
    pub fn take_relaunch(&mut self) -> Option<super::exec::Relaunch> {
        self.relaunch.take()
    }

    /// A system call returned `ret`: completes its log entry, notes a process it created,
    /// follows the map. (In the child a fork returns 0 in, nothing runs: it went inert as it
    /// was forked, see `published::forked_child`.)
    pub fn syscall_ret(&mut self, number: u64, ret: i64) {
        if let Some((signal, handler)) = self.new_action.take().filter(|_| number == RT_SIGACTION && ret == 0) {
            if let Some(slot) = crate::published::HANDLERS.get(signal as usize) {
                slot.store(handler, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let position = self.syscall_record.as_ref().map(|r| r.position);
        let seq = self.syscall_seq.take();
        if let Some(r) = self.syscall_record.take() {
            let r = self.complete_syscall(r, ret as u64);
            self.syscalls.push(r);
            self.waits(deferred::Waiting::Record(self.syscalls.len() - 1), seq);
        }
        let Some((n, a)) = self.syscall.take() else { return };
        if n == number {
            self.note_thread(number, a, ret);
        }
        if n == number && ret > 0 {
            if let Some(position) = position {
                if self.note_child(number, a[0], position, ret) {
                    self.waits(deferred::Waiting::Child(self.children.len() - 1), seq);
                }
            }
        }
        if n != number || !nr::changes_map(number) || (-4095..0).contains(&ret) {
            return;
        }
        let Some(maps) = self.maps.as_mut() else { return };
        let old = maps.current().to_vec();
        let ret = ret as u64;
        match number {
            nr::MMAP => {
                let path = (a[3] & MAP_ANONYMOUS == 0)
                    .then(|| std::fs::read_link(format!("/proc/self/fd/{}", a[4] as i32)).ok())
                    .flatten()
                    .map(|p| p.display().to_string());
                maps.mmap(ret, a[1], a[2], a[3], path, a[5]);
            }
            nr::MUNMAP => maps.munmap(a[0], a[1]),
            nr::MPROTECT => maps.mprotect(a[0], a[1], a[2]),
            nr::BRK => maps.brk(ret),
            nr::MREMAP => maps.mremap(a[0], a[1], a[2], ret),
            _ => {}
        }
        if self.engine.tracing() {
            let mapped = rtit_recorder::sideband::mapped(number, a[1], ret);
            if let Some(change) = diff(&old, maps.current(), self.engine.position(), number, mapped) {
                self.images.note(&change.added);
                if let Some(Err(e)) = self.written.as_ref().map(|w| w.follow(&change.added)) {
                    self.notes.push(format!("anchors end here: {e}"));
                    self.written = None;
                }
                self.changes.push(change);
                self.waits(deferred::Waiting::Change(self.changes.len() - 1), seq);
            }
        }
    }

    /// Fills in a system call's result and the memory it wrote (read back from the guest, the
    /// table of `rtit_replay_core::syscall` saying where).
    fn complete_syscall(&self, mut r: SyscallRecord, ret: u64) -> SyscallRecord {
        // QEMU hands rt_sigreturn's callback its own -QEMU_ESIGRETURN (-513), not the rax the
        // restored context holds (which comes from the frame): logged as the result, replay
        // showed -513 in rax after every handler's return.
        if r.nr != nr::RT_SIGRETURN {
            r.after.insert("rax".into(), format!("{ret:#x}"));
        }
        let arg = |n: &str| {
            r.before
                .get(n)
                .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        };
        let args = ["rdi", "rsi", "rdx", "r10", "r8", "r9"].map(arg);
        let logged = logged_writes(&effect(r.nr, &args, Some(ret)), &|a, b| self.read(a, b));
        r.writes.extend(logged.writes);
        r.complete = logged.complete;
        r.unlogged = logged.unlogged;
        if r.nr == nr::MMAP {
            if let (Some(fd), Some(len), Some(flags)) = (args[4], args[1], args[3]) {
                let path = ((fd as i32) >= 0)
                    .then(|| std::fs::read_link(format!("/proc/self/fd/{}", fd as i32)).ok())
                    .flatten();
                if let Some(path) = path {
                    r.writes
                        .extend(rtit_recorder::sideband::mapped_file(&path, ret, len, flags, |a, b| {
                            self.read(a, b)
                        }));
                }
            }
        }
        r
    }

    /// Makes `entry` wait for deferred call `seq`'s position, if the call was deferred.
    fn waits(&mut self, entry: deferred::Waiting, seq: Option<usize>) {
        if let Some(seq) = seq {
            self.deferred.wait(entry, seq);
        }
    }

    /// Notes the process that call `number` (first argument `a0`) at `position` created, if
    /// it created one (true then): QEMU forks itself for it, and the copy runs unrecorded.
    fn note_child(&mut self, number: u64, a0: u64, position: u64, pid: i64) -> bool {
        let flags = match number {
            nr::CLONE3 => self.read_u64(a0).unwrap_or(0),
            _ => a0,
        };
        let Some(name) = nr::creates_process(number, flags) else {
            return false;
        };
        self.children.push(ChildProcess {
            position,
            syscall: name.to_string(),
            pid: Some(pid),
        });
        true
    }
}

/// Writes `records` to `path`, one JSON record a line, as the recording holds them (nothing,
/// and no file, for none).
pub(super) fn write_lines<T: serde::Serialize>(path: &Path, records: &[T]) -> std::io::Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    let mut f = std::io::BufWriter::new(File::create(path)?);
    for r in records {
        serde_json::to_writer(&mut f, r)?;
        f.write_all(b"\n")?;
    }
    f.flush()
}

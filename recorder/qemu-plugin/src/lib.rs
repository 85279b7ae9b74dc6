//! rtit's QEMU user-mode plugin (plugin API versions 1 to 4: QEMU 7.2 to 10.x, see
//! `versioned`): at translation time it
//! classifies each block once; at execution time it notes the executed block sequence, with
//! an inline counter (the block's instructions, added before its last one), in a ring (`ring`) from which the feeder thread (`feeder`) hands it to the
//! retirement engine of `rtit_recorder::qemu`, which drives the RTIT unit model, on another
//! core. System calls keep the guest's memory map. At the end it writes the trace and a
//! report into the directory `rtit record` named; `rtit record --backend qemu` runs it.
//!
//! With `floor=on` alone it only measures what the API costs (`floor`).
//!
//! Threads take turns, one running at a time (`threads`; QEMU 9.0 and later, whose plugins
//! read a thread's registers: under older ones the plugin stops recording before the first
//! `clone` that creates a thread, and the program runs on unrecorded). An execve of an x86-64 program ends
//! the recording, and the plugin starts QEMU again on that program (`state::exec`).
//! A process the program forks is a copy of QEMU with this plugin in it: it goes inert and
//! runs unrecorded; the parent notes it. When `rtit record` is asked to stop it tells the
//! plugin through a pipe, and the plugin ends the recording where the program is.
#![allow(unsafe_code)]

mod direction;
mod feeder;
mod ffi;
mod floor;
mod high_fds;
mod in_call;
mod park;
mod published;
mod registers;
mod ring;
mod sample_signal;
mod shared;
mod state;
mod stop;
mod threads;
mod timestamps;
mod translated;
mod versioned;
mod written;

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::Ordering;

use ffi::{say, PluginId, QemuInfo, Tb};
use published::{inert, GATE, POSITION, STOP, TRACING};
use rtit_recorder::qemu::engine::Started;
use rtit_recorder::qemu::report::Args;
use rtit_recorder::qemu::translations;
use shared::{lock, with_plugin};
use state::Plugin;

/// How long the vCPU spins on a full ring that the feeder does not empty before it takes
/// blocks itself (a spin is a few nanoseconds; the feeder makes room every 64 blocks, about a
/// microsecond, when it runs).
const STALLED_SPINS: u32 = 1 << 18;

extern "C" fn tb_exec(vcpu: c_uint, userdata: *mut c_void) {
    let block = ring::starts(userdata as usize as u32);
    // The common case alone, with nothing else inlined: it needs no register saved.
    if GATE.load(Ordering::Relaxed) != 0 || !ring::push(block) {
        gated(block, vcpu);
    }
}

/// Block `block` starts on vCPU `vcpu`, and it cannot just go into the ring: see [`GATE`]
/// (or the ring is full).
#[cold]
#[inline(never)]
fn gated(block: Started, vcpu: c_uint) {
    if inert() {
        return;
    }
    // Whether the thread left its turn before this block (another ran meanwhile).
    let mut waited = false;
    if GATE.load(Ordering::Relaxed) & published::PREEMPT != 0 && threads::on() {
        match threads::preempt(vcpu, block.id, block.before) {
            threads::Preempted::Not => {}
            threads::Preempted::Resumed => waited = true,
            threads::Preempted::Stalled => {
                with_plugin(|p| p.stall());
                shared::retire();
            }
        }
        if inert() {
            return;
        }
    }
    // A park says the program is at this block's start on this thread: only where the block
    // runs next. Parked first and then interrupted for another thread's turn, the anchor
    // had this thread's registers at the position where the other one went on (a thread
    // showed the other's stack and fs_base there, at one anchor in eight of GNU sort's).
    // After a wait the next block parks.
    if !waited
        && GATE.load(Ordering::Relaxed) & published::PARKING != 0
        && TRACING.load(Ordering::Relaxed)
        && STOP.load(Ordering::Relaxed) == 0
    {
        park::park(block);
    }
    match STOP.load(Ordering::Relaxed) {
        0 if !TRACING.load(Ordering::Relaxed) => {
            with_plugin(|p| p.take_now(block));
        }
        0 => push(block),
        signal => {
            with_plugin(|p| {
                p.take_blocks(usize::MAX);
                // The block that starts now is left out: the trace ends before it.
                p.interrupt_before(block.id, block.before, signal)
            });
        }
    }
}

/// Puts `entry` into the ring, waiting for room if it is full.
#[inline]
pub(crate) fn push(entry: Started) {
    if ring::push(entry) {
        return;
    }
    let (mut spins, mut taken) = (0u32, ring::taken());
    while !ring::push(entry) {
        // Full: the feeder makes room as it goes (a lock here would make the two threads
        // wake each other through the kernel at every batch). If it makes none for a while
        // (it got no core), the vCPU takes a batch itself, unless the plugin finished.
        std::hint::spin_loop();
        match ring::taken() {
            now if now != taken => (spins, taken) = (0, now),
            _ if spins < STALLED_SPINS => spins += 1,
            _ => {
                if with_plugin(|p| p.take_blocks(feeder::BATCH)).is_none() {
                    return;
                }
                spins = 0;
            }
        }
    }
}

/// A callback read what an instruction of the running block wrote (`timestamps`): a mark
/// behind the block in the ring, where the engine gives the result its position.
fn mark_result() {
    push(Started {
        id: rtit_recorder::qemu::engine::RESULT_MARK,
        before: ring::running(),
    });
}

extern "C" fn tb_trans(_id: PluginId, tb: *mut Tb) {
    // The program's first block: from here on, sockets are the program's (`high_fds`).
    high_fds::program_started();
    if inert() {
        return;
    }
    // SAFETY: `tb` is valid during this callback; the instruction handles and their bytes
    // are QEMU's for the same duration, and are only read here.
    unsafe {
        let n = ffi::qemu_plugin_tb_n_insns(tb);
        let copied: Vec<(*mut ffi::Insn, u64, versioned::InsnBytes)> = (0..n)
            .map(|i| {
                let insn = ffi::qemu_plugin_tb_get_insn(tb, i);
                let bytes = versioned::insn_bytes(insn, ffi::qemu_plugin_insn_size(insn));
                (insn, ffi::qemu_plugin_insn_vaddr(insn), bytes)
            })
            .collect();
        let insns: Vec<(u64, &[u8])> = copied.iter().map(|(_, at, b)| (*at, b.as_slice())).collect();
        direction::translated(&insns);
        // Decoded on the feeder's thread (`translated`): only how many instructions the block
        // keeps is needed here.
        if insns.first().map_or(true, |(_, bytes)| bytes.is_empty()) {
            translated::untranslatable(ffi::qemu_plugin_tb_vaddr(tb));
            return;
        }
        let kept = translations::kept(&insns);
        let id = translated::number(&insns, kept);
        let handles: Vec<(*mut ffi::Insn, u64, &[u8])> =
            copied.iter().map(|(insn, at, b)| (*insn, *at, b.as_slice())).collect();
        timestamps::instrument(&handles, kept);
        // The block's count, at once, before its last instruction (see `published::STARTED`).
        if kept > 0 {
            versioned::add_before(ffi::qemu_plugin_tb_get_insn(tb, kept - 1), kept as u64);
        }
        // No memory callback: QEMU 7.2 can leave one armed after a block whose last
        // instruction calls a helper and ends it (ld.so's lazy binding, `xrstor`), then run it
        // from freed memory once its blocks are flushed (a crash in `qemu_plugin_vcpu_mem_cb`).
        // Whether a last instruction faulted comes from the signal frame instead.
        ffi::qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_exec, ffi::CB_NO_REGS, id as usize as *mut c_void);
    }
}

#[allow(clippy::too_many_arguments)]
extern "C" fn syscall(
    _id: PluginId,
    vcpu: c_uint,
    num: i64,
    a1: u64,
    a2: u64,
    a3: u64,
    a4: u64,
    a5: u64,
    a6: u64,
    _a7: u64,
    _a8: u64,
) {
    // A thread's exit never returns: a mark would stay (`in_call`).
    if !matches!(
        num as u64,
        rtit_recorder::sideband::nr::EXIT | rtit_recorder::sideband::nr::EXIT_GROUP
    ) {
        in_call::enter(vcpu);
    }
    if inert() {
        return;
    }
    let counts = ring::running();
    let (number, args) = (num as u64, [a1, a2, a3, a4, a5, a6]);
    if number == rtit_recorder::sideband::nr::RT_SIGRETURN {
        // The context it restores may set DF (`direction`); QEMU 7.2 reads no registers, and
        // takes no register from inside its execution loop either.
        let at = registers::value("rsp").map(|sp| sp + direction::SIGRETURN_EFLAGS);
        direction::sigreturn(at.and_then(|at| with_plugin(|p| p.read_u64(at)).flatten()));
    }
    if threads::passes_turn(number) && with_plugin(|p| p.deferrable(number, args)) == Some(true) {
        // It may wait in the kernel for another thread: that one's turn comes meanwhile,
        // and the call is noted at its return, in its place in the ring (`threads`).
        threads::leave(threads::LeftAt { number, args, counts });
        return;
    }
    // An ordinary call goes into the ring as a mark, for the engine to settle when it gets
    // there; the vCPU goes on (see `state::deferred`).
    let deferred = with_plugin(|p| {
        let deferrable = p.deferrable(number, args);
        if deferrable {
            p.syscall_deferred(number, args);
        }
        deferrable
    });
    match deferred {
        Some(true) => push(Started {
            id: state::MARK,
            before: counts,
        }),
        Some(false) => {
            let relaunch = with_plugin(|p| {
                p.take_blocks(usize::MAX);
                p.syscall(number, args, counts);
                p.take_relaunch()
            })
            .flatten();
            if let Some(r) = relaunch {
                // An execve rtit follows: this program's recording is written, and QEMU starts
                // again on the program it runs, in this process (`state::exec`).
                shared::retire();
                say(&state::exec::start(&r));
                // QEMU could not start again: the program makes its call, unrecorded.
                published::go_inert();
                return;
            }
            if inert() {
                // The recording stopped before this call; the program makes it, unrecorded.
                shared::retire();
            }
        }
        None => {}
    }
}

extern "C" fn syscall_ret(_id: PluginId, vcpu: c_uint, num: i64, ret: i64) {
    in_call::leave(vcpu);
    if inert() {
        return;
    }
    if let Some(call) = threads::back(vcpu) {
        if inert() {
            return;
        }
        with_plugin(|p| p.syscall_deferred(call.number, call.args));
        push(Started {
            id: state::MARK,
            before: call.counts,
        });
    }
    with_plugin(|p| p.syscall_ret(num as u64, ret));
    // The program set a signal's action: QEMU 9+ gives a default or ignored one no host
    // handler, and the sample signal needs QEMU's (`sample_signal`).
    if num as u64 == state::RT_SIGACTION {
        sample_signal::catch();
    }
}

extern "C" fn atexit(_id: PluginId, _userdata: *mut c_void) {
    // QEMU runs this at the program's exit system call, and QEMU 9 and later also when a
    // signal kills it, just before the `kill` that ends QEMU with that signal: that end is
    // left to the `kill` below, which knows the signal (the last instruction's fault).
    // (A forked child never takes the lock: it may hold its parent's copy.)
    if inert() || with_plugin(|p| p.exit_called()) == Some(false) {
        return;
    }
    end(None);
}

/// The program ends: by its exit system call, or of the signal `fatal`.
fn end(fatal: Option<i32>) {
    if inert() {
        return;
    }
    let counts = ring::running();
    let mut guard = lock();
    if let Some(mut p) = guard.take() {
        p.take_blocks(usize::MAX);
        p.finish(counts, fatal);
    }
}

/// QEMU 7.2 ends a program killed by a signal (`dump_core_and_abort`) by sending itself that
/// signal, without the plugin's exit callback. `rtit record` preloads this library into
/// QEMU (not into the guest: `-U LD_PRELOAD`) so that this `kill` sees that moment, writes the
/// recording's end, then sends the signal as asked (a raw system call, as libc's would).
#[no_mangle]
pub extern "C" fn kill(pid: nix::libc::pid_t, sig: c_int) -> c_int {
    if pid == std::process::id() as nix::libc::pid_t {
        end(Some(sig));
    }
    // SAFETY: the kill system call with plain integer arguments.
    unsafe { nix::libc::syscall(nix::libc::SYS_kill, pid, sig) as c_int }
}

/// QEMU calls this once after loading the plugin. The guest is not loaded yet: the host's
/// memory map now is QEMU's own, which tells the guest's mappings apart later.
///
/// # Safety
/// QEMU passes `argc` valid NUL-terminated strings in `argv`.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: PluginId,
    info: *const QemuInfo,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    if !info.is_null() && (*info).system_emulation {
        say("only QEMU user mode (qemu-x86_64) is supported");
        return -1;
    }
    if let Err(e) = versioned::install(info) {
        say(&e);
        return -1;
    }
    let strings: Vec<String> = (0..argc.max(0) as usize)
        .map(|i| CStr::from_ptr(*argv.add(i)).to_string_lossy().into_owned())
        .collect();
    if strings.iter().any(|s| s == floor::ARG) {
        if strings.len() != 1 {
            say(&format!("{} takes no other argument", floor::ARG));
            return -1;
        }
        floor::install(id);
        return 0;
    }
    let args = match Args::parse(strings.iter().map(String::as_str)) {
        Ok(a) => a,
        Err(e) => {
            say(&e.to_string());
            return -1;
        }
    };
    // SAFETY: registers a plain function that only stores to an atomic, as a fork child
    // handler may.
    if unsafe { nix::libc::pthread_atfork(None, None, Some(published::forked_child)) } != 0 {
        say("pthread_atfork failed");
        return -1;
    }
    // The stop thread starts before `Plugin::new` notes QEMU's own memory map (its stack is
    // QEMU's, not the program's), and waits on the lock held here until the plugin is in
    // place: from then on, no plugin means a finished one.
    let mut guard = lock();
    if let Some(fd) = args.stop {
        if let Err(e) = stop::start(fd) {
            say(&e);
            return -1;
        }
    }
    if let Err(e) = write_counters(&args.out) {
        say(&e);
        return -1;
    }
    match Plugin::new(args) {
        Ok(p) => *guard = Some(p),
        Err(e) => {
            say(&e);
            return -1;
        }
    }
    drop(guard);
    ring::detect();
    if let Err(e) = feeder::start() {
        say(&e);
        return -1;
    }
    ffi::qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
    ffi::qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    ffi::qemu_plugin_register_vcpu_syscall_cb(id, syscall);
    ffi::qemu_plugin_register_vcpu_syscall_ret_cb(id, syscall_ret);
    ffi::qemu_plugin_register_atexit_cb(id, atexit, std::ptr::null_mut());
    0
}

/// A vCPU exists: before the program's first instruction (QEMU 9 and later run this on the
/// vCPU's thread when it starts, after their gdbstub has let the program go).
extern "C" fn vcpu_init(_id: PluginId, vcpu: c_uint) {
    if inert() {
        return;
    }
    if let Err(e) = versioned::vcpu_ready(vcpu) {
        say(&e);
        std::process::abort();
    }
    if vcpu == 0 {
        sample_signal::catch();
        registers::vcpu_ready();
    }
    // A thread of the program starts: it waits for its turn (`threads`).
    threads::arrive(vcpu);
}

/// Tells `rtit record` where the position counters and the signal handlers are in this
/// process.
fn write_counters(out: &str) -> Result<(), String> {
    let counters = rtit_recorder::qemu::report::Counters {
        position: POSITION.as_ptr() as u64,
        started: published::STARTED.as_ptr() as u64,
        started_via: Some(versioned::COUNTER.as_ptr() as u64),
        started_base: Some(ring::BLOCK_STARTED.as_ptr() as u64),
        pushed: Some(ring::PUSHED.as_ptr() as u64),
        taken: Some(ring::TAKEN.as_ptr() as u64),
        handlers: published::HANDLERS.as_ptr() as u64,
        delivered: Some(published::DELIVERED.as_ptr() as u64),
        pending_start: Some(published::PENDING_START.as_ptr() as u64),
        faulted: Some(published::FAULTED.as_ptr() as u64),
        tracking: Some(written::TRACKING.as_ptr() as u64),
        inside: Some(published::INSIDE.as_ptr() as u64),
        hold: Some(published::HOLD.as_ptr() as u64),
        running: Some(published::RUNNING.as_ptr() as u64),
        park: Some(published::PARK.as_ptr() as u64),
        parked: Some(published::PARKED.as_ptr() as u64),
        parked_at: Some(published::PARKED_AT.as_ptr() as u64),
        parked_registers: Some(published::PARKED_REGISTERS.as_ptr() as u64),
        in_call: Some(in_call::IN_CALL.as_ptr() as u64),
        in_call_slots: Some(in_call::SLOTS as u64),
        crowded: Some(in_call::CROWDED.as_ptr() as u64),
        signalling: Some(in_call::SIGNALLING.as_ptr() as u64),
    };
    let path = std::path::Path::new(out).join(rtit_recorder::qemu::report::files::COUNTERS);
    let text = serde_json::to_vec(&counters).map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

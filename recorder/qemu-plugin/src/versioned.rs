//! What differs between QEMU's plugin API versions, so that one library loads in every QEMU
//! from 7.2 (API version 1) to 10.x (version 4):
//!
//! - QEMU 9.0 (version 2) refuses plugins that declare version 1, and removed the inline
//!   add to a fixed address (`qemu_plugin_register_vcpu_insn_exec_inline`) for one to a
//!   per-vCPU scoreboard entry (`…_inline_per_vcpu`); QEMU 7.2 refuses version 2.
//! - QEMU 9.1 (version 3) changed `qemu_plugin_insn_data` from returning a pointer to copying
//!   into a buffer, under the same name.
//! - QEMU 10 no longer exports `qemu_plugin_path_to_binary` to user mode (`rtit record`
//!   passes the program's path instead: `Args::exe`).
//!
//! QEMU loads a plugin with every symbol bound at once, so a call one version lacks cannot be
//! linked: each is looked up in QEMU (`dlsym`) instead. The version the library declares is
//! decided by its constructor, which runs inside `dlopen`, before QEMU reads
//! `qemu_plugin_version`; the calls are chosen at install, from the version QEMU says it is.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::ffi::{Insn, QemuInfo, INLINE_ADD_U64};
use crate::published::STARTED;

/// The plugin API version this library declares: 1 for QEMU 7.x/8.x, 2 where QEMU has
/// scoreboards (9.0 and later, which accept 2 up to their current version). Set by
/// [`DECLARE`] when the library loads.
#[no_mangle]
pub static qemu_plugin_version: AtomicI32 = AtomicI32::new(1);

/// The library's constructor (ELF `.init_array`): runs inside QEMU's `dlopen` of the
/// plugin (or at QEMU's start, where `rtit record` preloads it), before QEMU reads
/// [`qemu_plugin_version`].
#[used]
#[link_section = ".init_array"]
static DECLARE: extern "C" fn() = declare;

extern "C" fn declare() {
    let version = if lookup(c"qemu_plugin_scoreboard_new").is_null() {
        1
    } else {
        2
    };
    qemu_plugin_version.store(version, Ordering::Relaxed);
}

/// QEMU's exported function `name`, or null.
pub(crate) fn lookup(name: &CStr) -> *mut c_void {
    // SAFETY: a lookup in the process's global scope by a NUL-terminated name.
    unsafe { nix::libc::dlsym(nix::libc::RTLD_DEFAULT, name.as_ptr()) }
}

/// `qemu_plugin_u64`: a `u64` entry of a scoreboard (an array with one element per vCPU).
#[repr(C)]
#[derive(Clone, Copy)]
struct ScoreboardU64 {
    score: *mut c_void,
    offset: usize,
}

type InlineV1 = unsafe extern "C" fn(insn: *mut Insn, op: c_int, ptr: *mut c_void, imm: u64);
type InlinePerVcpu = unsafe extern "C" fn(insn: *mut Insn, op: c_int, entry: ScoreboardU64, imm: u64);
type ScoreboardNew = unsafe extern "C" fn(element_size: usize) -> *mut c_void;
type ScoreboardFind = unsafe extern "C" fn(score: *mut c_void, vcpu: u32) -> *mut c_void;
type InsnDataPointer = unsafe extern "C" fn(insn: *const Insn) -> *const c_void;
type InsnDataCopy = unsafe extern "C" fn(insn: *const Insn, dest: *mut c_void, len: usize) -> usize;

/// The calls of the running QEMU's version.
enum Calls {
    /// API version 1: the inline add goes to a fixed address (the plugin's own counter).
    V1 { inline: InlineV1, data: InsnDataPointer },
    /// API version 2 and later: the inline add goes to vCPU 0's entry of a scoreboard.
    Scoreboard {
        inline: InlinePerVcpu,
        entry: ScoreboardU64,
        find: ScoreboardFind,
        data: InsnData,
    },
}

/// `qemu_plugin_insn_data` as the running QEMU declares it.
enum InsnData {
    Pointer(InsnDataPointer),
    Copy(InsnDataCopy),
}

// SAFETY: function pointers and a scoreboard handle QEMU keeps for the process's life.
unsafe impl Send for Calls {}
// SAFETY: as above; nothing in it is written after install.
unsafe impl Sync for Calls {}

static CALLS: OnceLock<Calls> = OnceLock::new();

/// Where the counter QEMU's translated code adds each block's count to is (see
/// `published::STARTED`): the plugin's own under API version 1, vCPU 0's scoreboard entry
/// under later ones, once vCPU 0 exists; null before. `rtit record` reads it from outside
/// (`Counters::started_via`).
pub static COUNTER: AtomicPtr<AtomicU64> = AtomicPtr::new(std::ptr::null_mut());

/// The inline counter, wherever this QEMU keeps it.
#[inline]
pub fn started() -> &'static AtomicU64 {
    let at = COUNTER.load(Ordering::Relaxed);
    if at.is_null() {
        &STARTED
    } else {
        // SAFETY: a scoreboard entry QEMU never frees, aligned for a u64 (set in `install`).
        unsafe { &*at }
    }
}

/// Chooses the calls of the QEMU that loaded the plugin, from the version it says it
/// supports (`info`); an error names what is missing.
///
/// # Safety
/// `info` is QEMU's, valid during install.
pub unsafe fn install(info: *const QemuInfo) -> Result<(), String> {
    let current = if info.is_null() { 1 } else { (*info).version_cur };
    let find = |name: &CStr| {
        let at = lookup(name);
        if at.is_null() {
            Err(format!(
                "this QEMU (plugin API version {current}) does not export {}",
                name.to_string_lossy()
            ))
        } else {
            Ok(at)
        }
    };
    let data = find(c"qemu_plugin_insn_data")?;
    let calls = if current < 2 {
        COUNTER.store(STARTED.as_ptr().cast(), Ordering::Relaxed);
        Calls::V1 {
            // SAFETY: the signatures of QEMU 7.2's qemu-plugin.h (API version 1).
            inline: std::mem::transmute::<*mut c_void, InlineV1>(find(c"qemu_plugin_register_vcpu_insn_exec_inline")?),
            data: std::mem::transmute::<*mut c_void, InsnDataPointer>(data),
        }
    } else {
        let new = std::mem::transmute::<*mut c_void, ScoreboardNew>(find(c"qemu_plugin_scoreboard_new")?);
        let get = std::mem::transmute::<*mut c_void, ScoreboardFind>(find(c"qemu_plugin_scoreboard_find")?);
        // A line of its own for the counter (see `published::Line`). QEMU allocates room for
        // 16 vCPUs at once, so vCPU 0's entry does not move while one runs; where it is can
        // only be asked once vCPU 0 exists (`vcpu_ready`).
        let score = new(128);
        if score.is_null() {
            return Err("QEMU gave no scoreboard".into());
        }
        Calls::Scoreboard {
            inline: std::mem::transmute::<*mut c_void, InlinePerVcpu>(find(
                c"qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu",
            )?),
            entry: ScoreboardU64 { score, offset: 0 },
            find: get,
            // Version 3 (QEMU 9.1) copies the bytes into the caller's buffer.
            data: if current >= 3 {
                InsnData::Copy(std::mem::transmute::<*mut c_void, InsnDataCopy>(data))
            } else {
                InsnData::Pointer(std::mem::transmute::<*mut c_void, InsnDataPointer>(data))
            },
        }
    };
    CALLS.set(calls).map_err(|_| "installed twice".to_string())
}

/// vCPU `vcpu` exists: the counter is vCPU 0's scoreboard entry from now on, where QEMU
/// keeps scoreboards (an error if QEMU gives none usable).
pub fn vcpu_ready(vcpu: u32) -> Result<(), String> {
    if let (0, Some(Calls::Scoreboard { entry, find, .. })) = (vcpu, CALLS.get()) {
        // SAFETY: QEMU's own scoreboard, asked for an existing vCPU's entry.
        let at = unsafe { find(entry.score, 0) }.cast::<AtomicU64>();
        if at.is_null() || !at.is_aligned() {
            return Err("QEMU gave no usable scoreboard entry".into());
        }
        COUNTER.store(at, Ordering::Relaxed);
    }
    Ok(())
}

/// vCPU `vcpu` runs from now on (the program's threads take turns, `threads`): the inline
/// counter is its scoreboard entry, looked up again, since QEMU moves the entries when it
/// grows the scoreboard for a new vCPU. Nothing to do under API version 1, whose counter is
/// one for all (and which records no threads).
pub fn runs(vcpu: u32) {
    if let Some(Calls::Scoreboard { entry, find, .. }) = CALLS.get() {
        // SAFETY: QEMU's own scoreboard, asked for an existing vCPU's entry (the caller's).
        let at = unsafe { find(entry.score, vcpu) }.cast::<AtomicU64>();
        if !at.is_null() && at.is_aligned() {
            COUNTER.store(at, Ordering::Relaxed);
        }
    }
}

/// Adds `count` to the inline counter before `insn` runs, each time it runs.
///
/// # Safety
/// During a translation callback, with `insn` one of its block's instructions.
pub unsafe fn add_before(insn: *mut Insn, count: u64) {
    match CALLS.get() {
        Some(Calls::V1 { inline, .. }) => inline(insn, INLINE_ADD_U64, started().as_ptr().cast(), count),
        Some(Calls::Scoreboard { inline, entry, .. }) => inline(insn, INLINE_ADD_U64, *entry, count),
        None => {}
    }
}

/// The most bytes an x86 instruction has.
const MAX_INSN: usize = 15;

/// An instruction's bytes, copied.
#[derive(Clone, Copy)]
pub struct InsnBytes {
    bytes: [u8; MAX_INSN],
    len: usize,
}

impl InsnBytes {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// The bytes of `insn` (none if QEMU has none for it: a block it could not read).
///
/// # Safety
/// During a translation callback, with `insn` one of its block's instructions.
pub unsafe fn insn_bytes(insn: *const Insn, size: usize) -> InsnBytes {
    let mut out = InsnBytes {
        bytes: [0; MAX_INSN],
        len: 0,
    };
    let size = size.min(MAX_INSN);
    let pointer = match CALLS.get() {
        Some(Calls::V1 { data, .. })
        | Some(Calls::Scoreboard {
            data: InsnData::Pointer(data),
            ..
        }) => data(insn),
        Some(Calls::Scoreboard {
            data: InsnData::Copy(copy),
            ..
        }) => {
            out.len = copy(insn, out.bytes.as_mut_ptr().cast(), size).min(size);
            return out;
        }
        None => std::ptr::null(),
    };
    if !pointer.is_null() {
        out.bytes[..size].copy_from_slice(std::slice::from_raw_parts(pointer.cast::<u8>(), size));
        out.len = size;
    }
    out
}

//! What RDTSC, RDTSCP and RDPID returned (`rtit_recorder::qemu::timestamps`), read from the
//! registers on QEMU 9.0 and later (plugin API 2), which let a callback registered with
//! `QEMU_PLUGIN_CB_R_REGS` read them. The registers are read before the next instruction:
//!
//! - within the block, a callback on the instruction after it;
//! - where it ends its block (QEMU ends a block after RDTSC and RDTSCP, as an I/O
//!   instruction), a callback on it notes it and how many entries the ring had, and a
//!   callback on the first instruction of the block at its fall-through reads the registers
//!   if exactly that block came next (nothing else went into the ring between: no signal, no
//!   system call).
//!
//! The values are queued and a mark goes into the ring behind the running block, where the
//! engine's thread gives them their position: the block's base plus the instruction's index,
//! or the base less one. Replay takes a logged result only where the history has that
//! instruction there. One that runs while the engine is not taking the ring keeps its result
//! unknown, as on QEMU 7.2, whose API reads no register.
#![allow(unsafe_code)]

use std::collections::{HashSet, VecDeque};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::ffi::{self, Insn};

/// `QEMU_PLUGIN_CB_R_REGS`.
const CB_R_REGS: c_int = 1;

/// `qemu_plugin_reg_descriptor`.
#[repr(C)]
struct RegDescriptor {
    handle: *mut c_void,
    name: *const c_char,
    feature: *const c_char,
}

/// glib's `GArray` and `GByteArray` (the same two leading fields).
#[repr(C)]
struct GArray {
    data: *mut u8,
    len: c_uint,
}

type GetRegisters = unsafe extern "C" fn() -> *mut GArray;
type ReadRegister = unsafe extern "C" fn(handle: *mut c_void, buf: *mut GArray) -> c_int;
type ByteArrayNew = unsafe extern "C" fn() -> *mut GArray;
type ByteArraySetSize = unsafe extern "C" fn(array: *mut GArray, len: c_uint) -> *mut GArray;

/// The calls and the general registers' handles, once vCPU 0 exists.
struct Registers {
    read: ReadRegister,
    set_size: ByteArraySetSize,
    /// A buffer of glib's, which `read` appends to (only vCPU 0 uses it).
    buf: *mut GArray,
    handles: Vec<(&'static str, *mut c_void)>,
}

// SAFETY: QEMU's handles and a buffer only the vCPU's callbacks touch, one at a time.
unsafe impl Send for Registers {}
// SAFETY: as above.
unsafe impl Sync for Registers {}

static REGISTERS: OnceLock<Registers> = OnceLock::new();

/// Where a callback reads an instruction's result: the instruction's index in its block
/// (`None`: it ended the block before the running one), its address, and the registers it
/// wrote.
struct Site {
    index: Option<u32>,
    ip: u64,
    regs: Vec<&'static str>,
}

/// The sites, by the number their callbacks carry.
static SITES: Mutex<Vec<Site>> = Mutex::new(Vec::new());

/// Results read on the vCPU, in the order of their marks in the ring: (site, values).
static READ: Mutex<VecDeque<(usize, Vec<u64>)>> = Mutex::new(VecDeque::new());

/// The fall-through addresses of blocks that end with such an instruction: a block starting
/// at one gets the reading callback.
static SUCCESSORS: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

/// The site (plus one; 0: none) of the block-ending instruction that just ran, and the
/// ring's entry count then (`ring::PUSHED`).
static ENDED: AtomicUsize = AtomicUsize::new(0);
static ENDED_PUSHED: AtomicU64 = AtomicU64::new(0);

/// vCPU 0 exists: finds the registers where QEMU lets plugins read them (API 2 and later).
pub fn vcpu_ready() {
    let find = |name: &CStr| crate::versioned::lookup(name);
    let (get, read, new, set_size) = (
        find(c"qemu_plugin_get_registers"),
        find(c"qemu_plugin_read_register"),
        find(c"g_byte_array_new"),
        find(c"g_byte_array_set_size"),
    );
    if [get, read, new, set_size].iter().any(|p| p.is_null()) || REGISTERS.get().is_some() {
        return;
    }
    // SAFETY: the signatures of qemu-plugin.h (API 2 and later) and glib; the descriptors
    // array is QEMU's, read (not freed: one small array for the process's life).
    unsafe {
        let get = std::mem::transmute::<*mut c_void, GetRegisters>(get);
        let array = get();
        if array.is_null() {
            return;
        }
        let descriptors = std::slice::from_raw_parts((*array).data.cast::<RegDescriptor>(), (*array).len as usize);
        let handles = descriptors
            .iter()
            .filter(|d| !d.name.is_null())
            .filter_map(|d| {
                let name = CStr::from_ptr(d.name).to_str().ok()?;
                let known = rtit_recorder::qemu::timestamps::GPRS.iter().find(|g| **g == name)?;
                Some((*known, d.handle))
            })
            .collect();
        let new = std::mem::transmute::<*mut c_void, ByteArrayNew>(new);
        let _ = REGISTERS.set(Registers {
            read: std::mem::transmute::<*mut c_void, ReadRegister>(read),
            set_size: std::mem::transmute::<*mut c_void, ByteArraySetSize>(set_size),
            buf: new(),
            handles,
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A new site's number.
fn site(index: Option<u32>, ip: u64, regs: Vec<&'static str>) -> usize {
    let mut sites = lock(&SITES);
    sites.push(Site { index, ip, regs });
    sites.len() - 1
}

/// At translation: the callbacks that read what each RDTSC, RDTSCP or RDPID of the block's
/// first `kept` instructions wrote (`insns`: handle, address, bytes), and the reading
/// callback at the block's start if it is one's fall-through.
///
/// # Safety
/// During a translation callback, with handles of its block.
pub unsafe fn instrument(insns: &[(*mut Insn, u64, &[u8])], kept: usize) {
    if REGISTERS.get().is_none() || kept == 0 {
        return;
    }
    if let Some((first, start, _)) = insns.first() {
        if lock(&SUCCESSORS).as_ref().is_some_and(|s| s.contains(start)) {
            ffi::qemu_plugin_register_vcpu_insn_exec_cb(*first, after_block, CB_R_REGS, std::ptr::null_mut());
        }
    }
    for (index, (insn, ip, bytes)) in insns.iter().enumerate().take(kept) {
        let Some(regs) = rtit_recorder::qemu::timestamps::unknowable_outputs(bytes) else {
            continue;
        };
        if index + 1 < kept {
            let site = site(Some(index as u32), *ip, regs);
            ffi::qemu_plugin_register_vcpu_insn_exec_cb(insns[index + 1].0, after, CB_R_REGS, site as *mut c_void);
        } else {
            let site = site(None, *ip, regs);
            lock(&SUCCESSORS)
                .get_or_insert_with(HashSet::new)
                .insert(ip + bytes.len() as u64);
            ffi::qemu_plugin_register_vcpu_insn_exec_cb(*insn, ending, ffi::CB_NO_REGS, site as *mut c_void);
        }
    }
}

/// Before a block-ending RDTSC, RDTSCP or RDPID (site `userdata`) runs: notes it for the
/// block at its fall-through.
extern "C" fn ending(_vcpu: c_uint, userdata: *mut c_void) {
    ENDED_PUSHED.store(crate::ring::PUSHED.load(Ordering::Relaxed), Ordering::Relaxed);
    ENDED.store(userdata as usize + 1, Ordering::Relaxed);
}

/// At the first instruction of a block at such an instruction's fall-through: reads what it
/// wrote if that block came right after it.
extern "C" fn after_block(_vcpu: c_uint, _userdata: *mut c_void) {
    let Some(site) = ENDED.swap(0, Ordering::Relaxed).checked_sub(1) else {
        return;
    };
    // This block's entry alone since: nothing ran between.
    if crate::ring::PUSHED.load(Ordering::Relaxed) != ENDED_PUSHED.load(Ordering::Relaxed) + 1 {
        return;
    }
    read(site);
}

/// Before the instruction after site `userdata`'s, in its block: reads what it wrote.
extern "C" fn after(_vcpu: c_uint, userdata: *mut c_void) {
    read(userdata as usize);
}

/// Reads what site `site`'s instruction wrote, queues it and marks the place in the ring.
fn read(site: usize) {
    // Only where the block went into the ring: the engine places the mark behind it.
    if crate::published::GATE.load(Ordering::Relaxed) != 0 {
        return;
    }
    let Some(r) = REGISTERS.get() else { return };
    let Some(regs) = lock(&SITES).get(site).map(|s| s.regs.clone()) else {
        return;
    };
    let mut values = Vec::with_capacity(regs.len());
    for name in regs {
        let Some((_, handle)) = r.handles.iter().find(|(n, _)| *n == name) else {
            return;
        };
        // SAFETY: QEMU's register handle and glib buffer, in a callback registered to read
        // registers, on the vCPU.
        let value = unsafe {
            (r.set_size)(r.buf, 0);
            let n = (r.read)(*handle, r.buf);
            if n != 8 || (*r.buf).len != 8 {
                return;
            }
            u64::from_le_bytes(
                std::slice::from_raw_parts((*r.buf).data, 8)
                    .try_into()
                    .unwrap_or_default(),
            )
        };
        values.push(value);
    }
    lock(&READ).push_back((site, values));
    crate::mark_result();
}

/// The engine reached a result's mark; `base` is the running block's base position (`None`:
/// not tracing). The result as the recording logs it, if it has a place.
pub fn settle(base: Option<u64>) -> Option<rtit_replay_core::recording::InsnResult> {
    let (site, values) = lock(&READ).pop_front()?;
    let sites = lock(&SITES);
    let s = sites.get(site)?;
    let position = match s.index {
        Some(i) => base? + u64::from(i),
        None => base?.checked_sub(1)?,
    };
    Some(rtit_replay_core::recording::InsnResult {
        position,
        ip: s.ip,
        after: s
            .regs
            .iter()
            .zip(values)
            .map(|(name, v)| (name.to_string(), format!("{v:#x}")))
            .collect(),
    })
}

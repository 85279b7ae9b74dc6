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
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::ffi::{self, Insn};

/// `QEMU_PLUGIN_CB_R_REGS`.
const CB_R_REGS: c_int = 1;

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
    if !crate::registers::available() || kept == 0 {
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
    let Some(regs) = lock(&SITES).get(site).map(|s| s.regs.clone()) else {
        return;
    };
    let mut values = Vec::with_capacity(regs.len());
    for name in regs {
        let Some(value) = crate::registers::value(name) else {
            return;
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

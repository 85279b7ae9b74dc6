//! The guest's registers as QEMU 9.0 and later (plugin API 2) let a callback read them
//! (`qemu_plugin_read_register`), by the names of QEMU's gdb register description: what
//! RDTSC and its kind wrote (`timestamps`), and a thread's registers where it stops running
//! (`threads`). QEMU 7.2's API reads none.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::{c_char, c_uint, c_void, CStr};
use std::sync::OnceLock;

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
type ReadRegister = unsafe extern "C" fn(handle: *mut c_void, buf: *mut GArray) -> i32;
type ByteArrayNew = unsafe extern "C" fn() -> *mut GArray;
type ByteArraySetSize = unsafe extern "C" fn(array: *mut GArray, len: c_uint) -> *mut GArray;

/// The calls and every register's handle, once vCPU 0 exists.
struct Registers {
    read: ReadRegister,
    set_size: ByteArraySetSize,
    /// A buffer of glib's, which `read` appends to, behind its lock: a new thread reads its
    /// registers before it waits for its turn, beside the thread that runs (`threads`).
    buf: std::sync::Mutex<*mut GArray>,
    handles: Vec<(String, *mut c_void)>,
}

// SAFETY: QEMU's handles (register numbers, the same on every vCPU) and a buffer only the
// vCPU that runs touches.
unsafe impl Send for Registers {}
// SAFETY: as above.
unsafe impl Sync for Registers {}

static REGISTERS: OnceLock<Registers> = OnceLock::new();

/// The registers a thread's state is logged with where it stops running, as the recording's
/// register maps name them (the step backend's set: general, flags, segments and their
/// bases, the SSE registers).
pub const STATE: [&str; 43] = [
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
    "rip", "eflags", "cs", "ss", "ds", "es", "fs", "gs", "fs_base", "gs_base", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4",
    "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "mxcsr",
];

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
            .filter_map(|d| Some((CStr::from_ptr(d.name).to_str().ok()?.to_string(), d.handle)))
            .collect();
        let new = std::mem::transmute::<*mut c_void, ByteArrayNew>(new);
        let _ = REGISTERS.set(Registers {
            read: std::mem::transmute::<*mut c_void, ReadRegister>(read),
            set_size: std::mem::transmute::<*mut c_void, ByteArraySetSize>(set_size),
            buf: std::sync::Mutex::new(new()),
            handles,
        });
    }
}

/// Whether this QEMU lets the plugin read registers.
pub fn available() -> bool {
    REGISTERS.get().is_some()
}

/// Register `name`'s bytes (little-endian), on a vCPU's thread in a callback QEMU lets read
/// registers; `None` where QEMU has no such register or refuses.
pub fn bytes(name: &str) -> Option<Vec<u8>> {
    let r = REGISTERS.get()?;
    let (_, handle) = r.handles.iter().find(|(n, _)| n == name)?;
    // SAFETY: QEMU's register handle and glib buffer, on the vCPU, which QEMU reads for the
    // current vCPU.
    unsafe {
        let guard = r.buf.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let buf = *guard;
        (r.set_size)(buf, 0);
        let n = (r.read)(*handle, buf);
        if n <= 0 || (*buf).len as i32 != n {
            return None;
        }
        Some(std::slice::from_raw_parts((*buf).data, n as usize).to_vec())
    }
}

/// Register `name` as a number, if it has eight bytes.
pub fn value(name: &str) -> Option<u64> {
    bytes(name)?.try_into().ok().map(u64::from_le_bytes)
}

/// The registers of [`STATE`] as a callback inside QEMU's execution loop reads them (a
/// block's start): there QEMU keeps the status flags and DF apart from its `eflags` word
/// (computed lazily from the last operation; `cpu_exec_enter` clears them in the word, and
/// `cpu_exec_exit` puts them back), and the plugin API reads the word only, so those bits
/// are marked unknown (`eflags_known`). A system call's callbacks and a vCPU's start run
/// outside the loop, where the word is whole ([`state`]).
pub fn state_in_loop() -> BTreeMap<String, String> {
    use rtit_replay_core::state::flags::{ALL, DF, KNOWN_NAME, STATUS};
    let mut registers = state();
    if registers.contains_key("eflags") {
        // DF is clear, and the word says so, where nothing could set it (`direction`).
        let unknown = if crate::direction::clear() { STATUS } else { STATUS | DF };
        registers.insert(KNOWN_NAME.into(), format!("{:#x}", ALL & !unknown));
    }
    registers
}

/// The registers of [`STATE`] QEMU gives, as hex numbers by name.
pub fn state() -> BTreeMap<String, String> {
    STATE
        .iter()
        .filter_map(|name| {
            let b = bytes(name)?;
            let v = b.iter().rev().fold(0u128, |v, &byte| v << 8 | u128::from(byte));
            (b.len() <= 16).then(|| (name.to_string(), format!("{v:#x}")))
        })
        .collect()
}

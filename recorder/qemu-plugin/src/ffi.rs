//! The part of QEMU's plugin API that the plugin uses and that every QEMU from 7.2 (plugin
//! API version 1) to 10.x (version 4) exports with the same signature, declared by hand from
//! `qemu-plugin.h`: raw FFI keeps the per-block callback to one indirect call. What differs
//! between versions is looked up when the library loads (`versioned`).
#![allow(unsafe_code, missing_docs)]

use std::ffi::{c_char, c_int, c_uint, c_void};

pub type PluginId = u64;

/// `qemu_info_t` (only the leading fields the plugin reads).
#[repr(C)]
pub struct QemuInfo {
    pub target_name: *const c_char,
    pub version_min: c_int,
    pub version_cur: c_int,
    pub system_emulation: bool,
}

#[repr(C)]
pub struct Tb {
    _opaque: [u8; 0],
}

#[repr(C)]
pub struct Insn {
    _opaque: [u8; 0],
}

/// `enum qemu_plugin_cb_flags`.
pub const CB_NO_REGS: c_int = 0;
/// `enum qemu_plugin_op`.
pub const INLINE_ADD_U64: c_int = 0;

pub type TbTransCb = extern "C" fn(id: PluginId, tb: *mut Tb);
pub type VcpuSimpleCb = extern "C" fn(id: PluginId, vcpu: c_uint);
pub type VcpuUdataCb = extern "C" fn(vcpu: c_uint, userdata: *mut c_void);
pub type UdataCb = extern "C" fn(id: PluginId, userdata: *mut c_void);
pub type SyscallCb = extern "C" fn(
    id: PluginId,
    vcpu: c_uint,
    num: i64,
    a1: u64,
    a2: u64,
    a3: u64,
    a4: u64,
    a5: u64,
    a6: u64,
    a7: u64,
    a8: u64,
);
pub type SyscallRetCb = extern "C" fn(id: PluginId, vcpu: c_uint, num: i64, ret: i64);

extern "C" {
    pub fn qemu_plugin_register_vcpu_init_cb(id: PluginId, cb: VcpuSimpleCb);
    pub fn qemu_plugin_register_vcpu_tb_trans_cb(id: PluginId, cb: TbTransCb);
    pub fn qemu_plugin_register_vcpu_insn_exec_cb(
        insn: *mut Insn,
        cb: VcpuUdataCb,
        flags: c_int,
        userdata: *mut c_void,
    );
    pub fn qemu_plugin_register_vcpu_tb_exec_cb(tb: *mut Tb, cb: VcpuUdataCb, flags: c_int, userdata: *mut c_void);
    pub fn qemu_plugin_register_vcpu_syscall_cb(id: PluginId, cb: SyscallCb);
    pub fn qemu_plugin_register_vcpu_syscall_ret_cb(id: PluginId, cb: SyscallRetCb);
    pub fn qemu_plugin_register_atexit_cb(id: PluginId, cb: UdataCb, userdata: *mut c_void);
    pub fn qemu_plugin_tb_n_insns(tb: *const Tb) -> usize;
    pub fn qemu_plugin_tb_vaddr(tb: *const Tb) -> u64;
    pub fn qemu_plugin_tb_get_insn(tb: *const Tb, idx: usize) -> *mut Insn;
    pub fn qemu_plugin_insn_size(insn: *const Insn) -> usize;
    pub fn qemu_plugin_insn_vaddr(insn: *const Insn) -> u64;
    pub fn qemu_plugin_outs(string: *const c_char);
}

/// Prints a line of the plugin's on QEMU's log (stderr unless `-D`).
pub fn say(text: &str) {
    if let Ok(s) = std::ffi::CString::new(format!("rtit plugin: {text}\n")) {
        // SAFETY: a NUL-terminated string that outlives the call.
        unsafe { qemu_plugin_outs(s.as_ptr()) }
    }
}

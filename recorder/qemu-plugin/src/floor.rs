//! The floor of QEMU 7.2's plugin API for what rtit records (issue 20): QEMU running the
//! program with an empty callback at every executed block, and nothing else. Learning the
//! order in which blocks run takes a call per block on this API (an inline operation only
//! adds a constant to one fixed address, so it cannot note which block ran), and a recording
//! does that and more, so none through this API can be faster than this.
//! `cargo bench --bench qemu_record` measures it beside plain QEMU and the recording. Chosen
//! by the plugin argument [`ARG`] alone; nothing is recorded.

use std::ffi::{c_uint, c_void};

use crate::ffi::{self, PluginId, Tb};

/// The plugin argument that asks for the floor.
pub const ARG: &str = "floor=on";

extern "C" fn nothing(_vcpu: c_uint, _userdata: *mut c_void) {}

extern "C" fn translated(_id: PluginId, tb: *mut Tb) {
    // SAFETY: `tb` is valid during the translation callback that hands it over.
    unsafe { ffi::qemu_plugin_register_vcpu_tb_exec_cb(tb, nothing, ffi::CB_NO_REGS, std::ptr::null_mut()) }
}

/// Registers the empty callback at every block QEMU translates.
pub fn install(id: PluginId) {
    // SAFETY: a plain registration with QEMU during install.
    unsafe { ffi::qemu_plugin_register_vcpu_tb_trans_cb(id, translated) }
}

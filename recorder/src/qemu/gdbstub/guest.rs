//! QEMU's memory as the recorder reads it (`process_vm_readv`): QEMU user mode keeps the
//! program's memory at the program's own addresses, and the plugin publishes where its
//! position counters are (`counters.json`).

use std::io::IoSliceMut;

use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;

use crate::qemu::report::Counters;

/// Reads `len` bytes of QEMU's memory at `at` (QEMU user mode keeps the program's memory at
/// its own addresses); fewer where it cannot.
pub(super) fn read(pid: Pid, at: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let remote = [RemoteIoVec {
            base: at as usize + done,
            len: len - done,
        }];
        match process_vm_readv(pid, &mut [IoSliceMut::new(&mut buf[done..])], &remote) {
            Ok(n) if n > 0 => done += n,
            _ => break,
        }
    }
    buf.truncate(done);
    buf
}

/// The position of the instruction the program stopped before: the running block's base
/// plus its started instructions (the stop is between blocks). `None` while not tracing.
pub(super) fn position(pid: Pid, counters: Counters) -> Option<u64> {
    let mut base = [0u8; 8];
    let mut started = [0u8; 8];
    let remote = [
        RemoteIoVec {
            base: counters.position as usize,
            len: 8,
        },
        RemoteIoVec {
            base: counters.started as usize,
            len: 8,
        },
    ];
    let mut local = [IoSliceMut::new(&mut base), IoSliceMut::new(&mut started)];
    let n = process_vm_readv(pid, &mut local, &remote).ok()?;
    if n != 16 {
        return None;
    }
    let base = u64::from_le_bytes(base);
    (base != u64::MAX).then(|| base.wrapping_add(u64::from_le_bytes(started)))
}

//! Sideband of a step recording read through ptrace: the vDSO's bytes, memory snapshots and
//! symbol addresses for `--start`.

use rtit_replay_core::recording::Mapping;

use super::tracee::Tracee;
use super::StepError;
use crate::sideband::{snapshot_with, Images, Snapshot};

/// The images of the map at the start, with the vDSO read from memory.
pub fn images_from_maps(tracee: &Tracee, maps: &[Mapping]) -> Images {
    let mut images = Images::default();
    images.note(maps);
    if let Some(m) = maps.iter().find(|m| m.path.as_deref() == Some("[vdso]")) {
        let mut bytes = vec![0u8; (m.end - m.start) as usize];
        let n = tracee.read(m.start, &mut bytes);
        bytes.truncate(n);
        images.set_vdso(m.start, bytes);
    }
    images
}

/// The writable memory of the tracee (see [`snapshot_with`]).
pub fn snapshot(tracee: &Tracee, maps: &[Mapping]) -> Snapshot {
    snapshot_with(maps, |addr, buf| tracee.read(addr, buf))
}

/// The run-time address of a symbol of the traced executable.
pub fn symbol_address(tracee: &Tracee, name: &str) -> Result<u64, StepError> {
    let problem = |problem: String| StepError::Start {
        at: name.to_string(),
        problem,
    };
    let exe = std::fs::read_link(format!("/proc/{}/exe", tracee.pid))
        .map_err(|e| problem(format!("cannot find the executable: {e}")))?;
    let bytes = std::fs::read(&exe).map_err(|e| problem(format!("cannot read {}: {e}", exe.display())))?;
    let exe_name = exe.display().to_string();
    let (address, relocated) =
        rtit_replay_core::image::defined_symbol(&exe_name, &bytes, name).map_err(|e| problem(e.to_string()))?;
    let bias = if relocated {
        let load = tracee
            .maps()?
            .iter()
            .filter(|m| m.path.as_deref() == Some(&exe_name) && m.offset == 0)
            .map(|m| m.start)
            .min()
            .ok_or_else(|| problem(format!("{exe_name} is not mapped")))?;
        load - rtit_replay_core::image::lowest_vaddr(&exe_name, &bytes).map_err(|e| problem(e.to_string()))?
    } else {
        0
    };
    Ok(address + bias)
}

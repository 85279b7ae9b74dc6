//! The files the plugin appends to while the program runs: the trace, the truth (`--truth`),
//! the code each stretch ran and where a decode can start exactly. A write that fails is noted in the report, not fatal: the
//! program runs on, and `rtit record` tells the user what is missing.

use std::fs::File;
use std::io::Write;

use rtit_recorder::qemu::engine::Engine;
use rtit_recorder::qemu::report::files;
use rtit_replay_core::recording::truth;

/// The open output files.
pub(super) struct Outputs {
    trace: File,
    /// `truth.bin` and where its compact form is (see `recording::truth`).
    truth: Option<(File, truth::Encoder)>,
    /// Which code each stretch of the history ran (`code-ran.bin`).
    code: File,
    /// Where a decode can start exactly (`sync-points.bin`).
    sync: File,
}

impl Outputs {
    /// Creates the files with `create` (the truth only when asked for, its magic written).
    pub(super) fn create(with_truth: bool, create: impl Fn(&str) -> Result<File, String>) -> Result<Self, String> {
        let trace = create(files::TRACE)?;
        let truth = match with_truth {
            true => {
                let mut f = create(files::TRUTH)?;
                f.write_all(truth::MAGIC)
                    .map_err(|e| format!("{}: {e}", files::TRUTH))?;
                Some((f, truth::Encoder::default()))
            }
            false => None,
        };
        let code = create(files::CODE_RAN)?;
        let sync = create(files::SYNC_POINTS)?;
        Ok(Self {
            trace,
            truth,
            code,
            sync,
        })
    }

    /// Appends the trace, the truth and the stretches of code `engine` produced since the
    /// last call (with `end`, the last stretch of code too); a failed write goes to `notes`.
    pub(super) fn append(&mut self, engine: &mut Engine, end: bool, notes: &mut Vec<String>) {
        let code = engine.take_code(end);
        if let Err(e) = self.code.write_all(&code) {
            notes.push(format!("{}: {e}", files::CODE_RAN));
        }
        let trace = engine.take_trace();
        if !trace.is_empty() {
            if let Err(e) = self.trace.write_all(&trace) {
                notes.push(format!("{}: {e}", files::TRACE));
            }
        }
        // After the trace: a point's offset is never past the bytes written.
        let sync = engine.take_sync();
        if let Err(e) = self.sync.write_all(&sync) {
            notes.push(format!("{}: {e}", files::SYNC_POINTS));
        }
        if let Some((f, encoder)) = &mut self.truth {
            let ips = engine.take_truth();
            let mut bytes = Vec::new();
            encoder.push(&ips, &mut bytes);
            if let Err(e) = f.write_all(&bytes) {
                notes.push(format!("{}: {e}", files::TRUTH));
            }
        }
    }
}

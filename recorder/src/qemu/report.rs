//! What passes between `rtit record` and the plugin: the plugin's arguments (QEMU hands them
//! over as `key=value` strings) and the report it leaves next to the trace when the program
//! ends.

use rtit_replay_core::recording::{Maps, MemoryRegion};

use super::engine::Stats;
use crate::outcome::RegisterMap;

/// Files the plugin writes into its output directory.
pub mod files {
    /// The packets.
    pub const TRACE: &str = "trace.rtit";
    /// Every traced instruction's address (u64 little-endian each), with `truth`.
    pub const TRUTH: &str = "truth.bin";
    /// Writable memory when tracing started.
    pub const MEMORY_START: &str = "memory-start.bin";
    /// Writable memory at the end.
    pub const MEMORY_END: &str = "memory-end.bin";
    /// The [`super::Report`].
    pub const REPORT: &str = "report.json";
    /// The system calls, one JSON record a line as the recording holds them: the plugin
    /// writes them, and `rtit record` moves the file into the recording (issue 20: parsed
    /// out of the report and written again, gzip's 17 MB of them cost the recording ~40 ms).
    pub const SYSCALLS: &str = "syscalls.jsonl";
    /// What RDTSC, RDTSCP and RDPID returned, where the plugin read it (QEMU 9.0 and later,
    /// `crate::qemu::timestamps`), one JSON record a line as the recording holds them.
    pub const RESULTS: &str = rtit_replay_core::recording::files::RESULTS;
    /// Which code each stretch of the history ran: the plugin writes it, and `rtit record`
    /// moves it into the recording.
    pub const CODE_RAN: &str = rtit_replay_core::recording::files::CODE_RAN;
    /// Where a decode can start exactly.
    pub const SYNC_POINTS: &str = rtit_replay_core::recording::files::SYNC_POINTS;
    /// The [`super::Counters`], with `truth`.
    pub const COUNTERS: &str = "counters.json";
    /// The program's memory map at its first instruction, as QEMU's gdbstub shows the
    /// program its own `/proc/self/maps` (QEMU 8.1 and later), written by `rtit record`
    /// before the program starts: the plugin takes it over the host's map, in which QEMU 9
    /// and later interleave the program's mappings with their own.
    pub const GUEST_MAPS: &str = "guest-maps.txt";
    /// The bytes of the program's vDSO (`Report::vdso`).
    pub const VDSO: &str = "vdso.bin";
}

/// Where, in QEMU's process, the plugin keeps what `rtit record` reads while the program is
/// stopped in QEMU's gdbstub (see `crate::qemu::gdbstub`): the position before the running
/// block (`u64::MAX` while not tracing), the started-instruction counts that say how many of
/// that block's instructions started, the counts that say whether the position is up to
/// date (`u64`s), and the handler of each signal (65 `u64`s, 0 default, 1 ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    /// The address of the position.
    pub position: u64,
    /// The address of the count of started instructions (since QEMU started, or, from a
    /// plugin without `started_base`, in the running block). A plugin with `pending_start`
    /// counts a block at once before its last instruction: 0 for a block cut short.
    pub started: u64,
    /// The address of a word holding the address of the started count, where that moves
    /// (a plugin on QEMU 9 or later counts in QEMU's per-vCPU scoreboard, which exists once
    /// the program starts; 0 before): read instead of `started` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_via: Option<u64>,
    /// The address of the started count when the running block started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_base: Option<u64>,
    /// The addresses of the counts of blocks the vCPU noted and the engine took: the
    /// position is up to date when they are equal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pushed: Option<u64>,
    /// See `pushed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken: Option<u64>,
    /// The address of the table of signal handlers.
    pub handlers: u64,
    /// The address of the three words where `rtit record` writes a signal delivery it saw at
    /// a handler's entry: the handler, where the interrupted code resumes, and the signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered: Option<u64>,
    /// The address of the start of the block the engine has pending (a plugin that counts
    /// a block at once has it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_start: Option<u64>,
    /// The address of the word where `rtit record` writes where the program was at a signal
    /// that goes to no handler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faulted: Option<u64>,
    /// The address of the word that says whether the pages the program writes are tracked
    /// (`crate::qemu::written`: 0 not yet or not at all, 1 yes, 2 no longer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracking: Option<u64>,
    /// Threads waiting for their turn inside QEMU's execution loop (a count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inside: Option<u64>,
    /// Where rtit says it is about to stop the program (no thread is interrupted then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<u64>,
    /// The id of the thread of the program whose turn it is (0: none, or no threads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<u64>,
    /// Where rtit asks the running thread to park for an anchor (a word).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub park: Option<u64>,
    /// Where the plugin says the thread parked (a word).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked: Option<u64>,
    /// The parked thread's position and its registers' text length (two words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked_at: Option<u64>,
    /// The parked thread's registers, as JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked_registers: Option<u64>,
    /// The table of the threads inside a system call, by vCPU index (`in_call_slots` words:
    /// a thread's id, 0 for none): rtit signals no thread that is inside one
    /// (`crate::qemu::gdbstub::guest::signal_outside_calls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_call: Option<u64>,
    /// See `in_call`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_call_slots: Option<u64>,
    /// The count of threads inside a system call beyond the table `in_call`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crowded: Option<u64>,
    /// Where rtit names the thread it is about to signal (a word; the top bit once sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signalling: Option<u64>,
}

/// The lowest descriptor number the plugin keeps open (its output files, and the pipe on
/// which `rtit record` asks it to stop), far above the program's: the program's descriptors
/// are numbered as they would be without the plugin.
pub const HIGH_FD: i32 = 1000;

/// A bad plugin argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rtit plugin argument {arg:?}: {problem}")]
pub struct ArgError {
    /// The argument.
    pub arg: String,
    /// What is wrong.
    pub problem: String,
}

/// The plugin's arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Args {
    /// Output directory (`out=`).
    pub out: String,
    /// RTIT_CTL, RTIT_EVENTS, RTIT_PKT_CNT, RTIT_CR3_MATCH (`ctl=`, `events=`, `pkt_cnt=`,
    /// `cr3=`, hex).
    pub ctl: u64,
    /// RTIT_EVENTS.
    pub events: u64,
    /// RTIT_PKT_CNT.
    pub pkt_cnt: u64,
    /// RTIT_CR3_MATCH.
    pub cr3: u64,
    /// RTIT_LIP0–3 (`lip0=` … `lip3=`).
    pub lip: [u64; 4],
    /// Where to start: a symbol of the executable or a hex address (`start=`).
    pub start: Option<String>,
    /// The program's path, which `start=SYMBOL` is looked up in (`exe=`, its bytes in hex:
    /// QEMU's option splits at commas). QEMU 7.2 tells plugins the path, QEMU 10 no longer
    /// exports that call to user-mode plugins.
    pub exe: Option<std::path::PathBuf>,
    /// Record the truth (`truth=on`).
    pub truth: bool,
    /// The program's argument count, to find its initial stack pointer (`argc=`).
    pub argc: u64,
    /// The read end of a pipe (`stop=FD`, decimal) on which `rtit record` writes the number of
    /// the signal it received when it wants the recording to end: QEMU passes rtit's signals
    /// on to no one, and the program may be blocked in a system call or ignore them.
    pub stop: Option<i32>,
    /// Check the fast path against the unit model one instruction at a time (`check=on`).
    pub check: bool,
    /// Track the pages the program writes, for the anchors `rtit record` takes
    /// (`anchors=on`; see `crate::qemu::written`).
    pub anchors: bool,
    /// The plugin library's own path (`plugin=`, hex), for starting QEMU again with it on
    /// the program an execve runs (`crate::qemu::relaunch`).
    pub plugin: Option<std::path::PathBuf>,
}

impl Args {
    /// Parses `key=value` strings.
    pub fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Self, ArgError> {
        let mut out = Self::default();
        for arg in args {
            let bad = |problem: &str| ArgError {
                arg: arg.to_string(),
                problem: problem.to_string(),
            };
            let (key, value) = arg.split_once('=').ok_or_else(|| bad("expected key=value"))?;
            let hex = || u64::from_str_radix(value.trim_start_matches("0x"), 16).map_err(|_| bad("not hex"));
            match key {
                "out" => out.out = value.to_string(),
                "ctl" => out.ctl = hex()?,
                "events" => out.events = hex()?,
                "pkt_cnt" => out.pkt_cnt = hex()?,
                "cr3" => out.cr3 = hex()?,
                "lip0" | "lip1" | "lip2" | "lip3" => out.lip[usize::from(key.as_bytes()[3] - b'0')] = hex()?,
                "start" => out.start = Some(value.to_string()),
                "exe" => out.exe = Some(unhex_path(value).ok_or_else(|| bad("not a path in hex"))?),
                "plugin" => out.plugin = Some(unhex_path(value).ok_or_else(|| bad("not a path in hex"))?),
                "truth" => out.truth = value == "on",
                "check" => out.check = value == "on",
                "anchors" => out.anchors = value == "on",
                "argc" => out.argc = value.parse().map_err(|_| bad("not a number"))?,
                "stop" => out.stop = Some(value.parse().map_err(|_| bad("not a descriptor number"))?),
                _ => return Err(bad("unknown key")),
            }
        }
        if out.out.is_empty() {
            return Err(ArgError {
                arg: String::new(),
                problem: "out=DIR is required".to_string(),
            });
        }
        Ok(out)
    }

    /// The arguments as QEMU's `-plugin` option takes them (after the library's path).
    pub fn to_option(&self) -> String {
        let mut s = format!(
            "out={},ctl={:x},events={:x},pkt_cnt={:x},cr3={:x},argc={}",
            self.out, self.ctl, self.events, self.pkt_cnt, self.cr3, self.argc
        );
        for (i, lip) in self.lip.iter().enumerate() {
            s.push_str(&format!(",lip{i}={lip:x}"));
        }
        if let Some(start) = &self.start {
            s.push_str(&format!(",start={start}"));
        }
        if let Some(exe) = &self.exe {
            s.push_str(&format!(",exe={}", hex_path(exe)));
        }
        if self.truth {
            s.push_str(",truth=on");
        }
        if let Some(fd) = self.stop {
            s.push_str(&format!(",stop={fd}"));
        }
        if self.check {
            s.push_str(",check=on");
        }
        if self.anchors {
            s.push_str(",anchors=on");
        }
        if let Some(plugin) = &self.plugin {
            s.push_str(&format!(",plugin={}", hex_path(plugin)));
        }
        s
    }
}

/// A path's bytes in hex, for a plugin option.
fn hex_path(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    super::hex::encode(path.as_os_str().as_bytes())
}

/// The path [`hex_path`] wrote.
fn unhex_path(hex: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    super::hex::decode(hex).map(|bytes| std::ffi::OsString::from_vec(bytes).into())
}

/// How the program ended, as the plugin saw it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PluginEnd {
    /// exit or exit_group with this status.
    Exited {
        /// The status.
        code: i32,
    },
    /// It ended without exiting: a fatal signal (QEMU's exit status names it).
    Died {
        /// The instruction that faulted, if it ended on a fault.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fault_ip: Option<u64>,
    },
    /// Recording stopped before something it cannot follow.
    Stopped {
        /// What.
        reason: String,
    },
    /// It called execve, which ran `program`: the plugin started QEMU again on it, recording
    /// into the directory `exec` inside this one (`crate::qemu::relaunch`).
    Exec {
        /// The file execve named (a script's path for a script).
        program: String,
        /// The program's file (a script's interpreter).
        file: String,
        /// Its command line.
        argv: Vec<String>,
        /// The symbol its recording starts at (`--start`, where it defines it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start: Option<String>,
    },
    /// `rtit record` asked the plugin to stop (it received this signal): the trace ends
    /// where the program was (between two blocks, or inside a system call).
    Interrupted {
        /// The signal's number.
        signal: i32,
    },
}

/// The plugin's report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    /// Instructions retired into the model.
    pub instructions: u64,
    /// Where tracing started; `None` if the start point never ran.
    pub start_ip: Option<u64>,
    /// The memory map when tracing started, and its changes.
    pub maps: Maps,
    /// The executable images: (path, load address).
    pub images: Vec<(String, u64)>,
    /// Where the program's vDSO was (QEMU 8.1 and later give it one of their own), its bytes
    /// in [`files::VDSO`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vdso: Option<u64>,
    /// Regions of `memory-start.bin`.
    pub memory_start: Vec<MemoryRegion>,
    /// Whether the start snapshot was cut short.
    pub memory_start_truncated: bool,
    /// Regions of `memory-end.bin`.
    pub memory_end: Vec<MemoryRegion>,
    /// Whether the end snapshot was cut short.
    pub memory_end_truncated: bool,
    /// Registers known when tracing started.
    pub registers_start: RegisterMap,
    /// Registers known at the end.
    pub registers_end: RegisterMap,
    /// How it ended.
    pub end: PluginEnd,
    /// What the retirement engine met.
    pub stats: Stats,
    /// Problems met along the way, for the user.
    #[serde(default)]
    pub notes: Vec<String>,
    /// The system calls while tracing: number, arguments, result and the memory written.
    #[serde(default)]
    pub syscalls: Vec<rtit_replay_core::syscall::SyscallRecord>,
    /// RTIT_TNT_BUFF when tracing stopped (absent if tracing never started).
    #[serde(default)]
    pub tnt_buff: Option<u64>,
    /// Processes the program created, which ran unrecorded.
    #[serde(default)]
    pub children: Vec<rtit_replay_core::recording::ChildProcess>,
    /// With `check=on`: what comparing the fast path with the unit model found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<super::engine::Checked>,
    /// The position of each signal handler's entry `rtit record` told the engine about, in
    /// the order it told them (`Engine::deliveries`).
    #[serde(default)]
    pub deliveries: Vec<Option<u64>>,
    /// The switches between the program's threads, and where the recording ends the
    /// registers of each thread that waits, as `signals.jsonl` entries (issue 43).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub switches: Vec<rtit_replay_core::recording::SignalEntry>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_round_trip_through_the_option_string() {
        let args = Args {
            out: "/tmp/x".into(),
            ctl: 0x2809,
            events: 0x10,
            pkt_cnt: 0x20000,
            cr3: 0x1000,
            lip: [1, 2, 3, 4],
            start: Some("main".into()),
            exe: Some("/a dir, with commas=/prog".into()),
            truth: true,
            argc: 3,
            stop: Some(1001),
            check: true,
            anchors: true,
            plugin: Some("/lib, with commas/plugin.so".into()),
        };
        let option = args.to_option();
        assert_eq!(Args::parse(option.split(',')), Ok(args));
        let err = Args::parse(["ctl=zz", "out=/x"]).expect_err("bad hex");
        assert!(err.to_string().contains("ctl=zz"), "{err}");
        assert!(Args::parse(["ctl=1"]).is_err(), "out is required");
        assert!(Args::parse(["out=/x", "stop=x"]).is_err(), "a descriptor is a number");
        assert!(Args::parse(["out=/x", "exe=2f6"]).is_err(), "a path is whole bytes");
        assert_eq!(
            Args::parse(["out=/x"]).map(|a| a.stop),
            Ok(None),
            "no pipe: nothing to wait on"
        );
    }
}

//! `rtit insns` and `rtit calls` end to end: a real ELF executable (assembled and linked by
//! gcc from tests/programs/nested.S), traced by the scripted CPU through the unit model, and
//! the commands' output compared with what ran.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use object::{Object, ObjectSymbol};
use rtit_recorder::model::{CpuState, ModelOptions, RtitConfig, UnitModel};
use rtit_recorder::script::{self, Plan};
use rtit_replay_core::image::{AddressSpace, Image};
use serde_json::Value;

const CR3: u64 = 0x4_2000;

struct Fixture {
    exe: PathBuf,
    trace: PathBuf,
    truth: Vec<u64>,
    symbols: HashMap<String, u64>,
}

fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("history_cli");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Builds the program, runs it through the scripted CPU and the unit model, writes the trace.
fn fixture(seed: u64) -> Fixture {
    let dir = scratch();
    let exe = dir.join(format!("nested-{seed}"));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/nested.S");
    let status = Command::new("gcc")
        .args(["-nostdlib", "-static", "-no-pie", "-Wl,--build-id=none", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc is needed to build the test program (`.ci/run` installs it)");
    assert!(status.success(), "gcc failed on {}", src.display());
    let bytes = std::fs::read(&exe).expect("built program");
    let file = object::File::parse(&*bytes).expect("an ELF file");
    let symbols: HashMap<String, u64> = file
        .symbols()
        .filter_map(|s| Some((s.name().ok()?.to_string(), s.address())))
        .collect();

    let mut space = AddressSpace::new();
    space.add(Image::load(&exe, 0).expect("load")).expect("add");
    let start = symbols["_start"];
    let mut model = UnitModel::new(CpuState::user(start, CR3), ModelOptions::default());
    model.program(&RtitConfig::user_process(CR3)).expect("config");
    let plan = Plan {
        seed,
        ..Plan::new(symbols["done"] + 7)
    };
    let truth = script::run(&space, start, &plan, &mut model).ips;
    let trace = dir.join(format!("nested-{seed}.rtit"));
    std::fs::write(&trace, model.take_output()).expect("write trace");
    Fixture {
        exe,
        trace,
        truth,
        symbols,
    }
}

fn rtit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rtit"))
        .args(args)
        .output()
        .expect("run rtit")
}

fn json_lines(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "rtit failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn insns_lists_exactly_the_executed_instructions() {
    for seed in [1, 2, 3] {
        let f = fixture(seed);
        let lines = json_lines(&rtit(&["insns", "--json", "--image", s(&f.exe), s(&f.trace)]));
        let insns: Vec<&Value> = lines.iter().filter(|l| l.get("i").is_some()).collect();
        let ips: Vec<u64> = insns
            .iter()
            .map(|l| u64::from_str_radix(l["ip"].as_str().expect("ip").trim_start_matches("0x"), 16).expect("hex"))
            .collect();
        assert_eq!(ips, f.truth, "seed {seed}");
        for (n, l) in insns.iter().enumerate() {
            assert_eq!(l["i"], n as u64);
        }
        assert_eq!(lines.first().map(|l| &l["event"]), Some(&Value::from("enabled")));
        assert_eq!(lines.last().map(|l| &l["event"]), Some(&Value::from("disabled")));
        // Symbols: the first instruction of inner, wherever it ran.
        let inner = format!("{:#x}", f.symbols["inner"]);
        let at_inner = insns.iter().find(|l| l["ip"] == inner.as_str()).expect("inner ran");
        assert_eq!(at_inner["sym"], "inner+0x0");
        assert_eq!(at_inner["insn"], "test rax,1");
    }
}

#[test]
fn insns_range_and_syntax() {
    let f = fixture(4);
    let lines = json_lines(&rtit(&[
        "insns",
        "--json",
        "--range",
        "3..7",
        "--image",
        s(&f.exe),
        s(&f.trace),
    ]));
    let positions: Vec<u64> = lines.iter().filter_map(|l| l["i"].as_u64()).collect();
    assert_eq!(positions, [3, 4, 5, 6]);

    let out = rtit(&[
        "insns",
        "--syntax",
        "att",
        "--range",
        "0..2",
        "--image",
        s(&f.exe),
        s(&f.trace),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("mov $3,%rcx"), "{text}");
    assert!(text.contains("_start+0x0"), "{text}");
}

#[test]
fn calls_shows_segments_by_depth() {
    let f = fixture(5);
    let segments = json_lines(&rtit(&["calls", "--json", "--image", s(&f.exe), s(&f.trace)]));
    let shape: Vec<(String, u64)> = segments
        .iter()
        .map(|s| {
            (
                s["function"].as_str().expect("name").to_string(),
                s["depth"].as_u64().expect("depth"),
            )
        })
        .collect();
    // _start calls outer three times (the loop runs 8 times: 7 taken back-edges); outer calls
    // inner each time.
    let once = [("outer", 1), ("inner", 2), ("outer", 1), ("_start", 0)];
    let mut want = vec![("_start".to_string(), 0)];
    for _ in 0..8 {
        want.extend(once.iter().map(|&(n, d)| (n.to_string(), d)));
    }
    want.push(("done".to_string(), 0));
    assert_eq!(shape, want);
    let total: u64 = segments.iter().map(|s| s["count"].as_u64().expect("count")).sum();
    assert_eq!(total, f.truth.len() as u64);
    for pair in segments.windows(2) {
        assert_eq!(
            pair[1]["first"].as_u64(),
            pair[0]["last"].as_u64().map(|l| l + 1),
            "contiguous"
        );
    }
    let out = rtit(&["calls", "--image", s(&f.exe), s(&f.trace)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.contains("    inner\tinst ")),
        "indented by depth:\n{text}"
    );
}

/// A stripped program: functions are told apart by their entries (the calls' targets), not
/// one line per instruction; `--range` cuts the history and keeps the depths.
#[test]
fn calls_groups_stripped_code_by_function_entry_and_takes_a_range() {
    let f = fixture(7);
    let stripped = f.exe.with_file_name("nested-7-stripped");
    let status = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&f.exe)
        .status()
        .expect("strip (binutils, with gcc)");
    assert!(status.success());
    let segments = json_lines(&rtit(&["calls", "--json", "--image", s(&stripped), s(&f.trace)]));
    let names: Vec<&str> = segments.iter().map(|s| s["function"].as_str().expect("name")).collect();
    let entry = |name: &str| format!("?? (nested-7-stripped+{:#x})", f.symbols[name] - 0x400000);
    let (outer, inner) = (entry("outer"), entry("inner"));
    // As with symbols, but the tail jump to `done` stays in _start's segment.
    assert_eq!(names.len(), 1 + 8 * 4, "{names:?}");
    for (i, name) in names.iter().enumerate().skip(1) {
        let want = match (i - 1) % 4 {
            0 | 2 => &outer,
            1 => &inner,
            _ => &names[0].to_string(),
        };
        assert_eq!(name, want, "segment {i}: {names:?}");
    }
    let total: u64 = segments.iter().map(|s| s["count"].as_u64().expect("count")).sum();
    assert_eq!(total, f.truth.len() as u64);
    // A range: only its positions, each counted once, depths those of the whole history.
    let ranged = json_lines(&rtit(&[
        "calls",
        "--json",
        "--range",
        "27..60",
        "--image",
        s(&f.exe),
        s(&f.trace),
    ]));
    let counted: u64 = ranged.iter().map(|s| s["count"].as_u64().expect("count")).sum();
    assert_eq!(counted, 33);
    assert_eq!(ranged[0]["first"].as_u64(), Some(27));
    assert_eq!(ranged.last().and_then(|s| s["last"].as_u64()), Some(59));
    assert!(
        ranged.iter().any(|s| s["function"] == "inner" && s["depth"] == 2),
        "{ranged:?}"
    );
}

#[test]
fn missing_code_and_bad_arguments_are_clear_errors() {
    let f = fixture(6);
    let out = rtit(&["insns", s(&f.trace)]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--image"));
    let out = rtit(&["insns", "--image", &format!("{}@zz", s(&f.exe)), s(&f.trace)]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("`zz` is not a hexadecimal address"));
    // The wrong image: the decoder reports where the code is missing.
    let lines = json_lines(&rtit(&[
        "insns",
        "--json",
        "--raw",
        &format!("{}@0x900000", s(&f.exe)),
        s(&f.trace),
    ]));
    let error = lines.iter().find(|l| l["event"] == "error").expect("an error line");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("no image holds address")),
        "{error}"
    );
}

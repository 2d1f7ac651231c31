//! The eBPF trigger on live processes: exact hit counts, every-Nth sampling with the captured
//! arguments, symbol forms (demangled, mangled, PIE, non-PIE, shared library), cgroup scope,
//! and a 16-thread storm. Every test checks that the fixture runs on, untouched.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use oi_e2e::{
    Fixture, FixtureBuild, OiTrace, SIGINT, SIGUSR1, TempDir, TestCgroup, json, privileged,
    run_oi_trace,
};
use serde_json::Value;

const CALLS: u64 = 1000;
const SECOND: Duration = Duration::from_secs(1);

fn trigger(variant: &str, flags: &[&str]) -> PathBuf {
    FixtureBuild::new("trigger")
        .variant(variant, flags)
        .shared_lib("trigger_lib")
        .build()
}

fn summary(path: &Path) -> Value {
    json(&std::fs::read_to_string(path).expect("summary file"))
}

fn sample_log(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("sample log")
        .lines()
        .map(json)
        .collect()
}

/// What the fixture prints after N calls in `mode`: its own checksum of the return values.
fn expected_done(mode: &str) -> String {
    let sum = match mode {
        "loop" => CALLS * (CALLS + 1),
        "method" => CALLS * (CALLS + 1) / 2,
        _ => 3 * CALLS * (CALLS + 1) / 2,
    };
    format!("done {CALLS} {sum}")
}

/// Runs `mode` with `--every 100 --count 10` on `symbol`; checks the ten samples' hit numbers
/// and that the argument register `arg_reg` held the hit number at each sampled entry.
fn ten_samples(binary: &Path, mode: &str, symbol: &str, arg_reg: &str) {
    let dir = TempDir::new("every");
    let log = dir.file("samples.jsonl");
    let sum = dir.file("summary.json");
    let mut fixture = Fixture::start(binary, &[mode, &CALLS.to_string()]);
    let pid = fixture.pid.to_string();
    let tracer = OiTrace::attached(&[
        "--pid",
        &pid,
        "--uprobe",
        symbol,
        "--every",
        "100",
        "--count",
        "10",
        "--sample-log",
        log.to_str().unwrap(),
        "--summary",
        sum.to_str().unwrap(),
        "-v",
    ]);
    fixture.signal(SIGUSR1);
    let done = fixture.stdout.expect("done", 30 * SECOND);
    let out = tracer.finish(30 * SECOND);
    assert!(out.status.success(), "oi-trace failed: {out:#?}");
    let samples = sample_log(&log);
    let hits: Vec<u64> = samples.iter().map(|s| s["hit"].as_u64().unwrap()).collect();
    assert_eq!(hits, (1..=10).map(|k| k * 100).collect::<Vec<_>>());
    for s in &samples {
        assert_eq!(
            s["regs"][arg_reg], s["hit"],
            "captured argument of sample {s}"
        );
        assert_eq!(s["pid"].as_i64(), Some(fixture.pid as i64));
        // The stub's own timing of the walk lies inside the tracer's timing of the sample.
        let in_target = s["in_target_ns"].as_u64().expect("in-target walk time");
        let walk_us = s["walk_us"].as_u64().unwrap();
        assert!(
            in_target > 0 && in_target <= (walk_us + 1) * 1000,
            "in-target walk {in_target} ns outside the sample's {walk_us} µs"
        );
    }
    // -v: per sample, its walk and pause, then its decoding and printing.
    for hit in &hits {
        let said = |what: &str| {
            let head = format!("oi-trace: sample {hit} of pid {pid}: {what} ");
            out.stderr.iter().filter(|l| l.starts_with(&head)).count()
        };
        assert_eq!(said("walk in the target"), 1, "{:#?}", out.stderr);
        assert_eq!(said("decoded and printed in"), 1, "{:#?}", out.stderr);
    }
    assert_eq!(summary(&sum)[0]["sampled"], 10);
    // The fixture's own arithmetic proves every call ran and returned normally.
    assert_eq!(done, expected_done(mode));
    fixture.assert_running();
    assert!(fixture.finish().success());
}

#[test]
fn count_only_counts_every_hit_exactly() {
    if !privileged() {
        return;
    }
    let dir = TempDir::new("count");
    let sum = dir.file("summary.json");
    let mut fixture = Fixture::start(&trigger("trigger", &[]), &["loop", &CALLS.to_string()]);
    let pid = fixture.pid.to_string();
    let tracer = OiTrace::attached(&[
        "--pid",
        &pid,
        "--uprobe",
        "shop::record",
        "--count-only",
        "--summary",
        sum.to_str().unwrap(),
    ]);
    fixture.signal(SIGUSR1);
    assert_eq!(
        fixture.stdout.expect("done", 30 * SECOND),
        expected_done("loop")
    );
    tracer.signal(SIGINT);
    let out = tracer.finish(30 * SECOND);
    assert!(out.status.success(), "{out:#?}");
    let sum = summary(&sum);
    assert_eq!(sum[0]["probe"], "shop::record");
    assert_eq!(sum[0]["hits"], CALLS);
    assert_eq!(sum[0]["sampled"], 0);
    let line = format!("oi-trace: shop::record: {CALLS} hits, 0 sampled, 0 dropped, 0 filtered");
    assert!(out.stderr.contains(&line), "{out:#?}");
    fixture.assert_running();
    assert!(fixture.finish().success());
}

#[test]
fn every_100th_hit_is_sampled_with_its_argument() {
    if !privileged() {
        return;
    }
    ten_samples(&trigger("trigger", &[]), "loop", "shop::record", "rdi");
}

#[test]
fn demangled_method_name_on_pie() {
    if !privileged() {
        return;
    }
    // rdi is `this`, the first declared argument arrives in rsi.
    ten_samples(
        &trigger("trigger", &[]),
        "method",
        "shop::Ledger::inspect",
        "rsi",
    );
}

#[test]
fn mangled_name_on_non_pie() {
    if !privileged() {
        return;
    }
    let binary = trigger("trigger-nopie", &["-no-pie"]);
    ten_samples(&binary, "method", "_ZN4shop6Ledger7inspectEl", "rsi");
}

#[test]
fn demangled_name_with_parameters_on_non_pie() {
    if !privileged() {
        return;
    }
    ten_samples(
        &trigger("trigger-nopie", &["-no-pie"]),
        "loop",
        "shop::record(long)",
        "rdi",
    );
}

#[test]
fn symbol_in_a_shared_library() {
    if !privileged() {
        return;
    }
    ten_samples(
        &trigger("trigger", &[]),
        "lib",
        "shoplib::lib_record",
        "rdi",
    );
}

#[test]
fn unknown_symbol_is_a_one_line_error() {
    if !privileged() {
        return;
    }
    let fixture = Fixture::start(&trigger("trigger", &[]), &["loop", "1"]);
    let pid = fixture.pid.to_string();
    let out = run_oi_trace(
        &["--pid", &pid, "--uprobe", "shop::no_such_function"],
        30 * SECOND,
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(out.stderr.len(), 1, "{out:#?}");
    let expected = "oi-trace: error: symbol \"shop::no_such_function\" not found in pid";
    assert!(out.stderr[0].starts_with(expected), "{out:#?}");
    fixture.assert_running();
}

/// A fixture command that moves itself into the cgroup before exec, so it is born there.
fn born_in(cgroup: &TestCgroup, binary: &Path) -> std::process::Command {
    use std::os::unix::process::CommandExt as _;
    let procs = cgroup.path().join("cgroup.procs");
    let mut cmd = std::process::Command::new(binary);
    cmd.args(["loop", &CALLS.to_string()]);
    // SAFETY: between fork and exec the child is single-threaded; the closure only writes
    // one file and allocates nothing shared with the parent.
    unsafe {
        cmd.pre_exec(move || std::fs::write(&procs, b"0"));
    }
    cmd
}

#[test]
fn cgroup_scope_counts_members_only_including_later_ones() {
    if !privileged() {
        return;
    }
    // A binary of its own, so other tests' processes never hit these probes.
    let binary = trigger("trigger-cgroup", &[]);
    let cgroup = TestCgroup::new("count");
    let dir = TempDir::new("cgroup");
    let sum = dir.file("summary.json");
    let mut inside = Fixture::start(&binary, &["loop", &CALLS.to_string()]);
    let mut outside = Fixture::start(&binary, &["loop", &CALLS.to_string()]);
    cgroup.add(inside.pid);
    let tracer = OiTrace::attached(&[
        "--cgroup",
        cgroup.path().to_str().unwrap(),
        "--uprobe",
        "shop::record",
        "--count-only",
        "--summary",
        sum.to_str().unwrap(),
    ]);
    let mut later = Fixture::start_with(&mut born_in(&cgroup, &binary));
    for f in [&inside, &outside, &later] {
        f.signal(SIGUSR1);
    }
    for f in [&mut inside, &mut outside, &mut later] {
        assert_eq!(f.stdout.expect("done", 30 * SECOND), expected_done("loop"));
    }
    tracer.signal(SIGINT);
    let out = tracer.finish(30 * SECOND);
    assert!(out.status.success(), "{out:#?}");
    let sum = summary(&sum);
    assert_eq!(sum[0]["hits"], 2 * CALLS, "{sum}");
    assert_eq!(sum[0]["filtered"], CALLS, "{sum}");
    for f in [inside, outside, later] {
        f.assert_running();
        assert!(f.finish().success());
    }
}

#[test]
fn cgroup_scope_samples_a_process_started_later() {
    if !privileged() {
        return;
    }
    let binary = trigger("trigger-cgroup-sample", &[]);
    let cgroup = TestCgroup::new("sample");
    let dir = TempDir::new("cgroup-sample");
    let log = dir.file("samples.jsonl");
    // Nothing runs in the cgroup yet: --binary arms the file for processes to come.
    let tracer = OiTrace::attached(&[
        "--cgroup",
        cgroup.path().to_str().unwrap(),
        "--uprobe",
        "shop::record",
        "--binary",
        binary.to_str().unwrap(),
        "--every",
        "100",
        "--count",
        "5",
        "--sample-log",
        log.to_str().unwrap(),
    ]);
    let mut later = Fixture::start_with(&mut born_in(&cgroup, &binary));
    later.signal(SIGUSR1);
    assert_eq!(
        later.stdout.expect("done", 30 * SECOND),
        expected_done("loop")
    );
    let out = tracer.finish(30 * SECOND);
    assert!(out.status.success(), "{out:#?}");
    let samples = sample_log(&log);
    assert_eq!(samples.len(), 5, "{samples:?}");
    for s in &samples {
        let hit = s["hit"].as_u64().unwrap();
        assert_eq!(hit % 100, 0, "{s}");
        assert_eq!(s["regs"]["rdi"], hit, "{s}");
        assert_eq!(s["pid"].as_i64(), Some(later.pid as i64));
    }
    later.assert_running();
    assert!(later.finish().success());
}

#[test]
fn sixteen_threads_every_hit_sampled_or_dropped() {
    if !privileged() {
        return;
    }
    let dir = TempDir::new("threads");
    let sum = dir.file("summary.json");
    let mut fixture = Fixture::start(&trigger("trigger", &[]), &["threads", "16", "5"]);
    let pid = fixture.pid.to_string();
    let tracer = OiTrace::attached(&[
        "--pid",
        &pid,
        "--uprobe",
        "shop::record",
        "--every",
        "1",
        "--duration",
        "3",
        "--summary",
        sum.to_str().unwrap(),
    ]);
    fixture.signal(SIGUSR1);
    let out = tracer.finish(60 * SECOND);
    assert!(out.status.success(), "{out:#?}");
    let sum = summary(&sum);
    let field = |k: &str| sum[0][k].as_u64().unwrap();
    let (hits, sampled, dropped) = (field("hits"), field("sampled"), field("dropped"));
    assert!(sampled > 0 && dropped > 0, "{sum}");
    assert_eq!(hits, sampled + dropped, "{sum}");
    fixture.assert_running();
    assert!(
        fixture
            .stdout
            .expect("done", 30 * SECOND)
            .starts_with("done ")
    );
    assert!(fixture.finish().success());
}

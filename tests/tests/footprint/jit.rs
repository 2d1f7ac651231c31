//! The walker inside the target, end to end: a corrupt object faults in the walker and only
//! the sample fails; the maps come back as they were and never hold an RWX mapping; oi-trace
//! killed with SIGKILL at random moments of sampling leaves the target running and correct;
//! a second run takes its plan and walker from the caches.
//! (That JIT output equals the remote walker's, byte for byte, is checked by every footprint
//! journey.)

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use oi_e2e::{
    Fixture, FixtureBuild, Lcg, OiTrace, SIGKILL, TempDir, json, maps_of, privileged, run_oi_trace,
};

const SECOND: Duration = Duration::from_secs(1);

fn jit_target() -> PathBuf {
    FixtureBuild::new("jit_target").build()
}

/// Maps before and after must be identical; on failure, show only what differs.
fn assert_same_maps(before: &[String], after: &[String]) {
    let gone: Vec<&String> = before.iter().filter(|l| !after.contains(l)).collect();
    let new: Vec<&String> = after.iter().filter(|l| !before.contains(l)).collect();
    assert!(
        gone.is_empty() && new.is_empty(),
        "maps changed: gone {gone:#?}, new {new:#?}"
    );
}

fn has_rwx(maps: &[String]) -> bool {
    maps.iter().any(|l| {
        l.split_whitespace()
            .nth(1)
            .is_some_and(|p| p.starts_with("rwx"))
    })
}

/// The fixture is alive, not stopped, not traced, and still doing (and checking) its work.
fn assert_healthy(fixture: &mut Fixture) {
    fixture.assert_running();
    let tick = fixture.stdout.expect("tick", 20 * SECOND);
    assert!(!tick.contains("CORRUPT"), "{tick}");
}

#[test]
fn a_corrupt_object_fails_only_the_sample() {
    if !privileged() {
        return;
    }
    let mut fixture = Fixture::start(&jit_target(), &["garbage"]);
    let pid = fixture.pid.to_string();
    let out = run_oi_trace(
        &[
            "--pid",
            &pid,
            "--uprobe",
            "shop::inspect_items",
            "--count",
            "1",
        ],
        60 * SECOND,
    );
    assert_eq!(out.status.code(), Some(1), "{out:#?}");
    let error = out
        .stderr
        .iter()
        .find(|l| l.contains("error: sample"))
        .expect("an error line");
    assert!(
        error.contains("walk of arg0 faulted at 0xdead0000"),
        "{error}"
    );
    assert!(
        out.stdout.is_empty(),
        "no result for a failed sample: {}",
        out.stdout
    );
    assert_healthy(&mut fixture);
    assert_healthy(&mut fixture);
    assert!(fixture.finish().success());
}

#[test]
fn maps_are_restored_and_never_rwx() {
    if !privileged() {
        return;
    }
    let mut fixture = Fixture::start(&jit_target(), &[]);
    let pid = fixture.pid;
    let before = maps_of(pid);
    let pid_arg = pid.to_string();
    let tracer = OiTrace::attached(&[
        "--pid",
        &pid_arg,
        "--uprobe",
        "shop::inspect",
        "--every",
        "100",
        "--duration",
        "2",
    ]);
    let mut saw_segments = false;
    let deadline = Instant::now() + 2 * SECOND;
    while Instant::now() < deadline {
        let now = maps_of(pid);
        assert!(!has_rwx(&now), "an RWX mapping appeared: {now:#?}");
        saw_segments |= now.len() > before.len();
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = tracer.finish(30 * SECOND);
    assert!(out.status.success(), "{out:#?}");
    assert!(
        out.stdout.lines().count() > 10,
        "samples were taken: {out:#?}"
    );
    assert!(
        saw_segments,
        "the walker's segments were seen while sampling"
    );
    assert_same_maps(&before, &maps_of(pid));
    assert_healthy(&mut fixture);
    assert!(fixture.finish().success());
}

#[test]
fn sigkill_of_oi_trace_at_random_moments_leaves_the_target_intact() {
    if !privileged() {
        return;
    }
    // A file of its own: 50 uprobes registered and torn down in quick succession on the file
    // the other tests probe were seen to cost a parallel test its probe hits (kernel side).
    let binary = FixtureBuild::new("jit_target")
        .variant("jit_target-kill", &[])
        .build();
    let mut fixture = Fixture::start(&binary, &[]);
    let pid = fixture.pid.to_string();
    let before = maps_of(fixture.pid);
    let mut rng = Lcg::from_clock("kill moments");
    for run in 0..50 {
        let tracer =
            OiTrace::attached(&["--pid", &pid, "--uprobe", "shop::inspect", "--every", "1"]);
        std::thread::sleep(Duration::from_micros(rng.below(150_000)));
        tracer.signal(SIGKILL);
        // A killed tracer's exit closes its uprobe links, and the kernel's unregistering waits
        // for an RCU grace period, which a loaded machine can stretch to seconds.
        let out = tracer.finish(60 * SECOND);
        assert!(
            out.status.code().is_none(),
            "run {run}: oi-trace was killed"
        );
        // The kernel detaches the threads as the tracer dies; a SIGSTOP the trigger sent an
        // instant before stops the process until the guardian resumes it (it watches for two
        // seconds): give both a moment, which a loaded machine stretches.
        fixture.wait_running(3 * SECOND);
        assert_healthy(&mut fixture);
    }
    // A normal run afterwards works, removes the segments the killed runs left, and leaves
    // the target healthy.
    let out = run_oi_trace(
        &["--pid", &pid, "--uprobe", "shop::inspect", "--count", "1"],
        60 * SECOND,
    );
    assert!(out.status.success(), "{out:#?}");
    assert_same_maps(&before, &maps_of(fixture.pid));
    assert_healthy(&mut fixture);
    assert!(fixture.finish().success());
}

/// The names and types of a sample's tree, without its sizes (the object changes meanwhile).
fn shape(v: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(o) => o
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "name" | "typeNames" | "members"))
            .map(|(k, v)| (k.clone(), shape(v)))
            .collect(),
        serde_json::Value::Array(a) => a.iter().map(shape).collect(),
        other => other.clone(),
    }
}

#[test]
fn a_second_run_takes_plan_and_walker_from_the_caches() {
    if !privileged() {
        return;
    }
    let mut fixture = Fixture::start(&jit_target(), &[]);
    let pid = fixture.pid.to_string();
    let cache = TempDir::new("caches");
    let summary = cache.file("summary.json");
    let run = || {
        let args = [
            "--pid",
            &pid,
            "--uprobe",
            "shop::inspect",
            "--count",
            "1",
            "--summary",
            summary.to_str().unwrap_or_default(),
        ];
        let out =
            OiTrace::start_with_env(&args, &[("XDG_CACHE_HOME", cache.path())]).finish(60 * SECOND);
        assert!(out.status.success(), "{out:#?}");
        let sum = json(&std::fs::read_to_string(&summary).expect("summary"));
        let cached = (
            sum[0]["plans_cached"].as_u64(),
            sum[0]["walkers_cached"].as_u64(),
        );
        (shape(&json(&out.stdout)), cached)
    };
    let (first, cached) = run();
    assert_eq!(cached, (Some(0), Some(0)), "an empty cache: all built");
    let (second, cached) = run();
    assert_eq!(cached, (Some(1), Some(1)), "the second run built nothing");
    assert_eq!(first, second);
    // A damaged plan file is rebuilt from the DWARF, not trusted.
    let plans = cache.path().join("oi-trace/plans");
    for entry in std::fs::read_dir(&plans).expect("plan cache") {
        let path = entry.expect("entry").path();
        let mut bytes = std::fs::read(&path).expect("plan file");
        let last = bytes.len() - 2;
        bytes[last] ^= 0x20;
        std::fs::write(&path, bytes).expect("damage it");
    }
    let (third, cached) = run();
    assert_eq!(cached, (Some(0), Some(1)), "the plan was rebuilt");
    assert_eq!(first, third);
    assert_healthy(&mut fixture);
    assert!(fixture.finish().success());
}

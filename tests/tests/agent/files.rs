//! `--pprof-dir`: one file per target and interval, read by `go tool pprof -raw`.

use std::{path::Path, time::SystemTime};

use oi_e2e::{
    SIGINT, TempDir,
    pprof::{go_pprof, raw_sample_types, raw_totals},
    privileged,
};

use super::*;

/// The profiles of `pid` in `dir`, in time order: (time_nanos, duration_nanos, -raw totals).
fn read_dir(dir: &Path, pid: &str) -> Vec<Interval> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains(&format!("-{pid}-")))
        .collect();
    names.sort();
    names
        .iter()
        .map(|n| {
            let path = dir.join(n);
            assert!(n.ends_with(".pb.gz"), "{n}");
            let raw = go_pprof(&["-raw"], &path);
            assert_eq!(raw_sample_types(&raw), HEAP_TYPES, "{raw}");
            let profile = decode(&std::fs::read(&path).unwrap());
            let raw_sums = raw_totals(&raw);
            // -raw and the decoded message agree.
            let (_, decoded) = totals(&profile);
            // Stacks are named: the fixture allocates only in its `allocate`.
            assert_eq!(
                beneath(&profile, "agent_fixture::allocate"),
                decoded[0],
                "{raw}"
            );
            assert_eq!(
                if raw_sums.is_empty() {
                    vec![0; 4]
                } else {
                    raw_sums
                },
                decoded
            );
            (profile.time_nanos, profile.duration_nanos, decoded)
        })
        .collect()
}

/// One fixture, `extra` options, 1 s intervals to a directory; returns what the fixture printed
/// and its profiles.
fn files_journey(
    binary: &Path,
    extra: &[&str],
) -> (Printed, Vec<Interval>, SystemTime, SystemTime) {
    let dir = TempDir::new("agent-files");
    let (mut fixture, pid) = start(binary);
    let start = SystemTime::now();
    let mut args = vec![
        "--pid",
        &pid,
        "--interval",
        "1s",
        "--pprof-dir",
        dir.path().to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let agent = agent(&args, 1);
    let printed = run_phases(&mut fixture);
    // One more tick after the last phase, then stop: the last interval is partial.
    std::thread::sleep(SECOND + SECOND / 2);
    agent.signal(SIGINT);
    let done = agent.finish(30 * SECOND);
    let end = SystemTime::now();
    assert!(done.status.success(), "{done:?}");
    assert!(
        done.stderr
            .iter()
            .any(|l| l.starts_with("oi-trace: agent: stopped after")),
        "{done:?}"
    );
    let profiles = read_dir(dir.path(), &pid);
    fixture_unharmed(fixture);
    (printed, profiles, start, end)
}

fn exact(binary: &Path) {
    let (printed, profiles, start, end) = files_journey(binary, &["--every", "1"]);
    assert!(
        profiles.len() >= 3,
        "the phases span several intervals: {profiles:?}"
    );
    let (allocs, bytes) = check_intervals(&profiles, start, end);
    assert_eq!(
        (allocs, bytes),
        (printed.allocs, printed.bytes),
        "{profiles:?}"
    );
    let last = &profiles.last().unwrap().2;
    assert_eq!(
        (last[2], last[3]),
        (printed.live_allocs, printed.live_bytes),
        "in use at the end"
    );
    // The work is spread: no single interval holds every allocation.
    assert!(
        profiles.iter().all(|p| p.2[0] < printed.allocs),
        "{profiles:?}"
    );
}

#[test]
fn every_interval_to_files_adds_up_exactly_at_o0() {
    if !privileged() {
        return;
    }
    exact(&o0());
}

#[test]
fn every_interval_to_files_adds_up_exactly_at_o2() {
    if !privileged() {
        return;
    }
    exact(&o2());
}

#[test]
fn sampled_intervals_estimate_within_the_bound() {
    if !privileged() {
        return;
    }
    const B: u64 = 65_536;
    let b = B.to_string();
    let (printed, profiles, start, end) = files_journey(&o2(), &["--sample-bytes", &b]);
    let (_, bytes) = check_intervals(&profiles, start, end);
    let bound = sampled_bound(&printed, B as f64);
    let error = (bytes - printed.bytes).abs() as f64;
    eprintln!(
        "sampled --sample-bytes {B}: estimate {bytes}, true {}, error {error} ({:.2} %), bound {bound:.0}",
        printed.bytes,
        100.0 * error / printed.bytes as f64
    );
    assert!(
        error <= bound,
        "estimate {bytes} vs {}: error {error} > {bound}",
        printed.bytes
    );
}

/// Two targets; one exits during the run and is dropped with one line, the other goes on, and
/// `--pprof-keep` keeps the newest files of each.
#[test]
fn a_target_that_exits_is_dropped_and_the_other_goes_on() {
    if !privileged() {
        return;
    }
    let dir = TempDir::new("agent-two");
    let binary = o0();
    let (mut leaving, leaving_pid) = start(&binary);
    let (mut staying, staying_pid) = start(&binary);
    let start_time = SystemTime::now();
    let agent = agent(
        &[
            "--pid",
            &leaving_pid,
            "--pid",
            &staying_pid,
            "--every",
            "1",
            "--interval",
            "1s",
            "--pprof-dir",
            dir.path().to_str().unwrap(),
            "--service-name",
            "phases",
        ],
        2,
    );
    run_phases(&mut leaving);
    let printed = run_phases(&mut staying);
    assert!(leaving.finish().success());
    std::thread::sleep(2 * SECOND);
    agent.signal(SIGINT);
    let done = agent.finish(30 * SECOND);
    let end = SystemTime::now();
    assert!(done.status.success(), "{done:?}");
    let gone: Vec<&String> = done
        .stderr
        .iter()
        .filter(|l| l.contains(&format!("pid {leaving_pid} ")) && l.contains("exited"))
        .collect();
    assert_eq!(gone.len(), 1, "{:#?}", done.stderr);
    let profiles = read_dir(dir.path(), &staying_pid);
    let (allocs, bytes) = check_intervals(&profiles, start_time, end);
    assert_eq!((allocs, bytes), (printed.allocs, printed.bytes));
    assert!(
        std::fs::read_dir(dir.path()).unwrap().all(|e| e
            .unwrap()
            .file_name()
            .to_str()
            .unwrap()
            .starts_with("phases-")),
        "files named by --service-name"
    );
    fixture_unharmed(staying);
}

#[test]
fn bad_input_is_one_line_and_status_2() {
    let cases: [&[&str]; 7] = [
        &[
            "agent",
            "--pid",
            "1",
            "--pprof-dir",
            "/tmp",
            "--label",
            "no-equals",
        ],
        &["agent", "--pid", "1"],
        &["agent", "--pid", "1", "--pyroscope-url", "ftp://x"],
        &["agent", "--pid", "1", "--pprof-dir", "/tmp", "--queue", "0"],
        &["agent", "--pid", "999999999", "--pprof-dir", "/tmp"],
        &[
            "agent",
            "--cgroup",
            "/nonexistent/cgroup",
            "--pprof-dir",
            "/tmp",
        ],
        &[
            "agent",
            "--pid",
            "1",
            "--cgroup-root",
            "/sys/fs/cgroup",
            "--pprof-dir",
            "/tmp",
        ],
    ];
    for args in cases {
        let done = oi_e2e::run_oi_trace(args, 10 * SECOND);
        assert_eq!(done.status.code(), Some(2), "{args:?}: {done:?}");
        assert_eq!(done.stderr.len(), 1, "{args:?}: {done:?}");
        assert!(done.stderr[0].starts_with("oi-trace: error: "), "{done:?}");
    }
}

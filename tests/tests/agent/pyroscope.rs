//! `--pyroscope-url`: profiles to a receiver that reads requests as Pyroscope's ingest handler
//! does; labels, tenant, token, time ranges and totals; and a receiver that goes down and
//! comes back: nothing lost within the queue's bound, drops counted beyond it.

use std::{
    collections::BTreeMap,
    path::Path,
    sync::{Arc, Mutex},
    time::SystemTime,
};

use oi_e2e::{SIGINT, TempDir, privileged};

use super::{
    receiver::{Received, Receiver, Store},
    *,
};

/// The numbers of the agent's final line: (profiles made, delivered, dropped).
fn summary(stderr: &[String]) -> (u64, u64, u64) {
    let line = stderr
        .iter()
        .find(|l| l.starts_with("oi-trace: agent: stopped after"))
        .unwrap_or_else(|| panic!("no summary: {stderr:#?}"));
    let number_before = |word: &str| -> u64 {
        let at = line
            .find(word)
            .unwrap_or_else(|| panic!("{word} in {line}"));
        line[..at]
            .split_whitespace()
            .last()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("a number before {word} in {line}"))
    };
    (
        number_before("profile(s)"),
        number_before("delivered"),
        number_before("dropped"),
    )
}

/// The received profiles as (time_nanos, duration_nanos, totals), in time order.
fn intervals(received: &[Received]) -> Vec<Interval> {
    let mut out: Vec<Interval> = received
        .iter()
        .map(|r| {
            let (types, sums) = totals(&r.profile);
            assert_eq!(types, HEAP_TYPES);
            (r.profile.time_nanos, r.profile.duration_nanos, sums)
        })
        .collect();
    out.sort_by_key(|p| p.0);
    out
}

/// By `api` (`ingest` or `push`).
fn to_pyroscope(binary: &Path, api: &'static str) {
    let got = Arc::new(Mutex::new(Store::default()));
    let receiver = Receiver::start(0, got);
    let url = format!("http://127.0.0.1:{}", receiver.port);
    let dir = TempDir::new("agent-token");
    let token_file = dir.file("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let (mut fixture, pid) = start(binary);
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap()
        .trim()
        .to_string();
    let start_time = SystemTime::now();
    let agent = agent(
        &[
            "--pid",
            &pid,
            "--every",
            "1",
            "--interval",
            "1s",
            "--pyroscope-url",
            &url,
            "--pyroscope-api",
            api,
            "--label",
            "env=journey",
            "--label",
            "zone=a,b",
            "--tenant-id",
            "team-a",
            "--bearer-token-file",
            token_file.to_str().unwrap(),
        ],
        1,
    );
    let printed = run_phases(&mut fixture);
    std::thread::sleep(SECOND + SECOND / 2);
    agent.signal(SIGINT);
    let done = agent.finish(30 * SECOND);
    let end = SystemTime::now();
    assert!(done.status.success(), "{done:?}");
    let received = receiver.received();
    let (made, delivered, dropped) = summary(&done.stderr);
    assert_eq!((made, delivered, dropped), (received.len() as u64, made, 0));
    // The ingest API's `name` cannot hold a `,` in a value; the Push API's labels can.
    let zone = if api == "push" { "a,b" } else { "a_b" };
    let want_labels: BTreeMap<String, String> =
        [("pid", pid.as_str()), ("env", "journey"), ("zone", zone)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    let (start_s, end_s) = (
        (unix_ns(start_time) / 1_000_000_000) as u64,
        (unix_ns(end) / 1_000_000_000) as u64,
    );
    let mut by_time: Vec<&Received> = received.iter().collect();
    by_time.sort_by_key(|r| r.from);
    for r in &by_time {
        assert_eq!(r.via, api);
        assert_eq!(r.service, comm);
        assert_eq!(r.labels, want_labels);
        assert_eq!(r.tenant.as_deref(), Some("team-a"));
        assert_eq!(r.authorization.as_deref(), Some("Bearer s3cret"));
        assert!(r.from < r.until, "{r:?}");
        assert!(r.from >= start_s && r.until <= end_s + 1, "{r:?}");
        // The query's range is the profile's own, in seconds.
        assert_eq!(r.from as i64, r.profile.time_nanos / 1_000_000_000);
    }
    for pair in by_time.windows(2) {
        assert_eq!(pair[0].until, pair[1].from, "contiguous ranges");
    }
    let profiles = intervals(&received);
    let (allocs, bytes) = check_intervals(&profiles, start_time, end);
    assert_eq!((allocs, bytes), (printed.allocs, printed.bytes));
    let last = &profiles.last().unwrap().2;
    assert_eq!(
        (last[2], last[3]),
        (printed.live_allocs, printed.live_bytes)
    );
    fixture_unharmed(fixture);
}

#[test]
fn profiles_reach_pyroscope_with_labels_tenant_and_exact_totals_at_o0() {
    if !privileged() {
        return;
    }
    to_pyroscope(&o0(), "ingest");
}

#[test]
fn profiles_reach_pyroscope_with_labels_tenant_and_exact_totals_at_o2() {
    if !privileged() {
        return;
    }
    to_pyroscope(&o2(), "ingest");
}

#[test]
fn profiles_reach_pyroscopes_push_api_with_labels_tenant_and_exact_totals() {
    if !privileged() {
        return;
    }
    to_pyroscope(&o2(), "push");
}

/// The receiver goes down for `down` while the agent runs with `--queue queue` (1 s
/// intervals), then comes back. Returns what the fixture printed, every profile the agent made
/// (from `--pprof-dir`), what the receiver got, and the agent's (made, delivered, dropped).
fn outage(
    down: Duration,
    queue: usize,
) -> (Printed, Vec<Interval>, Vec<Interval>, (u64, u64, u64)) {
    let got = Arc::new(Mutex::new(Store::default()));
    let receiver = Receiver::start(0, got.clone());
    let port = receiver.port;
    let url = format!("http://127.0.0.1:{port}");
    let dir = TempDir::new("agent-outage");
    let (mut fixture, pid) = start(&o2());
    let start_time = SystemTime::now();
    let queue = queue.to_string();
    let agent = agent(
        &[
            "--pid",
            &pid,
            "--every",
            "1",
            "--interval",
            "1s",
            "--pyroscope-url",
            &url,
            "--queue",
            &queue,
            "--retry-max",
            "300ms",
            "--pprof-dir",
            dir.path().to_str().unwrap(),
        ],
        1,
    );
    // Down from before the work to after it.
    let got = receiver.stop();
    let went_down = std::time::Instant::now();
    let printed = run_phases(&mut fixture);
    std::thread::sleep(down.saturating_sub(went_down.elapsed()));
    let receiver = Receiver::start(port, got);
    // Back: the queue drains within a few retries.
    std::thread::sleep(3 * SECOND);
    agent.signal(SIGINT);
    let done = agent.finish(30 * SECOND);
    let end = SystemTime::now();
    assert!(done.status.success(), "{done:?}");
    assert!(
        done.stderr.iter().any(|l| l.contains("failed, retrying")),
        "{:#?}",
        done.stderr
    );
    let files = {
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        let mut v: Vec<Interval> = names
            .iter()
            .map(|p| {
                let profile = decode(&std::fs::read(p).unwrap());
                (
                    profile.time_nanos,
                    profile.duration_nanos,
                    totals(&profile).1,
                )
            })
            .collect();
        v.sort_by_key(|p| p.0);
        v
    };
    let (allocs, bytes) = check_intervals(&files, start_time, end);
    assert_eq!((allocs, bytes), (printed.allocs, printed.bytes));
    let received = intervals(&receiver.received());
    let counts = summary(&done.stderr);
    assert_eq!(counts.0, files.len() as u64);
    assert_eq!(counts.1, received.len() as u64);
    fixture_unharmed(fixture);
    (printed, files, received, counts)
}

#[test]
fn an_outage_within_the_queue_loses_nothing() {
    if !privileged() {
        return;
    }
    // 30 s down (thirty intervals), room for forty.
    let (printed, files, received, (_, _, dropped)) = outage(30 * SECOND, 40);
    assert_eq!(dropped, 0);
    assert_eq!(received, files, "every interval delivered, unchanged");
    let sent: i64 = received.iter().map(|p| p.2[1]).sum();
    assert_eq!(sent, printed.bytes);
}

#[test]
fn an_outage_beyond_the_queue_drops_the_oldest_and_counts_them() {
    if !privileged() {
        return;
    }
    // 30 s down (thirty intervals), room for eight (and one in flight).
    let (printed, files, received, (made, delivered, dropped)) = outage(30 * SECOND, 8);
    assert!(dropped >= 20, "dropped {dropped}");
    assert_eq!(made, delivered + dropped);
    // What arrived is what the files hold for those intervals, and the missing intervals are
    // exactly the dropped ones.
    for r in &received {
        assert!(files.contains(r), "{r:?} not among {files:?}");
    }
    let missing: Vec<&Interval> = files.iter().filter(|f| !received.contains(f)).collect();
    assert_eq!(missing.len() as u64, dropped);
    let bytes: i64 = received
        .iter()
        .chain(missing.iter().copied())
        .map(|p| p.2[1])
        .sum();
    assert_eq!(bytes, printed.bytes);
    // The newest profiles always get through: the last interval arrived.
    assert_eq!(received.last(), files.last());
}

//! `oi-trace agent` on live processes. The `agent_phases` fixture allocates known blocks in
//! six phases 400 ms apart (after SIGUSR1) and keeps every 1000th; the agent cuts its run into
//! 1 s intervals. Read back by `go tool pprof -raw` (files) and by receivers written here that
//! parse requests as Pyroscope does: the intervals must be contiguous and within the run, and
//! their allocations must add up to the fixture's own totals exactly when every allocation is
//! counted (`--every 1`), within a bound computed from the fixture's sizes when sampled
//! (`--sample-bytes`); the last interval's in-use numbers are the fixture's kept blocks. Every
//! fixture runs on untraced afterwards and finishes normally; at -O0 and at -O2 without frame
//! pointers.

mod containers;
mod deploy;
mod files;
mod otlp;
mod pyroscope;
mod receiver;

use std::{
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use oi_e2e::{Fixture, FixtureBuild, OiTrace, SIGUSR1};
use oi_trace::export::pprof::proto::Profile;
use prost::Message as _;

pub const SECOND: Duration = Duration::from_secs(1);

pub fn o0() -> PathBuf {
    FixtureBuild::new("agent_phases")
        .variant("agent_phases_o0", &["-O0"])
        .build()
}

pub fn o2() -> PathBuf {
    FixtureBuild::new("agent_phases")
        .variant("agent_phases_o2", &["-O2", "-fomit-frame-pointer"])
        .build()
}

/// What the fixture printed about its own work.
#[derive(Debug, Default, Clone, Copy)]
pub struct Printed {
    pub allocs: i64,
    pub bytes: i64,
    pub live_allocs: i64,
    pub live_bytes: i64,
    pub sum_n: f64,
    pub sum_n2: f64,
}

pub fn read_printed(fixture: &Fixture) -> Printed {
    let mut p = Printed::default();
    for line in fixture.stdout.seen() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| w[i].parse::<i64>().unwrap();
        match w.first() {
            Some(&"total") => (p.allocs, p.bytes) = (n(1), n(2)),
            Some(&"live") => (p.live_allocs, p.live_bytes) = (n(1), n(2)),
            Some(&"sizes") => (p.sum_n, p.sum_n2) = (n(1) as f64, n(2) as f64),
            _ => {}
        }
    }
    assert!(p.allocs > 0, "the fixture printed no totals");
    p
}

/// A fixture started and its pid as text.
pub fn start(binary: &Path) -> (Fixture, String) {
    let fixture = Fixture::start(binary, &[]);
    let pid = fixture.pid.to_string();
    (fixture, pid)
}

/// Starts `oi-trace agent ARGS` and waits until `targets` profilers are armed.
pub fn agent(args: &[&str], targets: usize) -> OiTrace {
    let mut all = vec!["agent"];
    all.extend_from_slice(args);
    let mut agent = OiTrace::start(&all);
    for _ in 0..targets {
        agent
            .stderr
            .expect("oi-trace: attached", Duration::from_secs(60));
    }
    agent
}

/// Lets the fixture do its phases, and waits until it printed its totals.
pub fn run_phases(fixture: &mut Fixture) -> Printed {
    fixture.signal(SIGUSR1);
    fixture.stdout.expect("done", Duration::from_secs(60));
    read_printed(fixture)
}

/// A gzipped pprof decoded.
pub fn decode(gz: &[u8]) -> Profile {
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(gz), &mut raw)
        .expect("a gzipped profile");
    Profile::decode(raw.as_slice()).expect("a profile.proto message")
}

/// Each sample type's total over a profile's samples, and the types as `name/unit`.
pub fn totals(profile: &Profile) -> (Vec<String>, Vec<i64>) {
    let s = |i: i64| profile.string_table[i as usize].clone();
    let types: Vec<String> = profile
        .sample_type
        .iter()
        .map(|t| format!("{}/{}", s(t.r#type), s(t.unit)))
        .collect();
    let mut sums = vec![0i64; types.len()];
    for sample in &profile.sample {
        for (sum, v) in sums.iter_mut().zip(&sample.value) {
            *sum += v;
        }
    }
    (types, sums)
}

/// The first sample type's total over the samples with a frame named `function`.
pub fn beneath(profile: &Profile, function: &str) -> i64 {
    let s = |i: i64| profile.string_table[i as usize].as_str();
    let ids: Vec<u64> = profile
        .function
        .iter()
        .filter(|f| s(f.name) == function)
        .map(|f| f.id)
        .collect();
    let named = |id: &u64| {
        profile
            .location
            .iter()
            .find(|l| l.id == *id)
            .is_some_and(|l| l.line.iter().any(|line| ids.contains(&line.function_id)))
    };
    profile
        .sample
        .iter()
        .filter(|sample| sample.location_id.iter().any(named))
        .map(|sample| sample.value[0])
        .sum()
}

/// One profile's interval: (time_nanos, duration_nanos, each sample type's total).
pub type Interval = (i64, i64, Vec<i64>);

pub const HEAP_TYPES: [&str; 4] = [
    "alloc_objects/count",
    "alloc_space/bytes",
    "inuse_objects/count",
    "inuse_space/bytes",
];

pub fn unix_ns(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

/// The profiles of one target, in time order, as (time_nanos, duration_nanos, totals):
/// contiguous (each starts where the previous ended), within `[start, end]`, with Go's heap
/// types; returns them with the sums of the allocation types over every interval.
pub fn check_intervals(profiles: &[Interval], start: SystemTime, end: SystemTime) -> (i64, i64) {
    assert!(!profiles.is_empty());
    let (start, end) = (unix_ns(start), unix_ns(end));
    for pair in profiles.windows(2) {
        assert_eq!(
            pair[0].0 + pair[0].1,
            pair[1].0,
            "intervals are contiguous: {profiles:?}"
        );
    }
    let first = profiles.first().unwrap();
    let last = profiles.last().unwrap();
    assert!(first.0 >= start, "first interval starts within the run");
    assert!(last.0 + last.1 <= end, "last interval ends within the run");
    (
        profiles.iter().map(|p| p.2[0]).sum(),
        profiles.iter().map(|p| p.2[1]).sum(),
    )
}

/// The fixture is untouched: running, untraced, and it finishes normally.
pub fn fixture_unharmed(fixture: Fixture) {
    fixture.wait_running(5 * SECOND);
    assert!(fixture.finish().success());
}

/// The bound of a sampled estimate of the bytes: six standard deviations of the estimator
/// (an allocation of n < B bytes taken with probability n/B, counted as B bytes, has variance
/// n(B − n)), for the fixture's sizes.
pub fn sampled_bound(printed: &Printed, sample_bytes: f64) -> f64 {
    6.0 * (sample_bytes * printed.sum_n - printed.sum_n2).sqrt()
}

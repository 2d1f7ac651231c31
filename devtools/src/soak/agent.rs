//! `cargo xtask soak --agent --minutes N`: `oi-trace agent` profiles four processes that
//! allocate without pause (`allocs_bench`, one thread each, rounds of malloc(64) + free pairs)
//! for N minutes, every allocation counted (`--every 1`), 5 s intervals to a directory, and the
//! run passes only if
//!
//! - every interval of every target was delivered: each target's profiles follow each other
//!   without gap or overlap and cover the run;
//! - the counts are exact: over a target's profiles, the allocations beneath `bench::pairs`
//!   add up to the pairs the target made (rounds × pairs per round), and their bytes to 64 ×
//!   that;
//! - the agent's memory (VmRSS) after the first minute never exceeds its peak of the first
//!   minute by more than a small tolerance;
//! - the agent exits 0 on SIGINT, and every target runs on untraced and exits 0 when told.
//!
//! It prints a table of the figures and fails when any check does.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use oi_e2e::{Fixture, FixtureBuild, OiTrace, SIGINT, SIGUSR1, TempDir};
use oi_trace::export::pprof::proto::Profile;
use prost::Message as _;

const TARGETS: usize = 4;
/// Pairs per round of a target: tens of ms under the probes, so that the agent's intervals
/// each hold many rounds and the soak's loop stays responsive.
const PAIRS: u64 = 20_000;
const BLOCK: u64 = 64;
const INTERVAL_S: u64 = 5;
/// Allowed growth of the agent's VmRSS after minute 1.
const RSS_TOLERANCE_KIB: u64 = 4096;
const THE_LOOP: &str = "bench::pairs";

pub fn run(minutes: u64) -> Result<()> {
    if minutes == 0 {
        bail!("--minutes must be at least 1");
    }
    let window = Duration::from_secs(minutes * 60);
    let binary = FixtureBuild::new("allocs_bench")
        .variant("allocs_bench_o2", &["-O2"])
        .build();
    let mut fixtures: Vec<Fixture> = (0..TARGETS)
        .map(|_| Fixture::start(&binary, &["1", &PAIRS.to_string()]))
        .collect();
    let dir = TempDir::new("soak-agent");
    let pids: Vec<String> = fixtures.iter().map(|f| f.pid.to_string()).collect();
    let interval = format!("{INTERVAL_S}s");
    let mut args = vec!["agent", "--every", "1", "--interval", &interval];
    for pid in &pids {
        args.extend(["--pid", pid]);
    }
    let dir_text = dir.path().to_str().context("temp dir")?.to_string();
    args.extend(["--pprof-dir", &dir_text, "--pprof-keep", "1000000"]);
    let mut agent = OiTrace::start(&args);
    for _ in 0..TARGETS {
        agent
            .stderr
            .expect("oi-trace: attached", Duration::from_secs(120));
    }
    println!(
        "soak --agent: {TARGETS} targets for {minutes} min, every allocation counted, \
         {INTERVAL_S} s intervals"
    );
    let started = Instant::now();
    let mut rounds = [0u64; TARGETS];
    let mut rss_first_minute = 0u64;
    let mut rss_after = 0u64;
    let mut next_poll = Instant::now();
    let mut printed_minute = None;
    while started.elapsed() < window {
        for f in &fixtures {
            f.signal(SIGUSR1);
        }
        for (f, r) in fixtures.iter_mut().zip(&mut rounds) {
            f.stdout.expect("ns ", Duration::from_secs(300));
            *r += 1;
        }
        if Instant::now() >= next_poll {
            next_poll += Duration::from_secs(1);
            let rss = super::status_number(agent.pid(), "VmRSS:").context("the agent's VmRSS")?;
            if started.elapsed() < Duration::from_secs(60) {
                rss_first_minute = rss_first_minute.max(rss);
            } else {
                rss_after = rss_after.max(rss);
            }
            let minute = started.elapsed().as_secs() / 60;
            if printed_minute != Some(minute) {
                printed_minute = Some(minute);
                println!(
                    "  {:>4} s: agent VmRSS {rss} KiB, rounds {rounds:?}",
                    minute * 60
                );
            }
        }
    }
    // The last rounds land in an interval before the agent stops.
    std::thread::sleep(Duration::from_secs(1));
    agent.signal(SIGINT);
    let done = agent.finish(Duration::from_secs(60));
    let mut failures = Vec::new();
    if !done.status.success() {
        failures.push(format!("the agent failed: {:#?}", done.stderr));
    }
    for (i, f) in fixtures.into_iter().enumerate() {
        f.wait_running(Duration::from_secs(5));
        if !f.finish().success() {
            failures.push(format!("target {i} did not exit 0"));
        }
    }
    println!("\ntarget  rounds  pairs made  counted allocs  counted bytes  profiles");
    for (i, pid) in pids.iter().enumerate() {
        let made = rounds[i] * PAIRS;
        match counted(dir.path(), pid, window) {
            Ok((allocs, bytes, profiles)) => {
                println!(
                    "{i:>6}  {:>6}  {made:>10}  {allocs:>14}  {bytes:>13}  {profiles:>8}",
                    rounds[i]
                );
                if (allocs, bytes) != (made, made * BLOCK) {
                    failures.push(format!(
                        "target {i}: counted {allocs} allocations, {bytes} bytes beneath \
                         {THE_LOOP}; it made {made} of {BLOCK} bytes"
                    ));
                }
            }
            Err(e) => failures.push(format!("target {i}: {e:#}")),
        }
    }
    println!(
        "\nagent VmRSS: peak {rss_first_minute} KiB in the first minute, {rss_after} KiB after"
    );
    if minutes > 1 && rss_after > rss_first_minute + RSS_TOLERANCE_KIB {
        failures.push(format!(
            "the agent's memory grew: {rss_after} KiB after the first minute against \
             {rss_first_minute} KiB in it"
        ));
    }
    if !failures.is_empty() {
        bail!("soak --agent failed:\n  {}", failures.join("\n  "));
    }
    println!("soak --agent: passed");
    Ok(())
}

/// The allocations and bytes beneath [`THE_LOOP`] over every profile of target `pid` in `dir`,
/// and how many profiles; fails unless the profiles are contiguous and cover `window` but for
/// an interval at each end.
fn counted(dir: &Path, pid: &str, window: Duration) -> Result<(u64, u64, usize)> {
    let mut profiles: Vec<Profile> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.contains(&format!("-{pid}-")) && name.ends_with(".pb.gz") {
            profiles.push(decode(&path)?);
        }
    }
    profiles.sort_by_key(|p| p.time_nanos);
    for pair in profiles.windows(2) {
        if pair[0].time_nanos + pair[0].duration_nanos != pair[1].time_nanos {
            bail!(
                "profiles not contiguous: one ends at {} ns, the next starts at {} ns",
                pair[0].time_nanos + pair[0].duration_nanos,
                pair[1].time_nanos
            );
        }
    }
    let covered: i64 = profiles.iter().map(|p| p.duration_nanos).sum();
    let want = window.as_nanos() as i64 - 2 * INTERVAL_S as i64 * 1_000_000_000;
    if covered < want {
        bail!(
            "{} profile(s) cover {:.1} s of a {:.0} s run",
            profiles.len(),
            covered as f64 / 1e9,
            window.as_secs_f64()
        );
    }
    let (mut allocs, mut bytes) = (0u64, 0u64);
    for p in &profiles {
        let (a, b) = beneath(p, THE_LOOP)?;
        allocs += a;
        bytes += b;
    }
    Ok((allocs, bytes, profiles.len()))
}

fn decode(path: &Path) -> Result<Profile> {
    let gz = std::fs::read(path)?;
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(gz.as_slice()), &mut raw)
        .with_context(|| format!("{}: not gzip", path.display()))?;
    Profile::decode(raw.as_slice()).with_context(|| format!("{}: not a profile", path.display()))
}

/// `alloc_objects` and `alloc_space` of the samples with a frame named `function`.
fn beneath(p: &Profile, function: &str) -> Result<(u64, u64)> {
    let s = |i: i64| p.string_table.get(i as usize).map_or("", String::as_str);
    let index = |name: &str| {
        p.sample_type
            .iter()
            .position(|t| s(t.r#type) == name)
            .with_context(|| format!("no sample type {name}"))
    };
    let (objects, space) = (index("alloc_objects")?, index("alloc_space")?);
    let ids: std::collections::HashSet<u64> = p
        .function
        .iter()
        .filter(|f| s(f.name) == function)
        .map(|f| f.id)
        .collect();
    let names_it = |location: &u64| {
        p.location
            .iter()
            .find(|l| l.id == *location)
            .is_some_and(|l| l.line.iter().any(|line| ids.contains(&line.function_id)))
    };
    let (mut a, mut b) = (0u64, 0u64);
    for sample in &p.sample {
        if sample.location_id.iter().any(names_it) {
            a += sample.value[objects] as u64;
            b += sample.value[space] as u64;
        }
    }
    Ok((a, b))
}

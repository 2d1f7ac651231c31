//! The `protobuf` figures of `cargo xtask bench`: a sample of a `RepeatedPtrField` of
//! 100,000 generated messages, walked through the shipped description
//! `containers/protobuf.toml` (embedded in oi-trace: no `--containers`), against the
//! fixture's own walk computing the same footprint (`tests/fixtures/beyond_protobuf_bench.cpp`,
//! -O2). The goal: the walk inside the target (the stub's rdtsc, from `oi-trace -v`; the
//! median of 15 samples, and how many of them were within the goal) within 1.3× the
//! fixture's walk after the same sleep (the caches in the same state as for a sampled call;
//! the median of its walks). The walk against the fixture's repeated (warm) walk and the
//! pause the caller feels are reported beside it. The sample's size must equal the
//! fixture's number, or the figure fails: a fast wrong walk proves nothing.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use oi_e2e::{Fixture, FixtureBuild, OiTrace};

use super::{Figure, median, value_of};

pub fn run(quick: bool, figures: &mut Vec<Figure>) -> Result<()> {
    let exe = FixtureBuild::new("beyond_protobuf_bench")
        .variant("beyond_protobuf_bench", &["-O2"])
        .protoc("beyond_order")
        .libs(&["-lprotobuf"])
        .build();
    let n: u64 = if quick { 10_000 } else { 100_000 };
    // Fifteen samples: a walk preempted on this shared 2-core machine (now and then one is
    // several times slower) or a slow first touch moves the median of seven.
    let samples = if quick { 3 } else { 15 };
    let mut fixture = Fixture::start(&exe, &[&n.to_string()]);
    let mut get = |key: &str| -> Result<f64> {
        let line = fixture.stdout.expect(key, Duration::from_secs(120));
        value_of(&line, &format!("{key} ")).with_context(|| format!("{key} in {line:?}"))
    };
    let expect = get("expect_size")? as u64;
    let native = get("native_ns")?;
    let pid = fixture.pid.to_string();
    fixture.stdout.take();
    // One call every 40 ms (the fixture's own walk takes every other turn): a sample every 5
    // calls leaves time to print the last one.
    let tracer = OiTrace::attached(&[
        "--pid",
        &pid,
        "--uprobe",
        "take_items",
        "--mode",
        "jit",
        "--every",
        "5",
        "--count",
        &samples.to_string(),
        "--format",
        "json",
        "-v",
    ]);
    let out = tracer.finish(Duration::from_secs(300));
    if !out.status.success() {
        bail!("oi-trace on the RepeatedPtrField failed: {:?}", out.stderr);
    }
    // The root's `size` is the first key of every sample.
    let got = out
        .stdout
        .split("\"size\":")
        .nth(1)
        .and_then(|r| r.trim_start().split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|d| d.parse::<u64>().ok())
        .context("no size in oi-trace's output")?;
    if got != expect {
        // A wrong footprint fails the figure without hiding the others of the run.
        figures.push(Figure {
            name: format!(
                "protobuf: RepeatedPtrField of {n} messages: WRONG SIZE (value: oi-trace's bytes)"
            ),
            value: got as f64,
            baseline: expect as f64,
            unit: "B",
            goal: "= the fixture's bytes".into(),
            pass: Some(false),
        });
        return Ok(());
    }
    std::thread::sleep(Duration::from_millis(100));
    let lines = fixture.stdout.take();
    let mut calls: Vec<f64> = lines
        .iter()
        .filter_map(|l| value_of(l, "call_ns "))
        .collect();
    let native_cold = median(
        lines
            .iter()
            .filter_map(|l| value_of(l, "native_cold_ns "))
            .collect(),
    );
    // The sampled calls are the slow ones; the others cost nanoseconds.
    calls.sort_by(|a, b| b.total_cmp(a));
    calls.truncate(samples);
    let paused = median(calls);
    // `oi-trace: sample H of pid P: walk in the target 1.234 ms, pause …` (milliseconds).
    let walks: Vec<f64> = out
        .stderr
        .iter()
        .filter_map(|l| {
            let (_, rest) = l.split_once("walk in the target")?;
            value_of(rest.trim_start(), "")
        })
        .collect();
    let within = walks
        .iter()
        .filter(|&&ms| ms * 1e6 <= 1.3 * native_cold)
        .count();
    let n_walks = walks.len();
    let walked_ms = median(walks);
    if walked_ms.is_nan() || native_cold.is_nan() {
        bail!("no in-target or cold native timings: {:?}", out.stderr);
    }
    let walked = walked_ms * 1e6;
    let of_n = format!("RepeatedPtrField of {n} messages");
    figures.push(Figure {
        name: format!(
            "protobuf: walk in the target (stub's rdtsc), jit, {of_n}, median of {n_walks} \
             samples ({within} within 1.3×), vs native walk after the same sleep"
        ),
        value: walked / 1e3,
        baseline: native_cold / 1e3,
        unit: "µs",
        goal: "≤ 1.3× native".into(),
        pass: Some(walked <= 1.3 * native_cold),
    });
    figures.push(Figure {
        name: format!("protobuf: walk in the target, jit, {of_n}, vs native walk repeated (warm)"),
        value: walked / 1e3,
        baseline: native / 1e3,
        unit: "µs",
        goal: "report".into(),
        pass: None,
    });
    figures.push(Figure {
        name: format!("protobuf: pause per sample, jit, {of_n}, vs native walk repeated (warm)"),
        value: paused / 1e3,
        baseline: native / 1e3,
        unit: "µs",
        goal: "report".into(),
        pass: None,
    });
    Ok(())
}

//! `oi-trace calls` attached while the entry is running: the `calls_midrun` fixture's threads
//! spend nearly all their time three calls deep inside `midrun::handle` from the moment they
//! start, so every attach lands in the middle of a call. The tree must hold complete calls
//! only, exactly the fixture's shape times the calls counted, with no frame left open or
//! closed by the wrong return, whatever moment the probes arrive; the calls already running
//! are counted as entered before attaching. Twenty attaches at -O0 and twenty at -O2, the first
//! with one perf event per probe; the fixture's hundred functions make attaching slow enough
//! that calls start while only some probes are in place (without the program's `ARMED`
//! switch, that first attach gave partial trees and frames "left by an exception").

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use oi_e2e::{Fixture, FixtureBuild, Lcg, OiTrace, json, privileged};

use super::calls_by_path;

const SECOND: Duration = Duration::from_secs(1);
const THREADS: u64 = 2;
/// Calls of the entry each run counts (`--count`).
const ENTRIES: u64 = 6;
const RUNS: usize = 20;

fn fixture(variant: &str, flags: &[&str]) -> PathBuf {
    FixtureBuild::new("calls_midrun")
        .variant(variant, flags)
        .build()
}

/// The fixture's `shape OUTER INNER LEAF NAPS STEPS` line.
fn shape(fixture: &Fixture) -> [u64; 5] {
    let line = fixture
        .stdout
        .seen()
        .iter()
        .find(|l| l.starts_with("shape "))
        .expect("shape line")
        .clone();
    let n: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().expect("shape number"))
        .collect();
    [n[0], n[1], n[2], n[3], n[4]]
}

fn attach_mid_call_many_times(variant: &str, flags: &[&str]) {
    if !privileged() {
        return;
    }
    let binary = fixture(variant, flags);
    let fixture = Fixture::start(&binary, &[&THREADS.to_string()]);
    let [outer, inner, leaf, naps, steps] = shape(&fixture);
    let pid = fixture.pid.to_string();
    let count = ENTRIES.to_string();
    let mut rng = Lcg::from_clock("attach moments");
    let want = {
        let h = "midrun::handle";
        let o = format!("{h}/midrun::outer");
        let i = format!("{o}/midrun::inner");
        let l = format!("{i}/midrun::leaf");
        let leaves = ENTRIES * outer * inner * leaf;
        let mut want = BTreeMap::from([
            (h.to_string(), ENTRIES),
            (o.clone(), ENTRIES * outer),
            (i.clone(), ENTRIES * outer * inner),
            (l.clone(), leaves),
            (format!("{i}/midrun::nap"), ENTRIES * outer * inner * naps),
        ]);
        want.extend((0..steps).map(|k| (format!("{l}/midrun::step<{k}>"), leaves)));
        want
    };
    let mut entered_before = 0;
    for run in 0..RUNS {
        // A moment inside a call, at a different depth and phase each time.
        std::thread::sleep(Duration::from_micros(rng.below(3_000)));
        // The first attach with one perf event per probe: slow to attach (a wide window for
        // a partial attach, which is what this journey guards against) and slower to detach
        // (about 0.1 s per probe), so once.
        let per_probe = run == 0;
        let args = [
            "calls",
            "--pid",
            &pid,
            "--entry",
            "midrun::handle",
            "--count",
            &count,
            "--format",
            "json",
        ];
        let mut tracer = if per_probe {
            let env = [(
                "OI_TRACE_DISABLE_FEATURES",
                std::path::Path::new("uprobe-multi"),
            )];
            OiTrace::start_with_env(&args, &env)
        } else {
            OiTrace::start(&args)
        };
        tracer.stderr.expect("oi-trace: attached", 60 * SECOND);
        let out = tracer.finish(60 * SECOND);
        let context = format!("run {run} (per-probe {per_probe}): {:#?}", out.stderr);
        assert!(out.status.success(), "{context}");
        let report = json(out.stdout.trim());
        let got = calls_by_path(&report["tree"]);
        let wrong: Vec<String> = want
            .iter()
            .filter(|(path, n)| got.get(*path) != Some(n))
            .map(|(path, n)| format!("{path}: want {n}"))
            .chain(
                got.iter()
                    .filter(|(path, n)| want.get(*path) != Some(n))
                    .map(|(path, n)| format!("{path}: got {n}")),
            )
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}\n{context}");
        let counters = &report["counters"];
        for clean in [
            "abandoned",
            "unmatched",
            "deeper",
            "nodes_full",
            "threads_full",
        ] {
            assert_eq!(counters[clean], 0, "{clean}: {context}");
        }
        // Both threads were inside a call when the probes were armed (each spends all but a
        // few instructions of its loop inside handle), and none of those calls was counted.
        let before = counters["entered_before_attaching"]
            .as_u64()
            .expect("counter");
        assert!(
            before <= THREADS,
            "{before} calls entered before: {context}"
        );
        entered_before += before;
        assert!(
            !out.stderr
                .iter()
                .any(|l| l.contains("exception or longjmp")),
            "{context}"
        );
        fixture.assert_running();
    }
    // A thread is between two calls of handle for a few instructions only: nearly every
    // attach finds both inside one.
    assert!(
        entered_before >= RUNS as u64,
        "{entered_before} calls entered before attaching in {RUNS} runs"
    );
    assert!(fixture.finish().success());
}

#[test]
fn attached_mid_call_twenty_times_at_o0() {
    attach_mid_call_many_times("calls_midrun_o0", &["-O0"]);
}

#[test]
fn attached_mid_call_twenty_times_at_o2() {
    attach_mid_call_many_times("calls_midrun_o2", &["-O2", "-fomit-frame-pointer"]);
}

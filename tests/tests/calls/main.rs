//! `oi-trace calls` on live processes: the `calls` fixture counts, per path, every call it
//! makes beneath `shop::handle` and prints the counts; the tree oi-trace builds from its probes
//! must hold exactly those calls, at -O0 and at -O2 without frame pointers (tail calls, `.cold`
//! parts), PIE and not, with a function of a shared library, and with 16 threads at once. The
//! fixture also calls the same functions outside the entry (never counted), throws an exception
//! through two frames (later calls keep their parent), and sleeps a known time (a lower bound).
//! Every run leaves the fixture running, untraced, and able to finish its own work.

mod inject;
mod inject_edges;
mod midrun;
mod pprof;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use oi_e2e::{
    Finished, Fixture, FixtureBuild, OiTrace, SIGINT, SIGUSR1, TempDir, TestCgroup, json, maps_of,
    privileged, run_oi_trace,
};
use serde_json::Value;

const SECOND: Duration = Duration::from_secs(1);
/// The fixture's nap, in ns.
const NAP_NS: u64 = 1_000_000;
const CHECKSUM: &str = "shop::handle/lib::checksum";

fn fixture(variant: &str, flags: &[&str]) -> PathBuf {
    FixtureBuild::new("calls")
        .variant(variant, flags)
        .shared_lib("calls_lib")
        .build()
}

/// What the fixture printed: its per-path counts and the calls of each request.
struct Printed {
    paths: BTreeMap<String, u64>,
    requests: Vec<u64>,
}

/// Sends the go signal, waits for the fixture's report, and reads it.
fn run_fixture(fixture: &mut Fixture) -> Printed {
    fixture.signal(SIGUSR1);
    fixture.stdout.expect("done", 120 * SECOND);
    let mut printed = Printed {
        paths: BTreeMap::new(),
        requests: Vec::new(),
    };
    for line in fixture.stdout.seen() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("path"), Some(path), Some(n)) => {
                printed.paths.insert(path.to_string(), n.parse().unwrap());
            }
            (Some("request"), Some(_), Some(n)) => printed.requests.push(n.parse().unwrap()),
            _ => {}
        }
    }
    assert!(!printed.paths.is_empty(), "the fixture printed no counts");
    printed
}

/// Every node of a JSON tree by path (`a/b/c`), with its object.
fn nodes(tree: &Value) -> BTreeMap<String, Value> {
    fn walk(node: &Value, prefix: &str, out: &mut BTreeMap<String, Value>) {
        let name = node["name"].as_str().expect("name");
        let path = if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}/{name}")
        };
        assert!(
            out.insert(path.clone(), node.clone()).is_none(),
            "two children of one name at {path}"
        );
        for child in node["children"].as_array().expect("children") {
            walk(child, &path, out);
        }
    }
    let mut out = BTreeMap::new();
    walk(tree, "", &mut out);
    out
}

fn calls_by_path(tree: &Value) -> BTreeMap<String, u64> {
    nodes(tree)
        .into_iter()
        .map(|(path, node)| (path, node["calls"].as_u64().expect("calls")))
        .collect()
}

/// The checks every exact run shares: the tree is the fixture's count, path for path
/// (`lib::checksum` only when `with_library`), self ≤ total everywhere, the nap lasts at least
/// its time, and the summary on stderr gives the hits and the probe cost.
fn assert_exact(report: &Value, printed: &Printed, with_library: bool, out: &Finished) {
    let mut want = printed.paths.clone();
    if !with_library {
        want.remove(CHECKSUM);
    }
    assert_eq!(calls_by_path(&report["tree"]), want, "report: {report}");
    for (path, node) in nodes(&report["tree"]) {
        let (total, own) = (
            node["total_ns"].as_u64().unwrap(),
            node["self_ns"].as_u64().unwrap(),
        );
        assert!(own <= total, "{path}: self {own} > total {total}");
        let children: u64 = node["children"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["total_ns"].as_u64().unwrap())
            .sum();
        assert!(
            children <= total,
            "{path}: children {children} > total {total}"
        );
    }
    let nap = &nodes(&report["tree"])["shop::handle/shop::nap"];
    let per_call = nap["total_ns"].as_u64().unwrap() / nap["calls"].as_u64().unwrap();
    assert!(per_call >= NAP_NS, "a nap took {per_call} ns < {NAP_NS}");
    assert_eq!(report["entry"], "shop::handle");
    let hits = report["probe_hits"].as_u64().unwrap();
    let entries = want["shop::handle"];
    let calls: u64 = want.values().sum();
    // Two hits per call beneath the entry (entry and return), plus the calls outside.
    assert!(hits >= 2 * calls, "{hits} hits for {calls} calls");
    let summary = out
        .stderr
        .iter()
        .find(|l| l.contains("probe hits ("))
        .unwrap_or_else(|| panic!("no summary: {:#?}", out.stderr));
    assert!(
        summary.starts_with(&format!(
            "oi-trace: {entries} call(s) of shop::handle completed; {} probe hits",
            thousands(hits)
        )),
        "{summary}"
    );
    assert!(
        out.stderr.iter().any(
            |l| l.starts_with("oi-trace: probe cost measured at start: ")
                && l.ends_with("nothing subtracted")
        ),
        "{:#?}",
        out.stderr
    );
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Traces `binary` run with THREADS × REQUESTS until `--count` entries completed; returns the
/// fixture's counts, oi-trace's JSON and its output.
fn traced_run(
    binary: &Path,
    threads: u32,
    requests: u32,
    extra: &[&str],
) -> (Printed, Value, Finished) {
    traced_run_with(binary, threads, requests, extra, Scope::Pid, &[])
}

/// How `traced_run_with` names the fixture to oi-trace.
enum Scope {
    Pid,
    /// The fixture is moved into a fresh cgroup, which oi-trace is given.
    Cgroup,
}

fn traced_run_with(
    binary: &Path,
    threads: u32,
    requests: u32,
    extra: &[&str],
    scope: Scope,
    env: &[(&str, &Path)],
) -> (Printed, Value, Finished) {
    let mut fixture = Fixture::start(binary, &[&threads.to_string(), &requests.to_string()]);
    let pid = fixture.pid.to_string();
    let count = (threads * requests).to_string();
    let cgroup = match scope {
        Scope::Pid => None,
        Scope::Cgroup => {
            let cgroup = TestCgroup::new("calls");
            cgroup.add(fixture.pid);
            Some(cgroup)
        }
    };
    let cgroup_path = cgroup
        .as_ref()
        .map(|c| c.path().to_str().unwrap().to_string());
    let mut args = match &cgroup_path {
        None => vec!["calls", "--pid", &pid],
        Some(path) => vec!["calls", "--cgroup", path],
    };
    args.extend([
        "--entry",
        "shop::handle",
        "--count",
        &count,
        "--format",
        "json",
    ]);
    args.extend_from_slice(extra);
    let before = files_mapped(fixture.pid);
    let mut tracer = OiTrace::start_with_env(&args, env);
    tracer.stderr.expect("oi-trace: attached", 60 * SECOND);
    let printed = run_fixture(&mut fixture);
    let out = tracer.finish(60 * SECOND);
    assert!(out.status.success(), "oi-trace failed: {out:#?}");
    fixture.assert_running();
    // Its threads and allocations change its anonymous mappings; nothing may map a file.
    assert_eq!(
        files_mapped(fixture.pid),
        before,
        "files mapped into the fixture changed"
    );
    assert!(fixture.finish().success());
    let report = json(out.stdout.trim());
    drop(cgroup);
    (printed, report, out)
}

/// The fixture's file mappings (the `[uprobes]` page left out, as `maps_of` does).
fn files_mapped(pid: i32) -> Vec<String> {
    maps_of(pid)
        .into_iter()
        .filter(|l| {
            l.split_whitespace()
                .nth(5)
                .is_some_and(|p| p.starts_with('/'))
        })
        .collect()
}

fn is_pie(binary: &Path) -> bool {
    let bytes = std::fs::read(binary).expect("read fixture");
    // e_type at offset 16: 3 is ET_DYN (position-independent), 2 is ET_EXEC.
    u16::from_le_bytes([bytes[16], bytes[17]]) == 3
}

#[test]
fn exact_tree_at_o0_with_a_chrome_trace_of_the_first_entries() {
    if !privileged() {
        return;
    }
    let binary = fixture("calls_o0", &["-O0"]);
    assert!(is_pie(&binary));
    let dir = TempDir::new("calls-o0");
    let trace = dir.file("trace.json");
    let (printed, report, out) = traced_run(
        &binary,
        1,
        10,
        &[
            "--chrome",
            trace.to_str().unwrap(),
            "--trace-entries",
            "2",
            "-v",
        ],
    );
    assert_exact(&report, &printed, false, &out);
    // -v: the kernel side's decisions, through aya-log; every exception closed two frames.
    let closed = out
        .stderr
        .iter()
        .filter(|l| l.starts_with("oi-trace: ebpf: debug: frame of function "))
        .count();
    let thrown = printed.requests.len().div_ceil(2);
    assert_eq!(closed, 2 * thrown, "{:#?}", out.stderr);
    // The first two entries, call by call: every call the fixture made in requests 0 and 1
    // (lib::checksum is not instrumented), on one thread, the entry at depth 0.
    let trace = json(&std::fs::read_to_string(&trace).expect("chrome trace"));
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    for (window, request) in [(1, 0), (2, 1)] {
        let of_window: Vec<&Value> = events
            .iter()
            .filter(|e| e["args"]["entry_call"] == window)
            .collect();
        assert_eq!(
            of_window.len() as u64,
            printed.requests[request] - 1,
            "calls traced of entry {window}"
        );
        let roots: Vec<&&Value> = of_window
            .iter()
            .filter(|e| e["args"]["depth"] == 0)
            .collect();
        assert_eq!(roots.len(), 1);
        assert_eq!(roots[0]["name"], "shop::handle");
        assert!(of_window.iter().all(|e| e["ph"] == "X"));
    }
    assert!(
        events
            .iter()
            .all(|e| e["args"]["entry_call"].as_u64() <= Some(2))
    );
    // Request 0 throws: thrower and middle were left by the exception.
    let left: Vec<&str> = events
        .iter()
        .filter(|e| e["args"]["entry_call"] == 1 && e["args"]["left_by_exception"] == true)
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(left, ["shop::middle", "shop::thrower"]);
}

#[test]
fn exact_tree_at_o2_without_frame_pointers() {
    if !privileged() {
        return;
    }
    let binary = fixture("calls_o2", &["-O2", "-fomit-frame-pointer"]);
    assert!(is_pie(&binary));
    let dir = TempDir::new("calls-o2");
    let folded = dir.file("calls.folded");
    let (printed, report, out) = traced_run(
        &binary,
        1,
        12,
        &["--folded", folded.to_str().unwrap(), "--histograms"],
    );
    assert_exact(&report, &printed, false, &out);
    // The nap's histogram: every call, none in a bucket that ends below the nap's time.
    let nap = report["histograms"]
        .as_array()
        .expect("histograms")
        .iter()
        .find(|h| h["name"] == "shop::nap")
        .expect("a histogram of shop::nap");
    let buckets = nap["buckets"].as_array().unwrap();
    let calls: u64 = buckets.iter().map(|b| b[2].as_u64().unwrap()).sum();
    assert_eq!(calls, printed.paths["shop::handle/shop::nap"]);
    assert!(
        buckets.iter().all(|b| b[1].as_u64().unwrap() > NAP_NS),
        "{nap}"
    );
    // Folded stacks: one line per path, weighted by self time; the weights of a path and of
    // everything beneath it add up to its total time.
    let text = std::fs::read_to_string(&folded).expect("folded");
    let weights: BTreeMap<String, u64> = text
        .lines()
        .map(|l| {
            let (stack, w) = l.rsplit_once(' ').unwrap();
            (stack.replace(';', "/"), w.parse().unwrap())
        })
        .collect();
    for (path, node) in nodes(&report["tree"]) {
        let beneath: u64 = weights
            .iter()
            .filter(|(p, _)| **p == path || p.starts_with(&format!("{path}/")))
            .map(|(_, w)| w)
            .sum();
        assert_eq!(beneath, node["total_ns"].as_u64().unwrap(), "{path}");
    }
}

#[test]
fn sixteen_threads_merge_exactly_with_a_shared_library_function() {
    if !privileged() {
        return;
    }
    let binary = fixture("calls_o2", &["-O2", "-fomit-frame-pointer"]);
    let (printed, report, out) = traced_run(
        &binary,
        16,
        20,
        &["--filter", "shop::*", "--filter", "lib::*"],
    );
    assert_eq!(printed.paths["shop::handle"], 16 * 20);
    assert_exact(&report, &printed, true, &out);
}

/// Kernels without multi-uprobe links get one perf event per probe: the same tree.
#[test]
fn exact_tree_with_one_perf_event_per_probe() {
    if !privileged() {
        return;
    }
    let binary = fixture("calls_o2", &["-O2", "-fomit-frame-pointer"]);
    let (printed, report, out) = traced_run_with(
        &binary,
        2,
        6,
        &[],
        Scope::Pid,
        &[("OI_TRACE_DISABLE_FEATURES", Path::new("uprobe-multi"))],
    );
    assert!(
        out.stderr.iter().any(
            |l| l.starts_with("oi-trace: attached") && l.contains("(one perf event per probe)")
        ),
        "{:#?}",
        out.stderr
    );
    assert_exact(&report, &printed, false, &out);
}

/// Every process of a cgroup: the same tree, with no pid in the report.
#[test]
fn exact_tree_of_a_cgroup() {
    if !privileged() {
        return;
    }
    let binary = fixture("calls_o0", &["-O0"]);
    let (printed, report, out) = traced_run_with(&binary, 1, 5, &[], Scope::Cgroup, &[]);
    assert_eq!(report["pid"], Value::Null);
    assert_exact(&report, &printed, false, &out);
}

/// `--min-time`: what stays is exact and at least that long; the naps (4 × 1 ms) stay.
#[test]
fn min_time_hides_short_nodes_only() {
    if !privileged() {
        return;
    }
    let binary = fixture("calls_o0", &["-O0"]);
    let (printed, report, _) = traced_run(&binary, 1, 4, &["--min-time", "3ms"]);
    let shown = nodes(&report["tree"]);
    assert!(shown.contains_key("shop::handle/shop::nap"), "{report}");
    for (path, node) in &shown {
        assert_eq!(node["calls"].as_u64(), Some(printed.paths[path]), "{path}");
        if path != "shop::handle" {
            assert!(
                node["total_ns"].as_u64().unwrap() >= 3_000_000,
                "{path}: {node}"
            );
        }
    }
}

/// Not PIE, `--depth 1`, the text view, histograms, and Ctrl-C instead of `--count`: the tree
/// is printed at SIGINT and holds every call made until then.
#[test]
fn depth_limit_text_and_ctrl_c_on_a_non_pie_binary() {
    if !privileged() {
        return;
    }
    let binary = fixture("calls_nopie", &["-O0", "-no-pie"]);
    assert!(!is_pie(&binary));
    let mut fixture = Fixture::start(&binary, &["1", "10"]);
    let pid = fixture.pid.to_string();
    let tracer = OiTrace::attached(&[
        "calls",
        "--pid",
        &pid,
        "--entry",
        "shop::handle",
        "--depth",
        "1",
        "--histograms",
    ]);
    let printed = run_fixture(&mut fixture);
    tracer.signal(SIGINT);
    let out = tracer.finish(60 * SECOND);
    assert!(out.status.success(), "oi-trace failed: {out:#?}");
    fixture.assert_running();
    assert!(fixture.finish().success());

    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].starts_with("calls beneath shop::handle in pid "),
        "{}",
        out.stdout
    );
    let row = |name: &str| {
        lines
            .iter()
            .find(|l| l.trim_end().ends_with(name) || l.contains(&format!("{name}  (")))
            .unwrap_or_else(|| panic!("no row for {name}: {}", out.stdout))
            .to_string()
    };
    let calls_of = |line: &str| -> u64 {
        line.split_whitespace()
            .next()
            .unwrap()
            .replace(',', "")
            .parse()
            .unwrap()
    };
    let p = &printed.paths;
    assert_eq!(calls_of(&row("shop::handle")), p["shop::handle"]);

    assert_eq!(
        calls_of(&row("├─ shop::parse")),
        p["shop::handle/shop::parse"]
    );
    // Below the limit: counted on the deepest node, not timed, not shown.
    let parse = row("├─ shop::parse");
    assert!(
        parse.contains(&format!(
            "({} deeper call(s) not timed (--depth))",
            p["shop::handle/shop::parse/shop::leaf"]
        )),
        "{parse}"
    );
    // Every recursion below the first level lands on the first level's node.
    let deeper_recursion: u64 = p
        .iter()
        .filter(|(k, _)| k.starts_with("shop::handle/shop::recurse/"))
        .map(|(_, n)| n)
        .sum();
    let recurse = row("shop::recurse");
    assert!(
        recurse.contains(&format!("({deeper_recursion} deeper call(s)")),
        "{recurse}"
    );
    assert!(
        !out.stdout.contains("│  "),
        "nothing below level 1: {}",
        out.stdout
    );
    // A latency histogram per function.
    assert!(
        out.stdout.contains(&format!(
            "latency of shop::nap ({} calls)",
            p["shop::handle/shop::nap"]
        )),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr
            .iter()
            .any(|l| l.contains("call(s) below --depth counted on their deepest node")),
        "{:#?}",
        out.stderr
    );
}

#[test]
fn bad_input_is_one_line_and_status_2() {
    if !privileged() {
        return;
    }
    let binary = fixture("calls_o0", &["-O0"]);
    let fixture = Fixture::start(&binary, &["1", "1"]);
    let pid = fixture.pid.to_string();
    for (args, expected) in [
        (
            vec!["calls", "--pid", &pid, "--entry", "shop::handel"],
            "symbol \"shop::handel\" not found in pid",
        ),
        (
            vec![
                "calls",
                "--pid",
                &pid,
                "--entry",
                "shop::handle",
                "--depth",
                "500",
            ],
            "--depth 500: at most 127 levels",
        ),
        (
            vec![
                "calls",
                "--pid",
                &pid,
                "--entry",
                "shop::handle",
                "--count",
                "0",
            ],
            "--count must be at least 1",
        ),
        (
            vec!["calls", "--pid", "999999999", "--entry", "shop::handle"],
            "no such process",
        ),
        (vec!["calls", "--pid", &pid], "--entry"),
    ] {
        let out = run_oi_trace(&args, 30 * SECOND);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:#?}");
        assert_eq!(out.stderr.len(), 1, "{args:?}: {out:#?}");
        assert!(
            out.stderr[0].starts_with("oi-trace: error: ") && out.stderr[0].contains(expected),
            "{args:?}: {:?}",
            out.stderr[0]
        );
        assert!(out.stdout.is_empty());
    }
    fixture.assert_running();
}

//! `oi-trace calls --mechanism inject`: the same fixture as the uprobe journeys, its calls
//! timed inside the process by patched entries. The tree must hold exactly the fixture's own
//! counts, less the functions oi-trace listed as left untimed (at -O2, `shop::leaf` is four
//! bytes, shorter than the patch): their calls vanish and nothing else moves. Exceptions pass
//! through two hooked frames on every even request, and the target lives on. Afterwards every
//! byte of every executable mapping equals what it was before oi-trace attached, nothing of
//! ours is mapped, and the fixture finishes its own work.

use std::{collections::BTreeMap, path::Path};

use oi_e2e::{Finished, Fixture, OiTrace, maps_of, privileged, run_oi_trace};
use oi_trace::inferior::remote;

use super::{NAP_NS, Printed, SECOND, calls_by_path, files_mapped, fixture, nodes, run_fixture};

/// Every executable file mapping of `pid` and its bytes.
pub(super) fn code_of(pid: i32) -> BTreeMap<String, Vec<u8>> {
    maps_of(pid)
        .into_iter()
        .filter(|l| l.contains(" r-xp ") && l.split_whitespace().nth(5).is_some())
        .map(|l| {
            let range = l.split_whitespace().next().unwrap().to_string();
            let (lo, hi) = range.split_once('-').unwrap();
            let (lo, hi) = (
                u64::from_str_radix(lo, 16).unwrap(),
                u64::from_str_radix(hi, 16).unwrap(),
            );
            let mut bytes = vec![0u8; (hi - lo) as usize];
            remote::read_memory(pid, lo, &mut bytes).expect("read code");
            (l, bytes)
        })
        .collect()
}

/// The functions oi-trace said it left untimed, by tree name.
pub(super) fn untimed(out: &Finished) -> Vec<String> {
    out.stderr
        .iter()
        .filter_map(|l| {
            l.strip_prefix("oi-trace:   ")
                .or_else(|| l.strip_prefix("oi-trace: left untimed: "))
        })
        .map(|l| {
            let name = l.split_once(": ").map_or(l, |(name, _)| name);
            name.split('(').next().unwrap().to_string()
        })
        .collect()
}

/// The fixture's counts with the untimed functions' calls taken out: a path through one is
/// the same path without it.
pub(super) fn expected(
    printed: &Printed,
    untimed: &[String],
    with_library: bool,
) -> BTreeMap<String, u64> {
    let mut want = BTreeMap::new();
    for (path, n) in &printed.paths {
        if !with_library && path == super::CHECKSUM {
            continue;
        }
        let parts: Vec<&str> = path.split('/').collect();
        if untimed.iter().any(|u| u == parts.last().unwrap()) {
            continue;
        }
        let kept: Vec<&str> = parts
            .into_iter()
            .filter(|p| !untimed.iter().any(|u| u == p))
            .collect();
        *want.entry(kept.join("/")).or_insert(0) += n;
    }
    want
}

/// Traces `binary` (THREADS × REQUESTS) in the target until every entry completed; checks
/// the tree, the exceptions, the nap, and that the fixture is left as it was.
fn journey(binary: &Path, threads: u32, requests: u32, extra: &[&str], with_library: bool) {
    let mut fixture = Fixture::start(binary, &[&threads.to_string(), &requests.to_string()]);
    let pid = fixture.pid.to_string();
    let count = (threads * requests).to_string();
    let code_before = code_of(fixture.pid);
    let files_before = files_mapped(fixture.pid);
    let mut args = vec![
        "calls",
        "--pid",
        &pid,
        "--entry",
        "shop::handle",
        "--count",
        &count,
        "--format",
        "json",
        "--mechanism",
        "inject",
    ];
    args.extend_from_slice(extra);
    let mut tracer = OiTrace::start(&args);
    tracer.stderr.expect("oi-trace: attached", 60 * SECOND);
    // While attached: our segment is there, and the entry jumps to it.
    assert!(
        maps_of(fixture.pid)
            .iter()
            .any(|l| l.contains("/memfd:oi-trace-inject")),
        "the data part is mapped while attached"
    );
    assert_ne!(code_of(fixture.pid), code_before, "nothing was patched");
    let printed = run_fixture(&mut fixture);
    let out = tracer.finish(60 * SECOND);
    assert!(out.status.success(), "oi-trace failed: {out:#?}");
    fixture.assert_running();
    assert_eq!(
        code_of(fixture.pid),
        code_before,
        "code bytes differ afterwards"
    );
    assert_eq!(
        files_mapped(fixture.pid),
        files_before,
        "file mappings changed"
    );
    let ours: Vec<String> = maps_of(fixture.pid)
        .into_iter()
        .filter(|l| {
            l.contains("oi-trace")
                || (l.split_whitespace().count() == 5
                    && l.split_whitespace().nth(1).is_some_and(|p| p.contains('x')))
        })
        .collect();
    assert!(ours.is_empty(), "left mapped: {ours:#?}");

    let report = super::json(out.stdout.trim());
    let untimed = untimed(&out);
    assert!(
        !untimed.iter().any(|u| u == "shop::handle"),
        "{:#?}",
        out.stderr
    );
    let want = expected(&printed, &untimed, with_library);
    assert_eq!(calls_by_path(&report["tree"]), want, "untimed: {untimed:?}");
    for (path, node) in nodes(&report["tree"]) {
        let (total, own) = (
            node["total_ns"].as_u64().unwrap(),
            node["self_ns"].as_u64().unwrap(),
        );
        assert!(own <= total, "{path}: self {own} > total {total}");
    }
    let nap = &nodes(&report["tree"])["shop::handle/shop::nap"];
    let per_call = nap["total_ns"].as_u64().unwrap() / nap["calls"].as_u64().unwrap();
    assert!(per_call >= NAP_NS, "a nap took {per_call} ns < {NAP_NS}");
    // Every even request threw through thrower and middle: each hooked one was closed as
    // unwound, and nothing else was.
    let throws = u64::from(threads) * u64::from(requests.div_ceil(2));
    let hooked_frames = ["shop::thrower", "shop::middle"]
        .iter()
        .filter(|f| !untimed.iter().any(|u| u == *f))
        .count() as u64;
    assert_eq!(
        report["counters"]["abandoned"].as_u64(),
        Some(throws * hooked_frames),
        "{report}"
    );
    assert_eq!(report["counters"]["unmatched"].as_u64(), Some(0));
    assert!(
        out.stderr.iter().any(|l| l.starts_with(&format!(
            "oi-trace: {} call(s) of shop::handle completed; ",
            super::thousands(want["shop::handle"])
        ))),
        "{:#?}",
        out.stderr
    );
    assert!(fixture.finish().success());
}

#[test]
fn inject_exact_tree_at_o0() {
    if !privileged() {
        return;
    }
    journey(&fixture("calls_o0", &["-O0"]), 1, 10, &[], false);
}

#[test]
fn inject_exact_tree_at_o2_without_frame_pointers() {
    if !privileged() {
        return;
    }
    journey(
        &fixture("calls_o2", &["-O2", "-fomit-frame-pointer"]),
        1,
        12,
        &[],
        false,
    );
}

#[test]
fn inject_sixteen_threads_exactly_with_a_shared_library_function() {
    if !privileged() {
        return;
    }
    journey(
        &fixture("calls_o2", &["-O2", "-fomit-frame-pointer"]),
        16,
        20,
        &["--filter", "shop::*", "--filter", "lib::*"],
        true,
    );
}

#[test]
fn inject_refuses_what_it_cannot_do_in_one_line() {
    if !privileged() {
        return;
    }
    for option in ["--histograms", "--chrome=/dev/null"] {
        let out = run_oi_trace(
            &[
                "calls",
                "--pid",
                "1",
                "--entry",
                "main",
                "--mechanism",
                "inject",
                option,
            ],
            30 * SECOND,
        );
        assert_eq!(out.status.code(), Some(2), "{out:#?}");
        let option = option.split('=').next().unwrap();
        assert!(
            out.stderr.len() == 1
                && out.stderr[0].contains(&format!("{option} needs --mechanism uprobes")),
            "{:#?}",
            out.stderr
        );
    }
}

#[test]
fn inject_sigkill_of_oi_trace_mid_run_is_undone_by_its_guardian() {
    if !privileged() {
        return;
    }
    let binary = fixture("calls_o2", &["-O2", "-fomit-frame-pointer"]);
    let mut fixture = Fixture::start(&binary, &["16", "400"]);
    let pid = fixture.pid.to_string();
    let code_before = code_of(fixture.pid);
    let files_before = files_mapped(fixture.pid);
    let tracer = OiTrace::attached(&[
        "calls",
        "--pid",
        &pid,
        "--entry",
        "shop::handle",
        "--mechanism",
        "inject",
    ]);
    // 16 threads inside hooked calls, throwing through hooked frames, when oi-trace dies.
    fixture.signal(oi_e2e::SIGUSR1);
    std::thread::sleep(std::time::Duration::from_millis(150));
    tracer.signal(oi_e2e::SIGKILL);
    let killed = std::time::Instant::now();
    let restored = || {
        code_of(fixture.pid) == code_before
            && !maps_of(fixture.pid)
                .iter()
                .any(|l| l.contains("oi-trace-inject"))
            && oi_trace::inferior::procfs::ProcessInfo::tracer_of(fixture.pid).is_none()
    };
    while !restored() && killed.elapsed() < 5 * SECOND {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let took = killed.elapsed();
    eprintln!(
        "guardian restore after SIGKILL of oi-trace: {} ms",
        took.as_millis()
    );
    assert!(restored(), "code bytes, maps and tracer restored");
    assert!(took < 3 * SECOND, "within 3 s, not {took:?}");
    let out = tracer.finish(10 * SECOND);
    assert!(!out.status.success(), "oi-trace was killed");
    // The fixture finishes its own work: every request, every exception caught.
    let printed = run_fixture_started(&mut fixture);
    assert_eq!(printed.paths["shop::handle"], 16 * 400);
    fixture.assert_running();
    assert_eq!(
        files_mapped(fixture.pid),
        files_before,
        "file mappings changed"
    );
    assert!(fixture.finish().success());
}

/// [`run_fixture`] for a fixture already signalled.
fn run_fixture_started(fixture: &mut Fixture) -> Printed {
    fixture.stdout.expect("done", 120 * SECOND);
    let mut paths = BTreeMap::new();
    for line in fixture.stdout.seen() {
        let mut words = line.split_whitespace();
        if let (Some("path"), Some(path), Some(n)) = (words.next(), words.next(), words.next()) {
            paths.insert(path.to_string(), n.parse().unwrap());
        }
    }
    Printed {
        paths,
        requests: Vec::new(),
    }
}

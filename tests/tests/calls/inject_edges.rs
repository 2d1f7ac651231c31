//! `oi-trace calls --mechanism inject` where control does not simply call and return
//! (`calls_edges.cpp`): an exception through five hooked frames, `longjmp` and `siglongjmp`
//! (also out of the entry function), a signal handler's calls, eight arguments and varargs,
//! two coroutines ping-ponging with `swapcontext`, and an assembly function whose entry bytes
//! a branch lands in. Each mode runs five times at -O0 and at -O2 without frame pointers. Every
//! run: the fixture's own results are right (it computes each both through the hooked
//! functions and without them), it finishes its work, its code bytes and file mappings are
//! the originals afterwards and nothing of ours is mapped; the tree holds exactly the calls
//! the fixture counted, less the functions oi-trace left untimed.

use std::{collections::BTreeMap, path::PathBuf};

use oi_e2e::{Finished, Fixture, FixtureBuild, OiTrace, SIGUSR1, maps_of, privileged};
use serde_json::Value;

use super::{
    Printed, SECOND, calls_by_path, files_mapped,
    inject::{code_of, expected, untimed},
    nodes,
};

const RUNS: usize = 5;

fn edges(optimised: bool) -> PathBuf {
    if optimised {
        FixtureBuild::new("calls_edges")
            .variant("calls_edges_o2", &["-O2", "-fomit-frame-pointer"])
            .build()
    } else {
        FixtureBuild::new("calls_edges")
            .variant("calls_edges_o0", &["-O0"])
            .build()
    }
}

/// One traced run of a mode.
struct Run {
    printed: Printed,
    /// The fixture's "count NAME N" lines.
    counts: BTreeMap<String, u64>,
    report: Value,
    out: Finished,
    untimed: Vec<String>,
}

impl Run {
    fn count(&self, name: &str) -> u64 {
        *self
            .counts
            .get(name)
            .unwrap_or_else(|| panic!("the fixture printed no count {name}"))
    }

    fn inject(&self, name: &str) -> u64 {
        self.report["inject"][name]
            .as_u64()
            .unwrap_or_else(|| panic!("no inject.{name}: {}", self.report))
    }

    /// How many of `functions` are timed.
    fn hooked(&self, functions: &[&str]) -> u64 {
        functions
            .iter()
            .filter(|f| !self.untimed.iter().any(|u| u == *f))
            .count() as u64
    }

    /// The tree, path → calls, without the nodes `drop` says to leave out.
    fn tree(&self, drop: &dyn Fn(&str) -> bool) -> BTreeMap<String, u64> {
        calls_by_path(&self.report["tree"])
            .into_iter()
            .filter(|(path, _)| !drop(path))
            .collect()
    }
}

/// Traces `calls_edges MODE N` until its N calls of edge::entry completed, and checks what
/// every mode shares.
fn run(optimised: bool, mode: &str, n: u64) -> Run {
    let binary = edges(optimised);
    let mut fixture = Fixture::start(&binary, &[mode, &n.to_string()]);
    let pid = fixture.pid.to_string();
    let count = n.to_string();
    let code_before = code_of(fixture.pid);
    let files_before = files_mapped(fixture.pid);
    let mut tracer = OiTrace::start(&[
        "calls",
        "--pid",
        &pid,
        "--entry",
        "edge::entry",
        "--filter",
        "edge::*",
        "--count",
        &count,
        "--format",
        "json",
        "--mechanism",
        "inject",
    ]);
    tracer.stderr.expect("oi-trace: attached", 60 * SECOND);
    fixture.signal(SIGUSR1);
    fixture.stdout.expect("done", 120 * SECOND);
    let mut printed = Printed {
        paths: BTreeMap::new(),
        requests: Vec::new(),
    };
    let mut counts = BTreeMap::new();
    let mut checks = 0;
    for line in fixture.stdout.seen() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["path", path, n] => {
                printed.paths.insert(path.to_string(), n.parse().unwrap());
            }
            ["count", name, n] => {
                counts.insert(name.to_string(), n.parse().unwrap());
            }
            ["check", name, got, want] => {
                assert_eq!(got, want, "{mode}: the fixture's {name} is wrong");
                checks += 1;
            }
            _ => {}
        }
    }
    assert!(checks > 0, "{mode}: the fixture checked nothing");
    let out = tracer.finish(60 * SECOND);
    assert!(out.status.success(), "{mode}: oi-trace failed: {out:#?}");
    fixture.assert_running();
    assert_eq!(
        code_of(fixture.pid),
        code_before,
        "{mode}: code bytes differ afterwards"
    );
    assert_eq!(
        files_mapped(fixture.pid),
        files_before,
        "{mode}: file mappings changed"
    );
    let ours: Vec<String> = maps_of(fixture.pid)
        .into_iter()
        .filter(|l| {
            l.contains("oi-trace")
                || (l.split_whitespace().count() == 5
                    && l.split_whitespace().nth(1).is_some_and(|p| p.contains('x')))
        })
        .collect();
    assert!(ours.is_empty(), "{mode}: left mapped: {ours:#?}");
    assert!(fixture.finish().success(), "{mode}: the fixture failed");

    let report = super::json(out.stdout.trim());
    let untimed = untimed(&out);
    assert!(
        !untimed.iter().any(|u| u == "edge::entry"),
        "{:#?}",
        out.stderr
    );
    let run = Run {
        printed,
        counts,
        report,
        out,
        untimed,
    };
    assert_eq!(
        run.report["counters"]["unmatched"].as_u64(),
        Some(0),
        "{mode}: {}",
        run.report
    );
    for what in ["dropped", "shadow_full", "no_slot"] {
        assert_eq!(run.inject(what), 0, "{mode}: {what}: {}", run.report);
    }
    assert_eq!(
        run.report["inject"]["untimed"].as_array().map(Vec::len),
        Some(run.untimed.len()),
        "{mode}: the JSON and stderr list the same functions left untimed"
    );
    for (path, node) in nodes(&run.report["tree"]) {
        let (total, own) = (
            node["total_ns"].as_u64().unwrap(),
            node["self_ns"].as_u64().unwrap(),
        );
        assert!(own <= total, "{mode}: {path}: self {own} > total {total}");
    }
    run
}

fn exception_through_five_hooked_frames(optimised: bool) {
    for _ in 0..RUNS {
        let n = 200;
        let r = run(optimised, "throw5", n);
        let want = expected(&r.printed, &r.untimed, true);
        assert_eq!(r.tree(&|_| false), want, "untimed: {:?}", r.untimed);
        // Every even request threw through f1..f5: each hooked one closed as unwound.
        let frames = r.hooked(&["edge::f1", "edge::f2", "edge::f3", "edge::f4", "edge::f5"]);
        assert_eq!(r.count("throws"), n / 2);
        assert_eq!(
            r.report["counters"]["abandoned"].as_u64(),
            Some(r.count("throws") * frames),
            "{}",
            r.report
        );
        // The call made after each catch is timed: it sleeps 200 µs.
        let after = &nodes(&r.report["tree"])["edge::entry/edge::catcher/edge::after"];
        let per_call = after["total_ns"].as_u64().unwrap() / after["calls"].as_u64().unwrap();
        assert!(per_call >= 200_000, "after took {per_call} ns < 200 µs");
    }
}

#[test]
fn inject_exception_through_five_hooked_frames_at_o0() {
    if privileged() {
        exception_through_five_hooked_frames(false);
    }
}

#[test]
fn inject_exception_through_five_hooked_frames_at_o2() {
    if privileged() {
        exception_through_five_hooked_frames(true);
    }
}

fn longjmp_across_hooked_frames(optimised: bool) {
    for _ in 0..RUNS {
        let n = 200;
        let r = run(optimised, "longjmp", n);
        let want = expected(&r.printed, &r.untimed, true);
        assert_eq!(r.tree(&|_| false), want, "untimed: {:?}", r.untimed);
        assert_eq!(want["edge::entry"], n);
        // A jump back to the jumper leaves d1..d4; a jump out to main leaves the entry and
        // the jumper too. All are closed by the next hooked call, as unwound.
        let inner = r.hooked(&["edge::d1", "edge::d2", "edge::d3", "edge::d4"]);
        let outer = r.hooked(&["edge::entry", "edge::jumper"]);
        let (jumps, out) = (r.count("jumps"), r.count("jumped_out"));
        assert_eq!(out, n / 5);
        assert_eq!(
            r.report["counters"]["abandoned"].as_u64(),
            Some(jumps * inner + out * outer),
            "{}",
            r.report
        );
    }
}

#[test]
fn inject_longjmp_across_hooked_frames_at_o0() {
    if privileged() {
        longjmp_across_hooked_frames(false);
    }
}

#[test]
fn inject_longjmp_across_hooked_frames_at_o2() {
    if privileged() {
        longjmp_across_hooked_frames(true);
    }
}

fn signal_handler_calls(optimised: bool) {
    for _ in 0..RUNS {
        let n = 300;
        let r = run(optimised, "signal", n);
        assert!(
            !r.untimed.iter().any(|u| u == "edge::tick"),
            "{:?}",
            r.untimed
        );
        let handler = |path: &str| path.contains("edge::tick");
        let want = expected(&r.printed, &r.untimed, true);
        assert_eq!(r.tree(&handler), want, "untimed: {:?}", r.untimed);
        // The handler's calls show under the call they interrupted; those that interrupted
        // a stub (tick, and tock beneath it) are counted instead.
        let tree = r.tree(&|path| !handler(path));
        let ticks: u64 = tree
            .iter()
            .filter(|(p, _)| p.ends_with("/edge::tick"))
            .map(|(_, n)| n)
            .sum();
        let tocks: u64 = tree
            .iter()
            .filter(|(p, _)| p.ends_with("/edge::tick/edge::tock"))
            .map(|(_, n)| n)
            .sum();
        let interrupted = r.inject("interrupted");
        assert_eq!(interrupted % 2, 0, "{}", r.report);
        assert_eq!(tocks, ticks, "{tree:#?}");
        assert_eq!(
            ticks + interrupted / 2,
            r.count("ticks_inside"),
            "{tree:#?}"
        );
        assert!(ticks > 0, "no handler call was timed");
        eprintln!(
            "signal: {} handler runs inside, {ticks} timed, {} interrupted a stub",
            r.count("ticks_inside"),
            interrupted / 2
        );
    }
}

#[test]
fn inject_signal_handler_calling_hooked_functions_at_o0() {
    if privileged() {
        signal_handler_calls(false);
    }
}

#[test]
fn inject_signal_handler_calling_hooked_functions_at_o2() {
    if privileged() {
        signal_handler_calls(true);
    }
}

fn eight_arguments_and_varargs(optimised: bool) {
    for _ in 0..RUNS {
        let r = run(optimised, "args", 300);
        let want = expected(&r.printed, &r.untimed, true);
        assert_eq!(r.tree(&|_| false), want, "untimed: {:?}", r.untimed);
        for f in ["edge::eight", "edge::format", "edge::vsum"] {
            assert!(!r.untimed.contains(&f.to_string()), "{f} left untimed");
        }
    }
}

#[test]
fn inject_eight_arguments_and_varargs_unchanged_at_o0() {
    if privileged() {
        eight_arguments_and_varargs(false);
    }
}

#[test]
fn inject_eight_arguments_and_varargs_unchanged_at_o2() {
    if privileged() {
        eight_arguments_and_varargs(true);
    }
}

fn swapcontext_between_two_stacks(optimised: bool) {
    for _ in 0..RUNS {
        let n = 100;
        let r = run(optimised, "swap", n);
        // Each coroutine's calls show under whatever the other left open; the entry's calls
        // are exact, and the stubs saw the stacks switch.
        assert_eq!(r.tree(&|_| false)["edge::entry"], n, "{}", r.report);
        assert!(r.count("switches") > n);
        let resynced = r.inject("resynced");
        assert!(resynced > 0, "{}", r.report);
        // At -O2 co_yield tail-calls swapcontext, which saves the exit stub's address as the
        // context's resume address: those returns find their real address among the orphans.
        let orphans = r.inject("orphan_returns");
        if optimised {
            assert!(orphans > 0, "{}", r.report);
        } else {
            assert_eq!(orphans, 0, "{}", r.report);
        }
        assert!(
            r.out
                .stderr
                .iter()
                .any(|l| l.contains("dropped with their return still hooked")),
            "{:#?}",
            r.out.stderr
        );
        eprintln!(
            "swapcontext: {} switches, {resynced} open calls resynced, {orphans} returned \
             through the orphans",
            r.count("switches")
        );
    }
}

#[test]
fn inject_swapcontext_between_two_stacks_at_o0() {
    if privileged() {
        swapcontext_between_two_stacks(false);
    }
}

#[test]
fn inject_swapcontext_between_two_stacks_at_o2() {
    if privileged() {
        swapcontext_between_two_stacks(true);
    }
}

fn assembly_entry_branch_target(optimised: bool) {
    for _ in 0..RUNS {
        let r = run(optimised, "asm", 200);
        assert!(
            r.untimed.iter().any(|u| u == "edge::asm_loop"),
            "{:#?}",
            r.out.stderr
        );
        let refused = r.report["inject"]["untimed"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"].as_str().unwrap().starts_with("edge::asm_loop"))
            .unwrap_or_else(|| panic!("{}", r.report))
            .clone();
        assert!(
            refused["reason"].as_str().unwrap().contains("branch"),
            "{refused}"
        );
        let want = expected(&r.printed, &r.untimed, true);
        assert_eq!(r.tree(&|_| false), want, "untimed: {:?}", r.untimed);
        assert!(!want.contains_key("edge::entry/edge::asm_loop"));
        // The patched functions: the timed ones of the fixture at least.
        assert!(r.inject("patched") >= 2, "{}", r.report);
    }
}

#[test]
fn inject_refuses_an_assembly_function_whose_entry_is_a_branch_target_at_o0() {
    if privileged() {
        assembly_entry_branch_target(false);
    }
}

#[test]
fn inject_refuses_an_assembly_function_whose_entry_is_a_branch_target_at_o2() {
    if privileged() {
        assembly_entry_branch_target(true);
    }
}

/// 50 attaches and detaches on 16 threads calling ten hooked frames deep, some of them asleep
/// at the bottom when oi-trace detaches: after each detach the code bytes and file mappings
/// are the originals, nothing of ours is mapped, the fixture runs untraced; at the end every
/// one of its results was right.
fn attach_detach_cycles(optimised: bool) {
    const CYCLES: usize = 50;
    let binary = edges(optimised);
    let mut fixture = Fixture::start(&binary, &["busy", "16"]);
    let pid = fixture.pid.to_string();
    let code_before = code_of(fixture.pid);
    fixture.signal(SIGUSR1);
    fixture.stdout.expect("running", 20 * SECOND);
    let files_before = files_mapped(fixture.pid);
    let mut deep = 0;
    let started = std::time::Instant::now();
    for cycle in 0..CYCLES {
        let out = oi_e2e::run_oi_trace(
            &[
                "calls",
                "--pid",
                &pid,
                "--entry",
                "edge::work",
                "--filter",
                "edge::*",
                "--mechanism",
                "inject",
                "--duration",
                "200ms",
                "--format",
                "json",
            ],
            60 * SECOND,
        );
        assert!(out.status.success(), "cycle {cycle}: {out:#?}");
        fixture.wait_running(5 * SECOND);
        assert_eq!(
            code_of(fixture.pid),
            code_before,
            "cycle {cycle}: code bytes"
        );
        assert_eq!(
            files_mapped(fixture.pid),
            files_before,
            "cycle {cycle}: file mappings"
        );
        let ours: Vec<String> = maps_of(fixture.pid)
            .into_iter()
            .filter(|l| l.contains("oi-trace"))
            .collect();
        assert!(ours.is_empty(), "cycle {cycle}: left mapped: {ours:#?}");
        let report = super::json(out.stdout.trim());
        assert!(
            report["tree"]["calls"].as_u64().unwrap_or(0) > 0,
            "cycle {cycle}: nothing timed: {report}"
        );
        assert_eq!(
            report["counters"]["unmatched"].as_u64(),
            Some(0),
            "{report}"
        );
        // Calls of the entry still open at the detach: threads deep inside hooked calls.
        deep += report["counters"]["still_inside"].as_u64().unwrap();
    }
    eprintln!(
        "{CYCLES} attach/detach cycles in {:.1} s; {deep} thread(s) inside hooked calls at the \
         detaches",
        started.elapsed().as_secs_f64()
    );
    assert!(deep > 0, "no detach found a thread inside a hooked call");
    fixture.signal(nix::sys::signal::Signal::SIGUSR2);
    fixture.stdout.expect("done", 60 * SECOND);
    let mut checks = 0;
    let mut rounds = 0;
    for line in fixture.stdout.seen() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["check", name, got, want] => {
                assert_eq!(got, want, "the fixture's {name} is wrong");
                checks += 1;
            }
            ["count", "rounds", n] => rounds = n.parse().unwrap(),
            _ => {}
        }
    }
    assert!(checks > 0 && rounds > 0);
    assert!(fixture.finish().success());
}

#[test]
fn inject_fifty_attach_detach_cycles_on_sixteen_busy_threads_at_o0() {
    if privileged() {
        attach_detach_cycles(false);
    }
}

#[test]
fn inject_fifty_attach_detach_cycles_on_sixteen_busy_threads_at_o2() {
    if privileged() {
        attach_detach_cycles(true);
    }
}

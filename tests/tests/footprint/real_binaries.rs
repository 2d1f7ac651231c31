//! Real -O2 binaries, as g++ makes them of ordinary C++: return probes on return instructions
//! (an exception passes through the probed function and the target lives on; returns through
//! tail calls are counted, not measured), the end of a `--count` run in the middle of a burst
//! of calls, clones, cold parts, an unprobeable entry, inlined and devirtualized copies, and
//! the names people type. Every journey runs on the fixture built at -O0 and at -O2
//! -fomit-frame-pointer, checks the shape g++ made where the journey depends on it (and fails
//! loudly if the compiler did not make it), and compares numbers the fixture prints itself.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use oi_e2e::{
    Fixture, FixtureBuild, OiTrace, SIGINT, SIGUSR1, TempDir, json, maps_of, privileged,
    run_oi_trace,
};
use serde_json::Value;

const SECOND: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Opt {
    O0,
    O2,
}

const BOTH: [Opt; 2] = [Opt::O0, Opt::O2];

fn real_binaries(opt: Opt) -> PathBuf {
    let build = FixtureBuild::new("real_binaries");
    match opt {
        Opt::O0 => build.variant("real_binaries_O0", &["-O0"]),
        Opt::O2 => build.variant("real_binaries_O2", &["-O2", "-fomit-frame-pointer"]),
    }
    .build()
}

/// objdump's disassembly of one function (by mangled name).
fn disassembly(binary: &Path, mangled: &str) -> String {
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(format!("--disassemble={mangled}"))
        .arg(binary)
        .output()
        .expect("objdump runs");
    assert!(out.status.success(), "objdump failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn lines_in(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(json)
        .collect()
}

/// Waits until the sample log holds at least `n` samples and has stopped growing: the
/// samples of a journey that has ended are all in. (A hit that came while reports were
/// backed up on a loaded machine is dropped, never sampled late: tests count it as such.)
fn wait_for_samples(log: &Path, n: usize) {
    let deadline = Instant::now() + 30 * SECOND;
    let (mut seen, mut since) = (usize::MAX, Instant::now());
    loop {
        let now = lines_in(log).len();
        if now != seen {
            (seen, since) = (now, Instant::now());
        }
        if now >= n && since.elapsed() > Duration::from_millis(500) {
            return;
        }
        assert!(Instant::now() < deadline, "fewer than {n} samples in 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every Nth hit (`--every 1`) of a summary was sampled or dropped (or unseen), and what
/// was sampled was printed: `printed` samples.
fn assert_accounted(summary: &Value, printed: usize) {
    let n = |k: &str| summary[k].as_u64().unwrap_or(0);
    assert_eq!(n("sampled"), printed as u64, "{summary}");
    assert_eq!(
        n("hits"),
        n("sampled") + n("dropped") + n("unseen"),
        "{summary}"
    );
    assert!(printed > 0, "{summary}");
}

/// Starts oi-trace and waits until it is armed; returns it with its `attached` line.
fn attach(args: &[&str]) -> (OiTrace, String) {
    let mut tracer = OiTrace::start(args);
    let line = tracer.stderr.expect("oi-trace: attached", 60 * SECOND);
    (tracer, line)
}

/// The one row of a `--summary` file.
fn summary_of(path: &Path) -> Value {
    let rows = json(&std::fs::read_to_string(path).expect("summary file"));
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
    rows[0].clone()
}

/// The numbers of a `done ...` line, after the word.
fn numbers(line: &str) -> Vec<String> {
    line.split_whitespace().skip(1).map(String::from).collect()
}

/// An exception thrown through `shop::harvest` while a return probe measures what it
/// returns: the target catches every exception and goes on (with a uretprobe it died in
/// std::terminate), and every normal return's vector is measured exactly.
#[test]
fn exceptions_pass_through_a_return_probe() {
    if !privileged() {
        return;
    }
    for opt in BOTH {
        let binary = real_binaries(opt);
        let mut fixture = Fixture::start(&binary, &["harvest", "40"]);
        let pid = fixture.pid.to_string();
        let maps = maps_of(fixture.pid);
        let dir = TempDir::new("harvest");
        let (log, sum) = (dir.file("samples.jsonl"), dir.file("summary.json"));
        let (tracer, attached) = attach(&[
            "--pid",
            &pid,
            "--uretprobe",
            "shop::harvest",
            "--arg",
            "retval",
            "--sample-log",
            log.to_str().unwrap(),
            "--summary",
            sum.to_str().unwrap(),
        ]);
        assert!(attached.contains("return point"), "{opt:?}: {attached}");
        fixture.signal(SIGUSR1);
        let done = numbers(&fixture.stdout.expect("done", 30 * SECOND));
        let (returned, caught): (usize, usize) =
            (done[1].parse().unwrap(), done[2].parse().unwrap());
        assert_eq!(
            (returned, caught),
            (30, 10),
            "{opt:?}: the fixture's own count"
        );
        let sizes: Vec<u64> = done[3].split(',').map(|n| n.parse().unwrap()).collect();
        wait_for_samples(&log, 1);
        tracer.signal(SIGINT);
        let out = tracer.finish(30 * SECOND);
        assert!(out.status.success(), "{opt:?}: {out:#?}");
        let samples: Vec<Value> = out.stdout.lines().map(json).collect();
        let hits: Vec<usize> = lines_in(&log)
            .iter()
            .map(|s| s["hit"].as_u64().unwrap() as usize)
            .collect();
        assert_eq!(samples.len(), hits.len(), "{opt:?}: {out:#?}");
        // Hit k is the k-th normal return: the vector of the k-th size the fixture printed.
        for (sample, k) in samples.iter().zip(hits) {
            let (root, n) = (&sample[0], sizes[k - 1]);
            assert_eq!(root["length"], n, "{opt:?}");
            assert_eq!(root["capacity"], n, "{opt:?}");
            assert_eq!(root["size"], 24 + 8 * n, "{opt:?}: {root}");
        }
        let summary = summary_of(&sum);
        assert_eq!(summary["hits"], returned, "{opt:?}: {summary}");
        assert_accounted(&summary, samples.len());
        fixture.assert_running();
        assert_eq!(maps_of(fixture.pid), maps, "{opt:?}: maps changed");
        assert!(fixture.finish().success(), "{opt:?}");
    }
}

/// `shop::forward` returns through a tail call for odd x at -O2: those returns are counted
/// (`unseen`: no register holds the result there), the others measured, with the value the
/// function returned in rax.
#[test]
fn returns_through_a_tail_call_are_counted_not_measured() {
    if !privileged() {
        return;
    }
    const N: u64 = 20;
    for opt in BOTH {
        let binary = real_binaries(opt);
        let tail_call = disassembly(&binary, "_ZN4shop7forwardEl")
            .lines()
            .any(|l| l.contains("jmp") && l.contains("<_ZN4shop6helperEl>"));
        assert_eq!(
            tail_call,
            opt == Opt::O2,
            "{opt:?}: g++ did not make the expected shape of shop::forward"
        );
        let mut fixture = Fixture::start(&binary, &["forward", &N.to_string()]);
        let pid = fixture.pid.to_string();
        let dir = TempDir::new("forward");
        let (log, sum) = (dir.file("samples.jsonl"), dir.file("summary.json"));
        let (tracer, attached) = attach(&[
            "--pid",
            &pid,
            "--uretprobe",
            "shop::forward",
            "--arg",
            "retval",
            "--sample-log",
            log.to_str().unwrap(),
            "--summary",
            sum.to_str().unwrap(),
        ]);
        fixture.signal(SIGUSR1);
        let done = numbers(&fixture.stdout.expect("done", 30 * SECOND));
        let measured: Vec<u64> = (0..N).filter(|x| !tail_call || x % 2 == 0).collect();
        let expected_sum: u64 = (0..N)
            .map(|x| if x % 2 == 1 { x + 1000 } else { 3 * x })
            .sum();
        assert_eq!(done, [N.to_string(), expected_sum.to_string()], "{opt:?}");
        wait_for_samples(&log, 1);
        tracer.signal(SIGINT);
        let out = tracer.finish(30 * SECOND);
        assert!(out.status.success(), "{opt:?}: {out:#?}");
        let log = lines_in(&log);
        // Hit k is the return of forward(k - 1); rax holds what it returned.
        for s in &log {
            let x = s["hit"].as_u64().unwrap() - 1;
            assert!(measured.contains(&x), "{opt:?}: a tail call sampled: {s}");
            let want = if x % 2 == 1 { x + 1000 } else { 3 * x };
            assert_eq!(
                s["regs"]["rax"], want,
                "{opt:?}: rax at the return of forward({x})"
            );
        }
        let summary = summary_of(&sum);
        assert_eq!(summary["hits"], N, "{opt:?}: {summary}");
        assert_accounted(&summary, log.len());
        assert_eq!(
            summary["unseen"],
            N - measured.len() as u64,
            "{opt:?}: {summary}"
        );
        if tail_call {
            assert!(
                attached.contains("[2 return points, 1 a tail call]"),
                "{attached}"
            );
            assert!(
                out.stderr.iter().any(|l| l.contains("10 unseen")),
                "{out:#?}"
            );
        }
        fixture.assert_running();
        assert!(fixture.finish().success(), "{opt:?}");
    }
}

/// `--count 1` on a method called twice in a row, about every millisecond, by a target with
/// one thread: a hit right after the sampled one must neither be half-sampled nor leave our
/// segments behind. A hundred runs in a row: each prints exactly one sample, exact, its
/// summary's `sampled` is 1, and the target's maps are as before.
#[test]
fn count_one_in_bursts_leaves_nothing_behind_a_hundred_times() {
    if !privileged() {
        return;
    }
    let binary = FixtureBuild::new("bursts")
        .variant("bursts_O2", &["-O2"])
        .build();
    let mut fixture = Fixture::start(&binary, &[]);
    let footprint: u64 = numbers(&fixture.stdout.expect("footprint", 20 * SECOND))[0]
        .parse()
        .unwrap();
    let pid = fixture.pid.to_string();
    let maps = maps_of(fixture.pid);
    let dir = TempDir::new("bursts");
    let sum = dir.file("summary.json");
    for run in 1..=100 {
        let out = run_oi_trace(
            &[
                "--pid",
                &pid,
                "--uprobe",
                "shop::Book::touch",
                "--arg",
                "this",
                "--count",
                "1",
                "--summary",
                sum.to_str().unwrap(),
            ],
            30 * SECOND,
        );
        assert!(out.status.success(), "run {run}: {out:#?}");
        let samples: Vec<Value> = out.stdout.lines().map(json).collect();
        assert_eq!(samples.len(), 1, "run {run}: {out:#?}");
        assert_eq!(samples[0][0]["size"], footprint, "run {run}");
        let summary = summary_of(&sum);
        assert_eq!(summary["sampled"], 1, "run {run}: {summary}");
        let (hits, dropped) = (&summary["hits"], &summary["dropped"]);
        assert_eq!(
            hits.as_u64(),
            dropped.as_u64().map(|d| d + 1),
            "run {run}: {summary}"
        );
        assert_eq!(maps_of(fixture.pid), maps, "run {run}: maps changed");
        fixture.assert_running();
    }
    assert!(fixture.finish().success());
}

/// The function symbols of `binary` (`nm -C` lines) that mention `name`.
fn nm(binary: &Path, name: &str) -> Vec<String> {
    let out = Command::new("nm")
        .arg("-C")
        .arg(binary)
        .output()
        .expect("nm runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.contains(name) && (l.contains(" t ") || l.contains(" T ") || l.contains(" W "))
        })
        .map(String::from)
        .collect()
}

/// One journey of the fixture under oi-trace: starts the fixture, arms oi-trace with `args`
/// (after `--pid PID`), runs the journey, waits for the fixture's `done` line and for
/// `samples` samples in the sample log, then ends oi-trace with SIGINT (unless `args` end it
/// themselves). Returns the `done` numbers, oi-trace's result and its sample log.
struct Journey {
    done: Vec<String>,
    attached: String,
    out: oi_e2e::Finished,
    log: Vec<Value>,
    summary: Value,
}

fn journey(binary: &Path, name: &str, n: u64, args: &[&str], samples: usize) -> Journey {
    let mut fixture = Fixture::start(binary, &[name, &n.to_string()]);
    let pid = fixture.pid.to_string();
    let maps = maps_of(fixture.pid);
    let dir = TempDir::new(name);
    let (log, sum) = (dir.file("samples.jsonl"), dir.file("summary.json"));
    let mut all = vec!["--pid", &pid];
    all.extend_from_slice(args);
    let sampling = !args.contains(&"--count-only");
    if sampling {
        all.extend(["--sample-log", log.to_str().unwrap()]);
    }
    all.extend(["--summary", sum.to_str().unwrap()]);
    let (tracer, attached) = attach(&all);
    fixture.signal(SIGUSR1);
    let done = numbers(&fixture.stdout.expect("done", 30 * SECOND));
    if sampling && samples > 0 {
        wait_for_samples(&log, 1.min(samples));
    }
    if !args.contains(&"--duration") {
        tracer.signal(SIGINT);
    }
    let out = tracer.finish(30 * SECOND);
    fixture.assert_running();
    assert_eq!(maps_of(fixture.pid), maps, "{name}: maps changed");
    assert!(fixture.finish().success(), "{name}");
    Journey {
        done,
        attached,
        log: lines_in(&log),
        summary: summary_of(&sum),
        out,
    }
}

/// `shop::Ledger::inspect` exists at -O2 only as an `.isra` clone whose first instruction,
/// `lock add`, cannot carry a uprobe: the probe goes on the next instruction (said once on
/// stderr) and measures the ledger exactly, from the clone's own parameter locations. The
/// user types the name without its anonymous namespace.
#[test]
fn an_isra_clone_with_a_lock_prefixed_entry() {
    if !privileged() {
        return;
    }
    const N: u64 = 30;
    for opt in BOTH {
        let binary = real_binaries(opt);
        let symbols = nm(&binary, "Ledger::inspect");
        if opt == Opt::O2 {
            assert!(
                symbols.len() == 1 && symbols[0].contains("[clone .isra.0]"),
                "g++ did not make inspect an .isra clone only: {symbols:?}"
            );
            let code = disassembly(&binary, "_ZNK4shop12_GLOBAL__N_16Ledger7inspectEl.isra.0");
            let first = code.lines().find(|l| l.contains(":\t")).unwrap_or("");
            assert!(
                first.contains("lock"),
                "the clone does not start with lock: {code}"
            );
        }
        let j = journey(
            &binary,
            "inspect",
            N,
            &["--uprobe", "shop::Ledger::inspect", "--arg", "this"],
            N as usize,
        );
        assert!(j.out.status.success(), "{opt:?}: {:#?}", j.out);
        let footprint: u64 = j.done[1].parse().unwrap();
        let samples: Vec<Value> = j.out.stdout.lines().map(json).collect();
        assert_accounted(&j.summary, samples.len());
        for s in &samples {
            assert_eq!(s[0]["size"], footprint, "{opt:?}: {}", s[0]);
        }
        assert_eq!(j.summary["hits"], N);
        let moved = j
            .out
            .stderr
            .iter()
            .any(|l| l.starts_with("oi-trace: note:") && l.contains("after `lock add`"));
        assert_eq!(moved, opt == Opt::O2, "{opt:?}: {:#?}", j.out.stderr);
        if opt == Opt::O2 {
            assert!(j.attached.contains("1 clone .isra.0"), "{}", j.attached);
        }
    }
}

/// `shop::scale` exists at -O2 only as a `.constprop` clone without its `factor` (3 at every
/// call): the ledger it gets is measured from the clone's own locations, and asking for the
/// dropped parameter says that it was dropped.
#[test]
fn a_constprop_clone_and_its_dropped_parameter() {
    if !privileged() {
        return;
    }
    const N: u64 = 20;
    for opt in BOTH {
        let binary = real_binaries(opt);
        let symbols = nm(&binary, "scale(");
        assert_eq!(
            symbols.iter().any(|l| l.contains("[clone .constprop.0]")),
            opt == Opt::O2,
            "{opt:?}: {symbols:?}"
        );
        let j = journey(
            &binary,
            "scale",
            N,
            &["--uprobe", "shop::scale", "--arg", "arg0"],
            N as usize,
        );
        assert!(j.out.status.success(), "{opt:?}: {:#?}", j.out);
        let footprint: u64 = j.done[2].parse().unwrap();
        let samples: Vec<Value> = j.out.stdout.lines().map(json).collect();
        assert!(samples.iter().all(|s| s[0]["size"] == footprint), "{opt:?}");
        assert_accounted(&j.summary, samples.len());
        assert_eq!(j.summary["hits"], N, "{opt:?}");

        let fixture = Fixture::start(&binary, &["scale", "1"]);
        let pid = fixture.pid.to_string();
        let out = run_oi_trace(
            &[
                "--pid",
                &pid,
                "--uprobe",
                "shop::scale",
                "--arg",
                "arg1",
                "--duration",
                "0.3",
            ],
            30 * SECOND,
        );
        if opt == Opt::O2 {
            assert_eq!(out.status.code(), Some(2), "{out:#?}");
            assert!(
                out.stderr.iter().any(|l| l.starts_with("oi-trace: error:")
                    && l.contains("`arg1`")
                    && l.contains("dropped it from this copy")
                    && l.contains("it is 3 at every call")),
                "{out:#?}"
            );
        } else {
            // -O0: no clone, the parameter is there.
            assert!(
                out.stderr
                    .iter()
                    .any(|l| l.starts_with("oi-trace: attached")),
                "{out:#?}"
            );
        }
        fixture.assert_running();
    }
}

/// `shop::deeper` has a `.cold` part at -O2 (its throw): the name is not ambiguous, every
/// call is counted, and its return points (the cold part's included) see every normal
/// return, with the value it returned.
#[test]
fn cold_parts_are_no_candidates() {
    if !privileged() {
        return;
    }
    const N: u64 = 40;
    for opt in BOTH {
        let binary = real_binaries(opt);
        let cold = nm(&binary, "deeper")
            .iter()
            .any(|l| l.contains("[clone .cold]"));
        assert_eq!(cold, opt == Opt::O2, "{opt:?}: .cold part of shop::deeper");
        let j = journey(
            &binary,
            "deeper",
            N,
            &["--uprobe", "shop::deeper", "--count-only"],
            0,
        );
        assert!(j.out.status.success(), "{opt:?}: {:#?}", j.out);
        assert_eq!(j.summary["hits"], N, "{opt:?}");
        let caught: u64 = j.done[1].parse().unwrap();
        let j = journey(
            &binary,
            "deeper",
            N,
            &["--uretprobe", "shop::deeper", "--arg", "retval"],
            (N - caught) as usize,
        );
        assert!(j.out.status.success(), "{opt:?}: {:#?}", j.out);
        assert_eq!(j.summary["hits"], N - caught, "{opt:?}: {}", j.summary);
        assert_accounted(&j.summary, j.log.len());
        // v holds 5 everywhere: every normal return is 10.
        assert!(j.log.iter().all(|s| s["regs"]["rax"] == 10), "{opt:?}");
    }
}

/// `shop::weigh` is inlined into tally_a and tally_b at -O2 and kept out of line (called
/// through a pointer): all three copies are probed, each measures the basket exactly from
/// its own location of the parameter, and the `attached` line says so.
#[test]
fn a_function_inlined_twice_and_kept_out_of_line() {
    if !privileged() {
        return;
    }
    const N: u64 = 10;
    for opt in BOTH {
        let binary = real_binaries(opt);
        for tally in [
            "_ZN4shop7tally_aERKNS_6BasketE",
            "_ZN4shop7tally_bERKNS_6BasketE",
        ] {
            let calls = disassembly(&binary, tally).contains("<_ZN4shop5weighERKNS_6BasketE>");
            assert_eq!(calls, opt == Opt::O0, "{opt:?}: does {tally} call weigh?");
        }
        let j = journey(
            &binary,
            "weigh",
            N,
            &[
                "--uprobe",
                "shop::weigh(const shop::Basket&)",
                "--arg",
                "arg0",
            ],
            3 * N as usize,
        );
        assert!(j.out.status.success(), "{opt:?}: {:#?}", j.out);
        let footprint: u64 = j.done[1].parse().unwrap();
        let samples: Vec<Value> = j.out.stdout.lines().map(json).collect();
        assert_accounted(&j.summary, samples.len());
        assert!(samples.iter().all(|s| s[0]["size"] == footprint), "{opt:?}");
        assert_eq!(j.summary["hits"], 3 * N, "{opt:?}");
        if opt == Opt::O2 {
            assert!(
                j.attached.contains("[3 entries: 1 out of line, 2 inlined]"),
                "{}",
                j.attached
            );
        }
    }
}

/// The tree labels each root with the argument and its parameter's name from the probed
/// copy's DWARF: the inlined copies and the out-of-line weigh (`arg0 b:`), and the `.isra`
/// clone of Ledger::inspect asked for `this` and its `i` (`this:`, `arg0 i:`), in jit and
/// remote mode. Each label is the first line of a root (no indent), in the order asked.
#[test]
fn tree_roots_carry_parameter_names() {
    if !privileged() {
        return;
    }
    const N: u64 = 5;
    let roots = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with(' ') && !l.starts_with('#') && !l.is_empty())
            .map(|l| l.split("  ").next().unwrap_or("").to_string())
            .collect()
    };
    for opt in BOTH {
        let binary = real_binaries(opt);
        for mode in ["jit", "remote"] {
            let j = journey(
                &binary,
                "weigh",
                N,
                &[
                    "--uprobe",
                    "shop::weigh(const shop::Basket&)",
                    "--arg",
                    "arg0",
                    "--format",
                    "tree",
                    "--mode",
                    mode,
                ],
                3 * N as usize,
            );
            assert!(j.out.status.success(), "{opt:?} {mode}: {:#?}", j.out);
            let r = roots(&j.out.stdout);
            assert_eq!(r.len(), j.log.len(), "{opt:?} {mode}: {}", j.out.stdout);
            assert!(
                r.iter().all(|l| l == "arg0 b: shop::Basket"),
                "{opt:?} {mode}: {r:?}"
            );
            let j = journey(
                &binary,
                "inspect",
                N,
                &[
                    "--uprobe",
                    "shop::Ledger::inspect",
                    "--arg",
                    "this,arg0",
                    "--format",
                    "tree",
                    "--mode",
                    mode,
                ],
                N as usize,
            );
            assert!(j.out.status.success(), "{opt:?} {mode}: {:#?}", j.out);
            let r = roots(&j.out.stdout);
            assert_eq!(r.len(), 2 * j.log.len(), "{opt:?} {mode}: {}", j.out.stdout);
            for pair in r.chunks(2) {
                assert!(pair[0].starts_with("this: shop::"), "{opt:?} {mode}: {r:?}");
                assert_eq!(pair[1], "arg0 i: long", "{opt:?} {mode}: {r:?}");
            }
        }
    }
}

/// `shop::Counter::add` is devirtualized and inlined into total() at -O2, its object kept in
/// registers; the out-of-line copy is only in the vtable. With `--arg this` nothing can be
/// measured: the run says why at attach time and, after `--duration` with no hits, gives
/// one hint line. Counting alone probes the inlined copy and sees every call.
#[test]
fn a_devirtualized_method_with_an_unused_out_of_line_copy() {
    if !privileged() {
        return;
    }
    const N: u64 = 8;
    let adds = N * (N + 1) / 2;
    for opt in BOTH {
        let binary = real_binaries(opt);
        let virtual_call = disassembly(&binary, "_ZN4shop5totalEl").contains("call");
        assert_eq!(virtual_call, opt == Opt::O0, "{opt:?}: total() calls add?");
        let j = journey(
            &binary,
            "total",
            N,
            &[
                "--uprobe",
                "shop::Counter::add",
                "--arg",
                "this",
                "--duration",
                "1.5",
            ],
            if opt == Opt::O0 { adds as usize } else { 0 },
        );
        assert!(j.out.status.success(), "{opt:?}: {:#?}", j.out);
        assert_eq!(j.done[1], adds.to_string(), "{opt:?}");
        let hint: Vec<&String> = j
            .out
            .stderr
            .iter()
            .filter(|l| l.starts_with("oi-trace: hint:"))
            .collect();
        if opt == Opt::O2 {
            assert_eq!(j.summary["hits"], 0);
            assert_eq!(hint.len(), 1, "{:#?}", j.out.stderr);
            assert!(hint[0].contains("only data refers to it"), "{}", hint[0]);
            assert!(hint[0].contains("inlined into shop::total"), "{}", hint[0]);
            assert!(
                j.out
                    .stderr
                    .iter()
                    .any(|l| l.starts_with("oi-trace: note:") && l.contains("has no caller")),
                "{:#?}",
                j.out.stderr
            );
        } else {
            assert_eq!(j.summary["hits"], adds);
            assert!(hint.is_empty(), "{hint:?}");
        }
        let j = journey(
            &binary,
            "total",
            N,
            &[
                "--uprobe",
                "Counter::add",
                "--count-only",
                "--duration",
                "1.5",
            ],
            0,
        );
        assert_eq!(j.summary["hits"], adds, "{opt:?}: {:#?}", j.out);
        if opt == Opt::O2 {
            assert!(
                j.attached.contains("1 out of line, 1 inlined"),
                "{}",
                j.attached
            );
        }
    }
}

/// Names as people type them: without the namespace (unique suffix), without the anonymous
/// namespace, `const T&` for `T const&`; a wrong parameter list brings the real overloads
/// first.
#[test]
fn names_people_type() {
    if !privileged() {
        return;
    }
    let binary = real_binaries(Opt::O2);
    let fixture = Fixture::start(&binary, &["weigh", "1"]);
    let pid = fixture.pid.to_string();
    for name in [
        "weigh",
        "shop::weigh(const shop::Basket &)",
        "Ledger::inspect",
        "shop::Ledger::inspect(long) const",
        "_ZN4shop5weighERKNS_6BasketE",
    ] {
        let out = run_oi_trace(
            &[
                "--pid",
                &pid,
                "--uprobe",
                name,
                "--count-only",
                "--duration",
                "0.2",
            ],
            30 * SECOND,
        );
        assert!(out.status.success(), "{name}: {out:#?}");
    }
    let out = run_oi_trace(
        &["--pid", &pid, "--uprobe", "weigh(int)", "--count-only"],
        30 * SECOND,
    );
    assert_eq!(out.status.code(), Some(2), "{out:#?}");
    let error = out
        .stderr
        .iter()
        .find(|l| l.starts_with("oi-trace: error:"))
        .expect("an error line");
    assert!(
        error.contains("did you mean shop::weigh(shop::Basket const&)"),
        "{error}"
    );
    fixture.assert_running();
}

/// An instruction's legacy prefixes and opcode bytes (REX, ModRM and the rest left out): the
/// bytes the kernel's uprobe rules look at.
fn kind_of(insn: &[u8]) -> Vec<u8> {
    let mut kind = Vec::new();
    let mut i = 0;
    while i < insn.len()
        && matches!(
            insn[i],
            0x26 | 0x2e | 0x36 | 0x3e | 0x64..=0x67 | 0xf0 | 0xf2 | 0xf3
        )
    {
        kind.push(insn[i]);
        i += 1;
    }
    if i < insn.len() && (0x40..=0x4f).contains(&insn[i]) {
        i += 1;
    }
    let opcode = match insn.get(i) {
        Some(0x0f) if matches!(insn.get(i + 1), Some(0x38 | 0x3a)) => 3,
        Some(0x0f) => 2,
        Some(0xc4) => 4,
        Some(0xc5) => 3,
        _ => 1,
    };
    kind.extend(insn.iter().skip(i).take(opcode));
    kind
}

/// Asks the running kernel for a uprobe on the instruction at `offset` of `path` in process
/// `pid` (perf_event_open with the uprobe PMU); whether it accepted.
fn kernel_accepts(path: &std::ffi::CStr, offset: u64, pid: i32, pmu: u32) -> bool {
    // struct perf_event_attr up to config2 (PERF_ATTR_SIZE_VER1): type, size, config, …,
    // config1 (the path) at byte 56, config2 (the offset) at byte 64.
    let mut attr = [0u64; 9];
    attr[0] = u64::from(pmu) | (72u64 << 32);
    attr[7] = path.as_ptr() as u64;
    attr[8] = offset;
    // SAFETY: `attr` is a valid perf_event_attr of the size it declares, and `path` outlives
    // the call; the returned descriptor is closed right away.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, attr.as_ptr(), pid, -1, -1, 0) };
    if fd >= 0 {
        // SAFETY: a descriptor we own.
        unsafe { libc::close(fd as i32) };
    }
    fd >= 0
}

/// For every kind of instruction in the fixture's own functions, at -O0 and -O2, the
/// reader's verdict on whether a uprobe can go there is the running kernel's. (Each uprobe
/// the kernel opens and closes costs it about 150 ms here: an instruction is checked once
/// per kind, its legacy prefixes and opcode bytes, which is what the kernel's rules read.)
#[test]
fn the_kernel_agrees_with_the_reader_on_every_instruction() {
    if !privileged() {
        return;
    }
    let pmu: u32 = std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/type")
        .expect("uprobe PMU")
        .trim()
        .parse()
        .unwrap();
    let mut seen = std::collections::HashSet::new();
    for opt in BOTH {
        let binary = real_binaries(opt);
        let fixture = Fixture::start(&binary, &["inspect", "1"]);
        let text = Command::new("objdump")
            .args(["-d", "--section=.text"])
            .arg(&binary)
            .output()
            .expect("objdump");
        let listing = String::from_utf8_lossy(&text.stdout).into_owned();
        // The .text section's address and file offset, to turn addresses into offsets.
        let headers = Command::new("objdump")
            .arg("-h")
            .arg(&binary)
            .output()
            .unwrap();
        let headers = String::from_utf8_lossy(&headers.stdout).into_owned();
        let text_row: Vec<&str> = headers
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(".text"))
            .expect(".text")
            .split_whitespace()
            .collect();
        let vma = u64::from_str_radix(text_row[3], 16).unwrap();
        let file_off = u64::from_str_radix(text_row[5], 16).unwrap();
        let path = std::ffi::CString::new(binary.to_str().unwrap()).unwrap();
        let file = std::fs::read(&binary).unwrap();
        let (mut checked, mut refused, mut in_shop) = (0, 0, false);

        for line in listing.lines() {
            if line.ends_with(">:") {
                in_shop = line.contains("<_ZN4shop") || line.contains("<_ZNK4shop");
                continue;
            }
            let Some((addr, rest)) = line.trim_start().split_once(":\t") else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            // objdump continues long instructions on a line of their own: skip those.
            let Some((hex, _)) = rest.split_once('\t') else {
                continue;
            };
            if !in_shop {
                continue;
            }
            // The instruction's own bytes, from the file (the reader decodes only the first).
            let offset = addr - vma + file_off;
            if !seen.insert(kind_of(&file[offset as usize..])) {
                continue;
            }
            let ours = oi_trace::debuginfo::code::refusal(&file[offset as usize..]);
            let kernel = kernel_accepts(&path, offset, fixture.pid, pmu);
            assert_eq!(
                ours.is_none(),
                kernel,
                "{opt:?}: {addr:#x} {hex}: the reader says {ours:?}, the kernel {}",
                if kernel { "accepts" } else { "refuses" }
            );
            checked += 1;
            refused += usize::from(!kernel);
        }
        assert!(
            checked > 10,
            "{opt:?}: only {checked} new kinds of instruction"
        );
        if opt == Opt::O2 {
            assert!(
                refused > 0,
                "no refused instruction (the .isra clone's lock add)"
            );
        }
        fixture.assert_running();
    }
}

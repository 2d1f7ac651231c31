//! `oi-trace allocs` on live processes: the `allocs` fixture makes known allocations in named
//! functions (new/delete of a class, new[]/delete[], malloc/free, calloc, realloc three ways,
//! aligned new, posix_memalign, valloc/aligned_alloc/memalign, an mmapped block, vector and map
//! growth, blocks held for a known time, blocks never freed) and prints its own counts; the
//! report must hold exactly those numbers, per innermost frame, at -O0 and at -O2 without frame
//! pointers, with glibc's usable sizes as the fixture's own `malloc_usable_size` gives them.
//! Every run leaves the fixture running, untraced, and able to finish. The `allocs_dlopen`
//! fixture loads a plugin with its own `operator new` after oi-trace has attached. The
//! `allocs_collide` fixture places two threads' ids exactly one thread-table size apart
//! (with `pid_max` raised for the journey) and has them inside allocator calls at once. The
//! `allocs_threads` fixture keeps three threads allocating and freeing while oi-trace attaches.

mod inject;
mod pprof;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::Duration,
};

use oi_e2e::{
    Fixture, FixtureBuild, OiTrace, SIGINT, SIGUSR1, TempDir, TestCgroup, json, privileged,
    run_oi_trace,
};
use serde_json::Value;

const SECOND: Duration = Duration::from_secs(1);
/// The lifetime bound of the journeys: the held blocks live longer (the fixture holds them
/// 600 ms), so they land in the second bucket whatever the machine's load.
const BUCKET: &str = "0.25";

fn fixture(variant: &str, flags: &[&str]) -> PathBuf {
    FixtureBuild::new("allocs").variant(variant, flags).build()
}

fn o0() -> PathBuf {
    fixture("allocs_o0", &["-O0"])
}

fn o2() -> PathBuf {
    fixture("allocs_o2", &["-O2", "-fomit-frame-pointer"])
}

/// What the fixture printed.
#[derive(Default, Debug)]
struct Printed {
    /// name → [allocs, frees, bytes, live_allocs, live_bytes]
    sites: BTreeMap<String, [u64; 5]>,
    usable: BTreeMap<String, u64>,
    /// type → [allocs, frees, bytes]
    types: BTreeMap<String, [u64; 3]>,
    /// class → [allocs, bytes]
    classes: BTreeMap<String, [u64; 2]>,
    held: u64,
    alloc_calls: u64,
}

/// The numbers at the end of `line` after `skip` leading words, the name between.
fn name_and_numbers<const N: usize>(line: &str) -> (String, [u64; N]) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let numbers: Vec<u64> = words[words.len() - N..]
        .iter()
        .map(|w| w.parse().unwrap())
        .collect();
    (
        words[1..words.len() - N].join(" "),
        numbers.try_into().unwrap(),
    )
}

fn read_printed(fixture: &Fixture) -> Printed {
    let mut printed = Printed::default();
    for line in fixture.stdout.seen() {
        match line.split_whitespace().next() {
            Some("site") => {
                let (name, n) = name_and_numbers::<5>(line);
                printed.sites.insert(name, n);
            }
            Some("usable") => {
                let (name, [n]) = name_and_numbers::<1>(line);
                printed.usable.insert(name, n);
            }
            Some("type") => {
                let (name, n) = name_and_numbers::<3>(line);
                printed.types.insert(name, n);
            }
            Some("class") => {
                let (name, n) = name_and_numbers::<2>(line);
                printed.classes.insert(name, n);
            }
            Some("held") => printed.held = line[5..].trim().parse().unwrap(),
            Some("alloc_calls") => printed.alloc_calls = line[12..].trim().parse().unwrap(),
            _ => {}
        }
    }
    assert!(!printed.sites.is_empty(), "the fixture printed no counts");
    printed
}

/// Starts the fixture, attaches `oi-trace allocs --format json` with `extra`, lets the fixture
/// work, stops oi-trace with Ctrl-C, and returns what both said. The fixture is checked to be
/// running, untraced, after oi-trace left, and to finish normally.
fn journey(binary: &Path, extra: &[&str]) -> (Printed, Value) {
    let (printed, stdout) = journey_raw(binary, extra);
    (printed, json(stdout.trim()))
}

/// [`journey`], with oi-trace's stdout as it is.
fn journey_raw(binary: &Path, extra: &[&str]) -> (Printed, String) {
    let mut fixture = Fixture::start(binary, &[]);
    let pid = fixture.pid.to_string();
    let mut args = vec![
        "allocs",
        "--pid",
        &pid,
        "--format",
        "json",
        "--buckets",
        BUCKET,
    ];
    args.extend_from_slice(extra);
    let (printed, out) = traced_run(&mut fixture, &args);
    assert!(fixture.finish().success());
    (printed, out.stdout)
}

/// Attaches oi-trace with `args` to the waiting `fixture`, lets the fixture work, stops
/// oi-trace with Ctrl-C, and returns what both said; oi-trace must have succeeded and left
/// the fixture running, untraced.
fn traced_run(fixture: &mut Fixture, args: &[&str]) -> (Printed, oi_e2e::Finished) {
    let tracer = OiTrace::attached(args);
    fixture.signal(SIGUSR1);
    fixture.stdout.expect("done", 120 * SECOND);
    tracer.signal(SIGINT);
    let out = tracer.finish(60 * SECOND);
    assert!(out.status.success(), "oi-trace failed: {out:#?}");
    fixture.assert_running();
    (read_printed(fixture), out)
}

/// Sites summed by their innermost frame: [allocs, frees, bytes, live_allocs, live_bytes,
/// usable_bytes].
fn by_innermost(report: &Value) -> BTreeMap<String, [u64; 6]> {
    let mut out: BTreeMap<String, [u64; 6]> = BTreeMap::new();
    for site in report["sites"].as_array().expect("sites") {
        let name = site["stack"][0].as_str().expect("a frame").to_string();
        let n = |k: &str| site[k].as_u64().unwrap_or_else(|| panic!("{k} in {site}"));
        let e = out.entry(name).or_default();
        for (slot, key) in [
            "allocs",
            "frees",
            "bytes",
            "live_allocs",
            "live_bytes",
            "usable_bytes",
        ]
        .iter()
        .enumerate()
        {
            e[slot] += n(key);
        }
    }
    out
}

/// Sites of type `t`: [allocs, frees, bytes].
fn of_type(report: &Value, t: &str) -> [u64; 3] {
    let mut n = [0; 3];
    for site in report["sites"].as_array().unwrap() {
        if site["type"].as_str() == Some(t) {
            n[0] += site["allocs"].as_u64().unwrap();
            n[1] += site["frees"].as_u64().unwrap();
            n[2] += site["bytes"].as_u64().unwrap();
        }
    }
    n
}

/// Every count the fixture printed, found exactly in the report, which says its usable sizes
/// are `usable_size`'s: glibc's and jemalloc's equal the fixture's own `malloc_usable_size`,
/// the other allocators' are the requested sizes.
fn assert_exact(printed: &Printed, report: &Value, usable_size: &str) {
    let usable_from_fixture = usable_size != "requested";
    let sites = by_innermost(report);
    for (name, want) in &printed.sites {
        let got = sites
            .get(name)
            .unwrap_or_else(|| panic!("no site for {name} in {report:#}"));
        assert_eq!(
            got[..5],
            want[..],
            "{name}: [allocs, frees, bytes, live_allocs, live_bytes]"
        );
    }
    for (name, want) in &printed.usable {
        let usable = if usable_from_fixture {
            *want
        } else {
            sites[name][2]
        };
        assert_eq!(
            sites[name][5], usable,
            "{name}: usable bytes ({})",
            report["usable_size"]
        );
    }
    for (t, want) in &printed.types {
        assert_eq!(
            of_type(report, t),
            *want,
            "type {t}: [allocs, frees, bytes]"
        );
        let listed = report["types"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["type"].as_str() == Some(t))
            .unwrap_or_else(|| panic!("type {t} not listed"));
        assert_eq!(listed["allocs"].as_u64(), Some(want[0]));
        assert_eq!(listed["bytes"].as_u64(), Some(want[2]));
        assert!(t.contains("shop::Item") || t == "std::string", "{t}");
    }
    // Nothing else allocated in the fixture while it worked.
    let totals = &report["totals"];
    let sum = |i: usize| -> u64 {
        printed.sites.values().map(|s| s[i]).sum::<u64>()
            + printed
                .types
                .values()
                .map(|t| t[[0, 1, 2][i.min(2)]])
                .sum::<u64>()
    };
    assert_eq!(totals["allocs"].as_u64(), Some(sum(0)), "{totals}");
    assert_eq!(totals["frees"].as_u64(), Some(sum(1)), "{totals}");
    assert_eq!(totals["bytes"].as_u64(), Some(sum(2)), "{totals}");
    let leak = printed.sites["shop::leak"];
    assert_eq!(totals["live_allocs"].as_u64(), Some(leak[3]));
    assert_eq!(totals["live_bytes"].as_u64(), Some(leak[4]));
    assert_eq!(totals["unknown_frees"].as_u64(), Some(0));
    assert_eq!(totals["dropped"].as_u64(), Some(0));
    // Lifetimes: one more bucket than bounds; every freed block in one; the held ones past the
    // bound.
    assert_eq!(report["buckets_s"], serde_json::json!([0.25]));
    for site in report["sites"].as_array().unwrap() {
        let lifetimes: Vec<u64> = site["lifetimes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(lifetimes.len(), 2);
        assert_eq!(
            lifetimes.iter().sum::<u64>(),
            site["frees"].as_u64().unwrap()
        );
        if site["stack"][0] == "shop::hold" {
            assert_eq!(
                lifetimes[0], 0,
                "a held block freed before the bound: {site}"
            );
        }
    }
    let held: u64 = report["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["stack"][0] == "shop::hold")
        .map(|s| s["lifetimes"][1].as_u64().unwrap())
        .sum();
    assert_eq!(held, printed.held);
    // Blocks never freed: live, with an age.
    let leak_site = report["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stack"][0] == "shop::leak")
        .unwrap();
    assert!(leak_site["oldest_live_s"].as_f64().is_some());
    assert_eq!(report["usable_size"], usable_size);
    assert_eq!(report["sampled"], false);
    assert_eq!(report["mechanism"], "uprobes");
}

/// The class whose methods allocate gets every allocation made beneath them.
fn assert_classes(printed: &Printed, report: &Value) {
    for (class, want) in &printed.classes {
        let got = report["classes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["class"].as_str() == Some(class))
            .unwrap_or_else(|| panic!("class {class} not listed: {report:#}"));
        assert_eq!(
            [
                got["allocs"].as_u64().unwrap(),
                got["bytes"].as_u64().unwrap()
            ],
            *want,
            "class {class}"
        );
    }
}

/// Whole stacks: every site of the fixture's own functions reads `shop::F`, then `main`, and
/// ends there.
fn assert_whole_stacks(report: &Value) {
    for site in report["sites"].as_array().unwrap() {
        let stack: Vec<&str> = site["stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        if stack[0].starts_with("shop::") && !stack[0].starts_with("shop::Inventory") {
            assert_eq!(stack, [stack[0], "main"], "{site}");
        }
        assert_eq!(stack.last(), Some(&"main"), "{site}");
    }
}

#[test]
fn exact_counts_sizes_types_classes_and_lifetimes_at_o0() {
    if !privileged() {
        return;
    }
    let (printed, report) = journey(&o0(), &[]);
    assert_exact(&printed, &report, "glibc");
    assert_classes(&printed, &report);
    assert_whole_stacks(&report);
    // The map's nodes: their type is the map's value type, and std::map is a class too.
    assert!(report["classes"].as_array().unwrap().iter().any(|c| {
        c["class"]
            .as_str()
            .unwrap()
            .starts_with("std::map<int, shop::Item")
    }));
}

#[test]
fn exact_counts_at_o2_without_frame_pointers() {
    if !privileged() {
        return;
    }
    let (printed, report) = journey(&o2(), &[]);
    assert_exact(&printed, &report, "glibc");
}

#[test]
fn whole_stacks_and_classes_at_o2_without_frame_pointers() {
    if !privileged() {
        return;
    }
    let (printed, report) = journey(&o2(), &[]);
    assert_whole_stacks(&report);
    assert_classes(&printed, &report);
}

/// The same program built with clang++ against libc++ (Debian's packages), at -O0 and -O2:
/// every count, size, type and class exact, as with libstdc++ (libc++'s `operator new` is
/// libc++abi's, and its strings' buffers are typed as their strings).
#[test]
fn libcxx_exact_counts_sizes_types_and_classes() {
    if !privileged() {
        return;
    }
    for (variant, opt) in [("allocs_libcxx_o0", "-O0"), ("allocs_libcxx_o2", "-O2")] {
        let binary = FixtureBuild::new("allocs")
            .compiler("clang++")
            .variant(variant, &[opt, "-stdlib=libc++", "-fomit-frame-pointer"])
            .build();
        let (printed, report) = journey(&binary, &[]);
        assert_exact(&printed, &report, "glibc");
        assert_classes(&printed, &report);
    }
}

/// Debian's jemalloc and tcmalloc (minimal), linked in: their own entry points (malloc,
/// operator new, … defined in their libraries, with their slow paths reached by tail calls
/// through the library's PLT) are counted exactly too.
#[test]
fn jemalloc_and_tcmalloc_counted_exactly() {
    if !privileged() {
        return;
    }
    for lib in ["jemalloc", "tcmalloc_minimal"] {
        let link = format!("-l{lib}");
        let binary = fixture(
            &format!("allocs_{lib}"),
            &["-O2", "-Wl,--no-as-needed", &link],
        );
        let (printed, report) = journey(&binary, &[]);
        // jemalloc's usable sizes are its size classes, equal to the fixture's own
        // `malloc_usable_size` (jemalloc's, which replaces glibc's); tcmalloc's are the
        // requested sizes.
        let kind = if lib == "jemalloc" {
            "jemalloc"
        } else {
            "requested"
        };
        assert_exact(&printed, &report, kind);
        assert_eq!(report["counters"]["unseen"], 0, "{lib}");
    }
}

/// The readable report, folded stacks weighted by bytes and a flame graph, from one run.
#[test]
fn text_report_folded_stacks_and_flame_graph() {
    if !privileged() {
        return;
    }
    let dir = TempDir::new("allocs-out");
    let folded = dir.file("allocs.folded");
    let svg = dir.file("allocs.svg");
    let mut fixture = Fixture::start(&o0(), &["10"]);
    let pid = fixture.pid.to_string();
    let tracer = OiTrace::attached(&[
        "allocs",
        "--pid",
        &pid,
        "--folded",
        folded.to_str().unwrap(),
        "--flamegraph",
        svg.to_str().unwrap(),
    ]);
    fixture.signal(SIGUSR1);
    fixture.stdout.expect("done", 120 * SECOND);
    tracer.signal(SIGINT);
    let out = tracer.finish(60 * SECOND);
    assert!(out.status.success(), "{out:#?}");
    let printed = read_printed(&fixture);
    assert!(fixture.finish().success());
    let leak = printed.sites["shop::leak"];
    assert!(out.stdout.contains("top sites by bytes:"), "{}", out.stdout);
    assert!(out.stdout.contains("top types by bytes:"));
    assert!(out.stdout.contains("shop::Inventory"));
    assert!(
        out.stdout
            .contains("live bytes by site (oldest live block):")
    );
    let folded = std::fs::read_to_string(&folded).expect("folded file");
    assert!(
        folded
            .lines()
            .any(|l| l == format!("main;shop::leak {}", leak[2])),
        "{folded}"
    );
    let svg = std::fs::read_to_string(&svg).expect("svg file");
    assert!(svg.starts_with("<?xml") && svg.contains("shop::leak"));
}

/// `--interval`: a JSON report per interval while the fixture works (it holds blocks for
/// 600 ms, so at least one interval passes), then the final one; each a whole report.
#[test]
fn interval_reports_then_the_final_one() {
    if !privileged() {
        return;
    }
    let (printed, stdout) = journey_raw(&o0(), &["--interval", "0.2"]);
    let reports: Vec<Value> = stdout.lines().map(json).collect();
    assert!(reports.len() >= 2, "{stdout}");
    for r in &reports {
        assert!(
            r["totals"]["allocs"].is_u64() && r["sites"].is_array(),
            "{r}"
        );
    }
    assert_exact(&printed, reports.last().unwrap(), "glibc");
}

/// `-v`: the kernel side says what it decided (a nested allocator call counted once), through
/// aya-log.
#[test]
fn verbose_logs_the_kernel_decisions() {
    if !privileged() {
        return;
    }
    let mut fixture = Fixture::start(&o0(), &["10"]);
    let pid = fixture.pid.to_string();
    let tracer = OiTrace::attached(&["allocs", "--pid", &pid, "-v", "--format", "json"]);
    fixture.signal(SIGUSR1);
    fixture.stdout.expect("done", 120 * SECOND);
    tracer.signal(SIGINT);
    let out = tracer.finish(60 * SECOND);
    assert!(out.status.success(), "{out:#?}");
    assert!(fixture.finish().success());
    assert!(
        out.stderr
            .iter()
            .any(|l| l.starts_with("oi-trace: ebpf: debug: nested allocator call")),
        "{:#?}",
        out.stderr
    );
}

/// `--every 2`: every second call of an allocating function is taken, exactly, and the numbers
/// are scaled back: a site of an even number of consecutive calls comes out exact.
#[test]
fn every_nth_allocation_scaled() {
    if !privileged() {
        return;
    }
    for binary in [o0(), o2()] {
        let (printed, report) = journey(&binary, &["--every", "2"]);
        assert_eq!(report["sampled"], true);
        let skipped = report["counters"]["skipped_by_sampling"].as_u64().unwrap();
        assert_eq!(skipped, printed.alloc_calls / 2);
        // Frees: every free is the fixture's own, of a block allocated while attached. Those
        // of sampled blocks are found (the estimate doubles them), the others are untracked,
        // exactly; the estimate of the unsampled ones leaves few for "before attaching".
        let frees: u64 = printed.sites.values().map(|s| s[1]).sum::<u64>()
            + printed.types.values().map(|t| t[1]).sum::<u64>();
        let totals = &report["totals"];
        let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
        let untracked = n(&report["counters"], "untracked_frees");
        assert_eq!(n(totals, "frees") % 2, 0, "{totals}");
        assert_eq!(untracked + n(totals, "frees") / 2, frees, "{report}");
        assert_eq!(
            n(totals, "unknown_frees") + n(totals, "unsampled_frees"),
            untracked,
            "{totals}"
        );
        assert!(n(totals, "unknown_frees") * 10 <= frees, "{totals}");
        let sites = by_innermost(&report);
        for name in [
            "shop::make_widgets",
            "shop::c_blocks",
            "shop::Inventory::restock",
        ] {
            let want = printed.sites[name];
            assert_eq!(sites[name][0], want[0], "{name}: allocs");
            assert_eq!(sites[name][2], want[2], "{name}: bytes");
        }
    }
}

/// `--sample-bytes 4096`: blocks of 4096 bytes and more are always taken, each standing for
/// itself (the mmapped ones exactly); the report says its numbers are estimates.
#[test]
fn sampling_by_bytes_keeps_large_blocks_exact() {
    if !privileged() {
        return;
    }
    for binary in [o0(), o2()] {
        let (printed, report) = journey(&binary, &["--sample-bytes", "4096"]);
        assert_eq!(report["sampled"], true);
        let big = printed.sites["shop::big"];
        assert_eq!(by_innermost(&report)["shop::big"][..3], big[..3]);
    }
}

/// cgroup mode: a process present at attach time and one started after are both counted, at
/// -O0 and at -O2 without frame pointers.
#[test]
fn cgroup_covers_a_process_started_after_attaching() {
    if !privileged() {
        return;
    }
    for binary in [o0(), o2()] {
        cgroup_journey(&binary);
    }
}

fn cgroup_journey(binary: &std::path::Path) {
    let cgroup = TestCgroup::new("allocs");
    let mut first = Fixture::start(binary, &["10"]);
    cgroup.add(first.pid);
    let path = cgroup.path().to_str().unwrap().to_string();
    let tracer = OiTrace::attached(&[
        "allocs",
        "--cgroup",
        &path,
        "--format",
        "json",
        "--buckets",
        BUCKET,
    ]);
    // The second one joins the cgroup before it allocates (it waits for SIGUSR1).
    let mut second = Fixture::start(binary, &["10"]);
    cgroup.add(second.pid);
    first.signal(SIGUSR1);
    second.signal(SIGUSR1);
    first.stdout.expect("done", 120 * SECOND);
    second.stdout.expect("done", 120 * SECOND);
    tracer.signal(SIGINT);
    let out = tracer.finish(60 * SECOND);
    assert!(out.status.success(), "{out:#?}");
    let a = read_printed(&first);
    let b = read_printed(&second);
    assert!(first.finish().success());
    assert!(second.finish().success());
    let report = json(out.stdout.trim());
    let sites = by_innermost(&report);
    for (name, want) in &a.sites {
        let other = b.sites[name];
        let both: Vec<u64> = want.iter().zip(other).map(|(x, y)| x + y).collect();
        assert_eq!(sites[name][..5], both[..], "{name} in both processes");
    }
    drop(cgroup);
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    for args in [
        vec!["allocs", "--pid", "1", "--buckets", "5,1"],
        vec!["allocs", "--pid", "1", "--buckets", "0"],
        vec!["allocs", "--pid", "1", "--every", "0"],
        vec!["allocs", "--pid", "1", "--sample-bytes", "0"],
        vec![
            "allocs",
            "--pid",
            "1",
            "--every",
            "2",
            "--sample-bytes",
            "64",
        ],
        vec!["allocs", "--pid", "1", "--max-live", "0"],
        vec!["allocs", "--pid", "999999999"],
        vec!["allocs"],
    ] {
        let out = run_oi_trace(&args, 30 * SECOND);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:#?}");
        assert_eq!(out.stderr.len(), 1, "{args:?}: {out:#?}");
        assert!(out.stderr[0].starts_with("oi-trace: error: "), "{out:#?}");
    }
}

fn more(variant: &str, flags: &[&str]) -> PathBuf {
    FixtureBuild::new("allocs_more")
        .variant(variant, flags)
        .build()
}

/// Every site the `allocs_more` fixture printed, exactly, and one count per request: the
/// workers' `new` → `malloc` and `delete` → `free` are one allocation and one free each (their
/// inner entries seen as nested), with 4 threads allocating at once.
fn assert_more_exact(printed: &Printed, report: &Value) {
    let sites = by_innermost(report);
    for (name, want) in &printed.sites {
        let got = sites
            .get(name)
            .unwrap_or_else(|| panic!("no site for {name} in {report:#}"));
        assert_eq!(
            got[..5],
            want[..],
            "{name}: [allocs, frees, bytes, live_allocs, live_bytes]"
        );
    }
    let worker = printed.sites["shop::worker"];
    assert_eq!(worker[0], 4 * 200 * 2, "the fixture's own count");
    assert_eq!(report["totals"]["dropped"], 0);
}

/// 4 threads allocating at once, exceptions thrown through a function whose block a
/// unique_ptr frees while the stack unwinds, and `operator new` failing with `bad_alloc` under
/// a `new_handler`: exact per-site counts at -O0 and -O2 without frame pointers, and the target
/// alive and untraced afterwards (`journey` checks it). `operator new` → `malloc` and
/// `operator delete` → `free` count once each: the inner entries are nested calls.
#[test]
fn threads_exceptions_and_bad_alloc_counted_exactly() {
    if !privileged() {
        return;
    }
    for binary in [
        more("allocs_more_o0", &["-O0"]),
        more("allocs_more_o2", &["-O2", "-fomit-frame-pointer"]),
    ] {
        let (printed, report) = journey(&binary, &[]);
        assert_more_exact(&printed, &report);
        assert_eq!(printed.sites["shop::new_fails"][0], 20);
        let nested = report["counters"]["nested_calls"].as_u64().unwrap();
        // Per worker round, malloc inside new and free inside delete at least.
        assert!(nested >= 4 * 200 * 2, "nested calls: {nested}");
    }
}

/// An allocator linked into the executable (its own `operator new`/`delete`, a bump arena that
/// never calls malloc, used by libstdc++ too): hooked where it is defined, its calls closed by
/// its own return instructions, and counted exactly.
#[test]
fn allocator_linked_into_the_executable_counted_exactly() {
    if !privileged() {
        return;
    }
    for binary in [
        more("allocs_arena_o0", &["-O0", "-DARENA"]),
        more(
            "allocs_arena_o2",
            &["-O2", "-fomit-frame-pointer", "-DARENA"],
        ),
    ] {
        let (printed, report) = journey(&binary, &[]);
        assert!(!printed.sites.contains_key("shop::new_fails"));
        assert_more_exact(&printed, &report);
    }
}

/// A plugin dlopen()ed after attaching, with its own `operator new`/`delete` (bound to its own
/// calls by -Bsymbolic) taking blocks from malloc: oi-trace hooks it at its next sweep, says
/// so on stderr, and the plugin function's site holds exactly the fixture's counts, each `new`
/// counted once (the malloc inside it nested), at -O0 and -O2 without frame pointers, for
/// `--pid` and for `--cgroup`.
#[test]
fn plugin_dlopened_after_attaching_is_hooked_and_counted_once() {
    if !privileged() {
        return;
    }
    for (binary, plugin) in dlopen_builds() {
        dlopen_journey(&binary, &plugin, false, false);
        dlopen_journey(&binary, &plugin, true, false);
    }
}

/// The same plugin, used at once: the fixture allocates through it right after dlopen
/// returns, with no pause for a sweep. The probe on the dynamic linker's `_dl_debug_state`
/// holds the thread until the plugin is hooked, so every allocation is counted, at -O0 and
/// -O2 without frame pointers, for `--pid` and for `--cgroup`.
#[test]
fn plugin_used_at_once_after_dlopen_is_counted_exactly() {
    if !privileged() {
        return;
    }
    for (binary, plugin) in dlopen_builds() {
        dlopen_journey(&binary, &plugin, false, true);
        dlopen_journey(&binary, &plugin, true, true);
    }
}

/// The dlopen fixture and its plugin (its own allocator, bound by -Bsymbolic), built at -O0
/// and at -O2 without frame pointers: (program, plugin) per build.
fn dlopen_builds() -> Vec<(PathBuf, PathBuf)> {
    [
        ("o0", &["-O0"][..]),
        ("o2", &["-O2", "-fomit-frame-pointer"][..]),
    ]
    .into_iter()
    .map(|(variant, flags)| {
        let mut plugin_flags = flags.to_vec();
        plugin_flags.push("-Wl,-Bsymbolic");
        let plugin = FixtureBuild::new("allocs_plugin")
            .variant(&format!("allocs_plugin_{variant}"), &plugin_flags)
            .build_shared();
        let binary = FixtureBuild::new("allocs_dlopen")
            .variant(&format!("allocs_dlopen_{variant}"), flags)
            .build();
        (binary, plugin)
    })
    .collect()
}

fn dlopen_journey(binary: &Path, plugin: &Path, in_cgroup: bool, at_once: bool) {
    let what = format!(
        "{} in a cgroup: {in_cgroup}, at once: {at_once}",
        binary.display()
    );
    let mut args = vec![plugin.to_str().unwrap()];
    if at_once {
        args.push("at-once");
    }
    let mut fixture = Fixture::start(binary, &args);
    let pid = fixture.pid.to_string();
    let cgroup = in_cgroup.then(|| TestCgroup::new("allocs_dlopen"));
    let scope = match &cgroup {
        Some(c) => {
            c.add(fixture.pid);
            [
                "--cgroup".to_string(),
                c.path().to_str().unwrap().to_string(),
            ]
        }
        None => ["--pid".to_string(), pid],
    };
    let mut tracer = OiTrace::attached(&[
        "allocs",
        &scope[0],
        &scope[1],
        "--format",
        "json",
        "--buckets",
        BUCKET,
    ]);
    fixture.signal(SIGUSR1);
    if !at_once {
        fixture.stdout.expect("loaded", 60 * SECOND);
    }
    // The plugin brings libstdc++ too (the fixture itself does not link it): one line each.
    let hooked = loop {
        let line = tracer.stderr.expect("oi-trace: hooked", 60 * SECOND);
        if line.contains(plugin.to_str().unwrap()) {
            break line;
        }
    };
    // The plugin defines three: operator new, operator delete and its sized form.
    assert_eq!(
        hooked,
        format!(
            "oi-trace: hooked 3 allocator entry points in {} (loaded after attaching)",
            plugin.display()
        ),
        "{what}"
    );
    if !at_once {
        fixture.signal(SIGUSR1);
    }
    fixture.stdout.expect("done", 120 * SECOND);
    tracer.signal(SIGINT);
    let out = tracer.finish(60 * SECOND);
    assert!(out.status.success(), "{what}: oi-trace failed: {out:#?}");
    fixture.assert_running();
    let printed = read_printed(&fixture);
    assert!(fixture.finish().success());
    let report = json(out.stdout.trim());
    let sites = by_innermost(&report);
    let want = printed.sites["plugin::make_widgets"];
    let got = sites
        .get("plugin::make_widgets")
        .unwrap_or_else(|| panic!("{what}: no site for plugin::make_widgets in {report:#}"));
    assert_eq!(
        got[..5],
        want[..],
        "{what}: [allocs, frees, bytes, live_allocs, live_bytes]"
    );
    // Counted once: the malloc inside the plugin's new (and the free inside its delete) are
    // nested calls, never sites of their own under the plugin's operators.
    for name in sites.keys() {
        assert!(
            !name.starts_with("operator new") && !name.starts_with("operator delete"),
            "{what}: an allocator's own frame as a site: {name}"
        );
    }
    let nested = report["counters"]["nested_calls"].as_u64().unwrap();
    // A dlopen's thread is held at most 1 s while the plugin is hooked (docs/allocs.md); past
    // that bound (`holds_expired`, which a loaded machine reaches) its first requests reach
    // malloc before the plugin's operators are hooked: counted all the same, not as nested.
    if report["counters"]["holds_expired"].as_u64() == Some(0) {
        assert!(
            nested >= want[0] + want[1],
            "{what}: nested calls: {nested} (counters {})",
            report["counters"]
        );
    }
    drop(cgroup);
}

/// `kernel.pid_max` raised for one journey, put back when dropped (the journey's failure
/// included). Only the slot-collision journeys change it, one at a time ([`PID_MAX_LOCK`]);
/// the other allocs journeys pass under either value (with more thread ids than slots they
/// run with shared slots), so they need not wait for it.
struct RaisedPidMax(String);

/// Held by a slot-collision journey for its whole run: run at once, one would put `pid_max`
/// back under another, or save the other's raised value as the one to restore.
static PID_MAX_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

const PID_MAX: &str = "/proc/sys/kernel/pid_max";

impl RaisedPidMax {
    fn to(value: u64) -> Self {
        let old = std::fs::read_to_string(PID_MAX).expect("read pid_max");
        std::fs::write(PID_MAX, value.to_string()).expect("raise pid_max");
        Self(old.trim().to_string())
    }
}

impl Drop for RaisedPidMax {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(PID_MAX, &self.0) {
            eprintln!("could not put pid_max back to {}: {e}", self.0);
        }
    }
}

/// Two live threads whose ids differ by exactly the thread table's size (`pid_max` raised
/// above it, so the loader sets `SHARED_SLOTS`), inside allocator calls at once: A's call
/// (the fixture's own aligned `operator new`, a bump arena) keeps the slot; B's `new`
/// (libstdc++'s `operator new` and the `malloc` inside) finds the slot held
/// and is counted as not tracked, never overwriting A's call. So A's blocks are counted in
/// full, B's collided blocks not at all (their frees are unknown frees), the warning says why,
/// and what both threads allocate afterwards, one at a time, is counted exactly. -O0 and -O2
/// without frame pointers.
#[test]
fn threads_sharing_a_slot_collide_and_are_counted_exactly() {
    if !privileged() {
        return;
    }
    collide_journeys(&[]);
}

/// As [`threads_sharing_a_slot_collide_and_are_counted_exactly`], but thread A's last
/// allocator call before B's turn is a free. A free has no return probe, so A's slot stays
/// held by a pending free (A's or, once A has exited, a dead thread's). B's next `new` takes
/// it: a pending free only recognises a free nested in that free, and blocking on it lost one
/// call of B's (`after_b` 99 of 100) before `may_take` in the eBPF program let it go.
#[test]
fn a_pending_free_does_not_block_a_shared_slot() {
    if !privileged() {
        return;
    }
    collide_journeys(&["free-last"]);
}

/// As [`threads_sharing_a_slot_collide_and_are_counted_exactly`], but in each round B first
/// deletes a block it allocated earlier (tracked) while A is held inside its allocator call.
/// The free must not take the slot that A's open call holds (it did, and A's held
/// allocations were lost): the block is still freed, and the delete's hooked entries are
/// counted as not tracked, its nested frees as unknown frees.
#[test]
fn a_free_does_not_take_a_shared_slot_held_by_an_open_call() {
    if !privileged() {
        return;
    }
    collide_journeys(&["free-while-held"]);
}

/// The `allocs_collide` journey at -O0 and -O2 without frame pointers, the fixture given
/// `extra` after the slot count.
fn collide_journeys(extra: &[&str]) {
    // A journey that failed while holding the lock poisons it; the value was put back.
    let _one_at_a_time = PID_MAX_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let slots = u64::from(oi_common::allocs::MAX_THREAD_SLOTS);
    // Room for thread B's id, A's plus the slot count, whatever A's id is now.
    let _pid_max = RaisedPidMax::to(4 * slots);
    for (variant, flags) in [
        ("allocs_collide_o0", &["-O0"][..]),
        ("allocs_collide_o2", &["-O2", "-fomit-frame-pointer"][..]),
    ] {
        let binary = FixtureBuild::new("allocs_collide")
            .variant(variant, flags)
            .build();
        let slot_count = slots.to_string();
        let mut args = vec![slot_count.as_str()];
        args.extend_from_slice(extra);
        let mut fixture = Fixture::start(&binary, &args);
        let tids: Vec<u64> = fixture.stdout.seen()[0]
            .strip_prefix("tids ")
            .expect("the fixture's thread ids")
            .split(' ')
            .map(|t| t.parse().unwrap())
            .collect();
        assert_eq!(tids[1] - tids[0], slots, "{tids:?}: the same slot");
        let pid = fixture.pid.to_string();
        let (mut printed, out) =
            traced_run(&mut fixture, &["allocs", "--pid", &pid, "--format", "json"]);
        let collisions: u64 = fixture
            .stdout
            .seen()
            .iter()
            .find_map(|l| l.strip_prefix("collisions "))
            .expect("collisions")
            .parse()
            .unwrap();
        assert!(fixture.finish().success());
        let report = json(out.stdout.trim());

        let collided = printed.sites.remove("shop::collided_call").unwrap();
        assert_eq!(collided[0], collisions);
        let sites = by_innermost(&report);
        for (name, want) in &printed.sites {
            assert_eq!(
                sites.get(name).map(|s| &s[..5]),
                Some(&want[..]),
                "{name}: [allocs, frees, bytes, live_allocs, live_bytes] in {report:#}"
            );
        }
        assert!(
            !sites.contains_key("shop::collided_call"),
            "B's calls were made while A's held the slot: {report:#}"
        );
        let counters = &report["counters"];
        let totals = &report["totals"];
        let not_tracked = counters["threads_full"].as_u64().unwrap();
        let unknown = totals["unknown_frees"].as_u64().unwrap();
        // Per collided `new`: operator new's entry and the malloc inside it, not tracked;
        // B's collided blocks, freed once the slot was free again, never seen allocated.
        let (mut want_not_tracked, mut want_unknown) = (2 * collisions, collisions);
        if extra == ["free-while-held"] {
            // Each of B's deletes while A is held frees its block at its first hooked entry
            // (the free is counted), and every hooked entry of the delete (operator delete,
            // and whatever it calls down to free: libstdc++'s business) is not tracked; the
            // nested ones, with no pending free to recognise them by, find the block gone
            // and count as unknown frees.
            let per_delete = (not_tracked - want_not_tracked) / collisions;
            assert!(per_delete >= 1, "{counters}");
            want_not_tracked += per_delete * collisions;
            want_unknown += (per_delete - 1) * collisions;
        }
        assert_eq!(not_tracked, want_not_tracked, "{counters}");
        assert_eq!(unknown, want_unknown, "{totals}");
        assert_eq!(counters["abandoned"], 0, "{counters}");
        let sum = |k: usize| printed.sites.values().map(|n| n[k]).sum::<u64>();
        assert_eq!(totals["allocs"], sum(0), "{totals}");
        assert_eq!(totals["frees"], sum(1), "{totals}");
        assert_eq!(totals["bytes"], sum(2), "{totals}");
        assert_eq!(totals["live_allocs"], sum(3), "{totals}");
        assert_eq!(totals["live_bytes"], sum(4), "{totals}");
        assert!(
            out.stderr.iter().any(|l| l.contains(&format!(
                "{not_tracked} allocator call(s) not tracked: their thread's slot held another \
                 thread's call"
            ))),
            "the warning: {:#?}",
            out.stderr
        );
    }
}

/// The `allocs_threads` fixture: two threads allocating through the same paths (strings,
/// vector growth, map nodes, strings handed over) while a third frees what they hand over,
/// all three busy while oi-trace attaches; then a counted phase. 20 runs at -O0 and at -O2
/// without frame pointers: every count is the fixture's own, no call is left open (none was
/// abandoned or lost its return), and nothing blames an exception or a longjmp.
#[test]
fn threads_busy_while_attaching_counted_exactly() {
    if !privileged() {
        return;
    }
    for (variant, flags) in [
        ("allocs_threads_o0", &["-O0"][..]),
        ("allocs_threads_o2", &["-O2", "-fomit-frame-pointer"][..]),
    ] {
        let binary = FixtureBuild::new("allocs_threads")
            .variant(variant, flags)
            .build();
        for run in 0..20 {
            let mut fixture = Fixture::start(&binary, &[]);
            let pid = fixture.pid.to_string();
            let (printed, out) =
                traced_run(&mut fixture, &["allocs", "--pid", &pid, "--format", "json"]);
            assert!(fixture.finish().success());
            let report = json(out.stdout.trim());
            let want = printed.sites["total"];
            // The counted rounds' sites (the rounds before SIGUSR1 are counted too, as far as
            // they ran attached).
            let mut got = [0u64; 5];
            for site in report["sites"].as_array().expect("sites") {
                let in_counted = site["stack"]
                    .as_array()
                    .expect("a stack")
                    .iter()
                    .any(|f| f.as_str() == Some("shop::counted"));
                if in_counted {
                    for (k, key) in ["allocs", "frees", "bytes", "live_allocs", "live_bytes"]
                        .iter()
                        .enumerate()
                    {
                        got[k] += site[key].as_u64().expect("a count");
                    }
                }
            }
            let what = format!(
                "{variant}, run {run}: {} {}",
                report["totals"], report["counters"]
            );
            assert_eq!(
                got, want,
                "[allocs, frees, bytes, live_allocs, live_bytes] in {what}"
            );
            for key in ["abandoned", "returns_missed", "threads_full"] {
                assert_eq!(report["counters"][key], 0, "{key} in {what}");
            }
            assert!(
                !out.stderr.iter().any(|l| l.contains("longjmp")),
                "{what}: {:#?}",
                out.stderr
            );
        }
    }
}

//! Probes of several arguments where one argument's walk fails (OI's `multi_arg` cases): the
//! failed root is `{}` in its place, the good one equals the same object measured alone, the
//! sample is not failed (exit 0) and a warning names the argument and why; when every
//! argument fails, nothing is printed and oi-trace exits 6 with OI's line. Tree and CSV say
//! which argument failed and why in one line, `--summary` counts it. Both walkers, on -O0 and
//! -O2 -fomit-frame-pointer builds; the target runs on with its maps as before.

use std::time::Duration;

use oi_e2e::{Fixture, FixtureBuild, TempDir, json, maps_of, privileged, run_oi_trace};
use serde_json::Value;

const SECOND: Duration = Duration::from_secs(1);
/// The exit status when no argument of a sample could be measured (OI's oid: 6).
const NOTHING_MEASURED: i32 = 6;

struct Target {
    fixture: Fixture,
    /// Where the fixture's corrupt vectors point (a PROT_NONE reservation).
    hole: String,
    /// The good ledger's footprint, as the fixture computes it.
    expect: u64,
}

fn start(build: &FixtureBuild) -> Target {
    let mut fixture = Fixture::start(&build.build(), &[]);
    let hole = fixture.stdout.expect("hole ", 20 * SECOND)["hole ".len()..].to_string();
    let expect = fixture.stdout.expect("expect ", 20 * SECOND)["expect ".len()..]
        .parse()
        .expect("expect N");
    Target {
        fixture,
        hole,
        expect,
    }
}

fn builds() -> [FixtureBuild; 2] {
    [
        FixtureBuild::new("multi_arg").variant("multi_arg_O0", &["-O0"]),
        FixtureBuild::new("multi_arg").variant("multi_arg_O2", &["-O2", "-fomit-frame-pointer"]),
    ]
}

/// One sample of `probe`'s `args` in `mode`, with `extra` options.
fn sample(pid: i32, probe: &str, args: &str, mode: &str, extra: &[&str]) -> oi_e2e::Finished {
    let pid = pid.to_string();
    let mut argv = vec![
        "--pid", &pid, "--uprobe", probe, "--arg", args, "--count", "1", "--mode", mode,
        // The fixture computes OI's rules (docs/semantics.md).
        "--sizes", "oi",
    ];
    argv.extend_from_slice(extra);
    run_oi_trace(&argv, 60 * SECOND)
}

fn warning_about<'a>(out: &'a oi_e2e::Finished, arg: &str) -> &'a str {
    out.stderr
        .iter()
        .find(|l| l.contains("warning: sample") && l.contains(&format!(", {arg}: ")))
        .unwrap_or_else(|| panic!("no warning about {arg}: {out:#?}"))
}

#[test]
fn one_bad_argument_is_empty_and_the_others_are_measured() {
    if !privileged() {
        return;
    }
    for build in builds() {
        let mut t = start(&build);
        let pid = t.fixture.pid;
        let before = maps_of(pid);
        for mode in ["jit", "remote"] {
            // The good ledger alone: the reference.
            let alone = sample(pid, "shop::audit", "arg0", mode, &[]);
            assert!(alone.status.success(), "{mode}: {alone:#?}");
            let alone = json(&alone.stdout);
            assert_eq!(alone[0]["size"], t.expect, "{mode}: {alone}");

            // Good first, bad second.
            let out = sample(pid, "shop::audit", "arg0,arg1", mode, &[]);
            assert!(out.status.success(), "{mode}: {out:#?}");
            let both = json(&out.stdout);
            assert_eq!(
                both,
                Value::Array(vec![alone[0].clone(), json("{}")]),
                "{mode}"
            );
            let warning = warning_about(&out, "arg1 bad");
            // jit: the walker faulted at the hole; remote: reading the hole failed.
            assert!(warning.contains(&t.hole), "{mode}: {warning}");

            // Bad first, good second (OI's tb_fail_first_arg order).
            let out = sample(pid, "shop::audit_first_bad", "arg0,arg1", mode, &[]);
            assert!(out.status.success(), "{mode}: {out:#?}");
            let both = json(&out.stdout);
            assert_eq!(
                both,
                Value::Array(vec![json("{}"), alone[0].clone()]),
                "{mode}"
            );
            warning_about(&out, "arg0 bad");
        }
        t.fixture.assert_running();
        t.fixture.stdout.expect("tick", 20 * SECOND);
        assert_eq!(before, maps_of(pid), "the target's maps changed");
        assert!(
            t.fixture.finish().success(),
            "the fixture saw its state change"
        );
    }
}

#[test]
fn every_argument_bad_prints_nothing_and_exits_6() {
    if !privileged() {
        return;
    }
    for build in builds() {
        let mut t = start(&build);
        let pid = t.fixture.pid;
        let before = maps_of(pid);
        for mode in ["jit", "remote"] {
            let out = sample(pid, "shop::audit_both", "arg0,arg1", mode, &[]);
            assert_eq!(
                out.status.code(),
                Some(NOTHING_MEASURED),
                "{mode}: {out:#?}"
            );
            assert!(out.stdout.is_empty(), "{mode}: {out:#?}");
            let error = out
                .stderr
                .iter()
                .find(|l| l.contains("error: sample 1"))
                .unwrap_or_else(|| panic!("{mode}: no error line: {out:#?}"));
            assert!(
                error.contains("arg0 bad: ")
                    && error.contains("; arg1 worse: ")
                    && error.contains(&t.hole),
                "{mode}: {error}"
            );
            assert!(
                out.stderr
                    .last()
                    .is_some_and(|l| l
                        .contains("Nothing to output: failed to run TreeBuilder on any argument")),
                "{mode}: {out:#?}"
            );
        }
        t.fixture.assert_running();
        t.fixture.stdout.expect("tick", 20 * SECOND);
        assert_eq!(before, maps_of(pid), "the target's maps changed");
        assert!(
            t.fixture.finish().success(),
            "the fixture saw its state change"
        );
    }
}

#[test]
fn tree_csv_and_summary_say_which_argument_failed() {
    if !privileged() {
        return;
    }
    let [_, o2] = builds();
    let t = start(&o2);
    let pid = t.fixture.pid;
    let dir = TempDir::new("multi_arg");
    let summary = dir.file("summary.json");
    let summary_arg = summary.display().to_string();
    for mode in ["jit", "remote"] {
        let out = sample(
            pid,
            "shop::audit",
            "arg0,arg1",
            mode,
            &["--format", "tree", "--summary", &summary_arg],
        );
        assert!(out.status.success(), "{mode}: {out:#?}");
        let failed: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| l.contains("not measured"))
            .collect();
        assert_eq!(failed.len(), 1, "{mode}: {}", out.stdout);
        assert!(
            failed[0].starts_with("arg1 bad: std::vector<std::string>  not measured: ")
                && failed[0].contains(&t.hole),
            "{mode}: {}",
            failed[0]
        );
        assert!(
            out.stdout
                .lines()
                .any(|l| l.starts_with("arg0 good: shop::Ledger  ")),
            "{mode}: {}",
            out.stdout
        );
        let s = json(&std::fs::read_to_string(&summary).expect("summary"));
        assert_eq!(s[0]["roots_failed"], 1, "{mode}: {s}");
        assert_eq!(s[0]["samples_failed"], 0, "{mode}: {s}");

        let out = sample(
            pid,
            "shop::audit_first_bad",
            "arg0,arg1",
            mode,
            &["--format", "csv"],
        );
        assert!(out.status.success(), "{mode}: {out:#?}");
        let rows: Vec<&str> = out.stdout.lines().collect();
        // Header, the failed root's row, then the ledger's rows (itself, items, 37 elements,
        // name).
        assert_eq!(rows.len(), 1 + 1 + 1 + 1 + 37 + 1, "{mode}: {}", out.stdout);
        assert!(
            rows[1].starts_with("1,\"arg0 bad not measured: ")
                && rows[1].contains(&t.hole)
                && rows[1].contains(",\"arg0 bad\",\"std::vector<")
                && rows[1].ends_with(",24,,,,,,0"),
            "{mode}: {}",
            rows[1]
        );
        assert_eq!(
            rows[2], "2,\"a0\",\"a0\",\"shop::Ledger\",56,0,,,,,0",
            "{mode}"
        );

        let out = sample(
            pid,
            "shop::audit_both",
            "arg0,arg1",
            mode,
            &["--summary", &summary_arg],
        );
        assert_eq!(
            out.status.code(),
            Some(NOTHING_MEASURED),
            "{mode}: {out:#?}"
        );
        let s = json(&std::fs::read_to_string(&summary).expect("summary"));
        assert_eq!(s[0]["samples_failed"], 1, "{mode}: {s}");
        assert_eq!(s[0]["roots_failed"], 0, "{mode}: {s}");
    }
    t.fixture.assert_running();
    assert!(
        t.fixture.finish().success(),
        "the fixture saw its state change"
    );
}

//! `--global NAME`: a namespace-scope struct and a global std::map measured with no probe,
//! in jit mode (one thread interrupted, code injected and audited), remote mode and remote
//! `--stop-all`; each equal to the same object measured as a probed function's argument. The
//! target runs on afterwards with its maps unchanged. At -O1 and -O2. A variable in an
//! anonymous namespace is found as a function is (a unique suffix, the anonymous namespace
//! left out, the mangled name), measured equal to the bytes the fixture counts itself, and
//! labelled with its name; the readable name of a template keeps its arguments' qualifiers.

use std::time::Duration;

use oi_e2e::{Fixture, FixtureBuild, TempDir, json, maps_of, privileged, run_oi_trace};
use serde_json::Value;

const SECOND: Duration = Duration::from_secs(1);

fn strip_pointers(v: &Value) -> Value {
    match v {
        Value::Object(o) => o
            .iter()
            .filter(|(k, _)| k.as_str() != "pointer")
            .map(|(k, v)| (k.clone(), strip_pointers(v)))
            .collect(),
        Value::Array(a) => a.iter().map(strip_pointers).collect(),
        other => other.clone(),
    }
}

fn ok_lines(args: &[&str]) -> Vec<Value> {
    let out = run_oi_trace(args, 60 * SECOND);
    assert!(out.status.success(), "{out:#?}");
    out.stdout
        .lines()
        .map(|l| strip_pointers(&json(l)))
        .collect()
}

/// The fixture as the journeys run it: built by default and at -O2.
fn builds() -> [std::path::PathBuf; 2] {
    [
        FixtureBuild::new("globals").build(),
        FixtureBuild::new("globals")
            .variant("globals_O2", &["-O2"])
            .build(),
    ]
}

#[test]
fn globals_in_every_mode_equal_the_same_objects_as_arguments() {
    if !privileged() {
        return;
    }
    for binary in builds() {
        one_build(&binary);
    }
}

fn one_build(binary: &std::path::Path) {
    let mut f = Fixture::start(binary, &[]);
    f.stdout.expect("tick", 20 * SECOND);
    let pid = f.pid.to_string();
    let maps = maps_of(f.pid);
    // The same two objects, passed to shop::touch(catalog, registry).
    let probed = ok_lines(&[
        "--pid",
        &pid,
        "--uprobe",
        "shop::touch",
        "--arg",
        "arg0,arg1",
        "--count",
        "1",
    ]);
    let roots = probed[0].as_array().expect("roots");
    let dir = TempDir::new("globals");
    let audit = dir.file("audit.log");
    let audit_arg = audit.to_str().unwrap_or_default().to_string();
    let globals = [
        "--pid",
        &pid,
        "--global",
        "shop::catalog",
        "--global",
        "registry",
    ];
    for extra in [
        &["--audit-log", &audit_arg][..],
        &["--mode", "remote"][..],
        &["--mode", "remote", "--stop-all"][..],
    ] {
        let lines = ok_lines(&[&globals[..], extra].concat());
        assert_eq!(lines.len(), 2, "one snapshot of each: {extra:?}");
        assert_eq!(lines[0], Value::Array(vec![roots[0].clone()]), "{extra:?}");
        assert_eq!(lines[1], Value::Array(vec![roots[1].clone()]), "{extra:?}");
    }
    // jit mode injected once (one mapping, two walks); remote modes never.
    let audited = std::fs::read_to_string(&audit).expect("audit log");
    assert_eq!(audited.lines().count(), 1, "{audited}");
    assert!(
        audited.contains("probes=shop::catalog,registry"),
        "{audited}"
    );
    // Every --interval, until --count.
    let every = ok_lines(&[
        "--pid",
        &pid,
        "--global",
        "registry",
        "--interval",
        "0.1",
        "--count",
        "3",
    ]);
    assert_eq!(every.len(), 3);
    assert!(
        every
            .iter()
            .all(|l| *l == Value::Array(vec![roots[1].clone()]))
    );
    assert_eq!(maps_of(f.pid), maps, "maps as before");
    f.assert_running();
    f.stdout.expect("tick", 20 * SECOND);
}

#[test]
fn globals_are_found_as_functions_are_and_labelled_with_their_names() {
    if !privileged() {
        return;
    }
    for binary in builds() {
        let mut f = Fixture::start(&binary, &[]);
        let line = f.stdout.expect("hidden", 20 * SECOND);
        let owned: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line:?}"));
        // Its threads exist, so its maps are settled.
        f.stdout.expect("tick", 20 * SECOND);
        let pid = f.pid.to_string();
        let maps = maps_of(f.pid);
        let spellings = [
            "hidden",
            "shop::hidden",
            "shop::(anonymous namespace)::hidden",
            "_ZN4shop12_GLOBAL__N_16hiddenE",
        ];
        for name in spellings {
            let lines = ok_lines(&["--pid", &pid, "--global", name]);
            assert_eq!(lines.len(), 1, "{name}");
            assert_eq!(lines[0][0]["size"], owned, "{name}: {}", lines[0]);
        }
        let tree = |name: &str| {
            let out = run_oi_trace(
                &["--pid", &pid, "--global", name, "--format", "tree"],
                60 * SECOND,
            );
            assert!(out.status.success(), "{out:#?}");
            out.stdout.lines().map(str::to_string).collect::<Vec<_>>()
        };
        let hidden = tree("hidden");
        assert_eq!(hidden[0], format!("# pid {pid}, snapshot 1"), "{hidden:#?}");
        assert!(owned < 1024, "shown in bytes: {owned}");
        assert!(
            hidden[1].starts_with(&format!(
                "shop::(anonymous namespace)::hidden: std::vector<std::string>  {owned} B"
            )),
            "{hidden:#?}"
        );
        // A symbol with g++'s ABI tag (`shop::tagged[abi:cxx11]`), found by its last name:
        // a 24-byte vector owning three 8-byte pointers.
        let tagged = tree("tagged");
        assert!(
            tagged[1].starts_with(&format!(
                "shop::tagged: shop::Tagged<const char*, const std::string&, volatile long>  {} B",
                24 + 3 * 8
            )),
            "{tagged:#?}"
        );
        assert!(
            tagged[2].starts_with("  keys: std::vector<const char*>  "),
            "{tagged:#?}"
        );
        assert_eq!(maps_of(f.pid), maps, "maps as before");
        f.assert_running();
    }
}

#[test]
fn a_global_that_is_not_there_is_one_line() {
    if !privileged() {
        return;
    }
    let mut f = Fixture::start(&FixtureBuild::new("globals").build(), &[]);
    f.stdout.expect("tick", 20 * SECOND);
    let pid = f.pid.to_string();
    let cases: [(&[&str], &str); 2] = [
        (
            &["--global", "shop::nothing"],
            "oi-trace: error: no global variable \"shop::nothing\" with a fixed address",
        ),
        (
            &["--global", "registry", "--stop-all"],
            "oi-trace: error: --stop-all applies to --mode remote",
        ),
    ];
    for (args, expected) in cases {
        let out = run_oi_trace(&[&["--pid", &pid][..], args].concat(), 60 * SECOND);
        assert_eq!(out.status.code(), Some(2), "{out:#?}");
        assert_eq!(out.stderr.len(), 1, "{out:#?}");
        assert!(out.stderr[0].starts_with(expected), "{out:#?}");
    }
    f.assert_running();
}

#[test]
fn the_target_exiting_ends_a_periodic_global_at_once() {
    if !privileged() {
        return;
    }
    for mode in ["jit", "remote"] {
        let mut f = Fixture::start(&FixtureBuild::new("globals").build(), &[]);
        f.stdout.expect("tick", 20 * SECOND);
        let pid = f.pid.to_string();
        let tracer = oi_e2e::OiTrace::start(&[
            "--pid",
            &pid,
            "--global",
            "registry",
            "--interval",
            "0.02",
            "--duration",
            "60",
            "--mode",
            mode,
        ]);
        std::thread::sleep(Duration::from_millis(500));
        f.signal(oi_e2e::SIGKILL);
        let started = std::time::Instant::now();
        let out = tracer.finish(30 * SECOND);
        assert!(started.elapsed() < 10 * SECOND, "{mode}: it ended at once");
        assert_eq!(out.status.code(), Some(1), "{mode}: {out:#?}");
        assert_eq!(
            out.stderr.last().map(String::as_str),
            Some("oi-trace: error: target exited"),
            "{mode}: {out:#?}"
        );
        assert!(!out.stdout.is_empty(), "{mode}: snapshots before it exited");
    }
}

//! Containers of a standard library oi-trace does not know (a g++ fixture that spells its
//! types as libc++ does, `std::__1::vector`, and a real clang++/libc++ build): never walked
//! as plain structs. Each is a node not walked (`notWalked`, exclusiveSize = staticSize), one
//! warning names each type, and the footprint counts no member of theirs; at -O0 and -O2, jit
//! and remote byte-identical. libc++'s containers that oi-trace knows are walked, each member
//! exactly the bytes the fixture's counting operator new saw for it.

use crate::common::{build_fixture, check_probe, run_probe_stderr};
use oi_e2e::privileged;

#[test]
fn unknown_standard_containers_warn_once_and_are_not_walked() {
    if !privileged() {
        return;
    }
    for opt in ["-O0", "-O2"] {
        let failures = check_probe("footprint_foreign", opt, 0);
        assert!(
            failures.is_empty(),
            "{opt}: mismatches:\n{}",
            failures.join("\n")
        );
        let exe = build_fixture("footprint_foreign", opt);
        let (json, _, stderr) = run_probe_stderr(&exe, 0, &["--format", "json"]);
        // Two members of one unknown type, one of another: one warning each.
        for ty in ["std::__1::vector<int>", "std::__1::basic_string<char>"] {
            let warnings = stderr
                .lines()
                .filter(|l| l.starts_with("oi-trace: warning: ") && l.contains(ty))
                .count();
            assert_eq!(warnings, 1, "{opt}: {ty}:\n{stderr}");
        }
        // No member of the library's internals reaches the report.
        assert!(!json.contains("__begin_"), "{opt}: {json}");
        let (tree, _, _) = run_probe_stderr(&exe, 0, &["--format", "tree"]);
        assert!(
            tree.contains("unknown standard library, not walked"),
            "{opt}: {tree}"
        );
    }
}

/// The real thing: `footprint_owned` built with clang++ and libc++ (`cargo xtask setup`
/// installs both). Every libc++ container (strings, vector, `vector<bool>`, unique_ptr, list,
/// forward_list, deque, map, unordered_map/set, shared_ptr from make_shared and from new,
/// optional, variant, array, tuple, and containers of them) is charged exactly the heap bytes
/// the fixture's counting operator new saw for that member, and the whole struct exactly what
/// it owns; no warning. -O0 and -O2, jit and remote byte-identical.
#[test]
fn libcxx_containers_are_walked_exactly() {
    if !privileged() {
        return;
    }
    for opt in ["-O0", "-O2"] {
        let exe = crate::common::build_fixture_with(
            "footprint_owned",
            opt,
            "clang++",
            &["-stdlib=libc++"],
            "_libcxx",
        );
        let owned = crate::real_sizes::member_bytes(&exe);
        let real = ["--sizes", "real", "--format", "json"];
        let (text, _, stderr) =
            run_probe_stderr(&exe, 0, &[&real[..], &["--mode", "jit"]].concat());
        let (remote, _, _) =
            run_probe_stderr(&exe, 0, &[&real[..], &["--mode", "remote"]].concat());
        assert_eq!(text, remote, "{opt}: jit and remote differ");
        crate::real_sizes::each_member_exact(opt, &text, &owned);
        let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(
            v[0]["size"],
            crate::real_sizes::owned(&exe),
            "{opt}: {text}"
        );
        // Every type is walked: no warning.
        assert!(!stderr.contains("oi-trace: warning: "), "{opt}:\n{stderr}");
        // Readable names drop libc++'s inline namespace and default arguments, as they do
        // libstdc++'s.
        let (tree, _, _) = run_probe_stderr(
            &exe,
            0,
            &["--sizes", "real", "--format", "tree", "--top", "30"],
        );
        for declared in [
            "  names: std::vector<std::string>  ",
            "  by_id: std::map<int, std::string>  ",
            "  index: std::unordered_map<std::string, long>  ",
            "  samples: std::list<double>  ",
            "  shared: std::shared_ptr<std::string>  ",
            "  extra: std::unique_ptr<std::vector<int>>  ",
            "  lines: std::deque<std::string>  ",
            "  chain: std::forward_list<std::string>  ",
            "  flags: std::vector<bool>  ",
            "  choice: std::variant<int, std::string>  ",
            "  triple: std::array<std::string, 3>  ",
            "  record: std::tuple<std::string, int, std::vector<int>>  ",
        ] {
            assert!(
                tree.lines().any(|l| l.starts_with(declared)),
                "{opt}: no line {declared:?} in\n{tree}"
            );
        }
        assert!(!tree.contains("std::__1::"), "{opt}:\n{tree}");
    }
}

/// `--global` on a libc++ binary: `app::shadow`, a global `Owned` the fixture fills as it fills
/// the probed one, measured with no probe in jit and remote mode (the fixture waiting on its
/// stdin): byte-identical, no warning, and exactly the bytes the global owns with its own
/// (`CHECK shadow N`). -O0 and -O2.
#[test]
fn libcxx_global_is_measured_exactly() {
    use std::io::BufRead;
    if !privileged() {
        return;
    }
    for opt in ["-O0", "-O2"] {
        let exe = crate::common::build_fixture_with(
            "footprint_owned",
            opt,
            "clang++",
            &["-stdlib=libc++"],
            "_libcxx",
        );
        let mut child = std::process::Command::new(&exe)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the fixture");
        let stdout = child.stdout.take().expect("stdout");
        let mut shadow = None;
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.expect("a line");
            if let Some(n) = line.strip_prefix("CHECK shadow ") {
                shadow = n.trim().parse::<u64>().ok();
            }
            if line == "READY" {
                break;
            }
        }
        let shadow = shadow.expect("CHECK shadow N");
        let pid = child.id().to_string();
        let run = |mode: &str| {
            let out = oi_e2e::run_oi_trace(
                &[
                    "--pid",
                    &pid,
                    "--global",
                    "app::shadow",
                    "--sizes",
                    "real",
                    "--format",
                    "json",
                    "--mode",
                    mode,
                ],
                std::time::Duration::from_secs(60),
            );
            assert!(out.status.success(), "{opt} {mode}: {out:#?}");
            assert!(
                !out.stderr.iter().any(|l| l.contains("warning")),
                "{opt} {mode}: {:?}",
                out.stderr
            );
            out.stdout
        };
        let (jit, remote) = (run("jit"), run("remote"));
        drop(child.stdin.take());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(jit, remote, "{opt}: jit and remote differ");
        let line = jit.lines().next().expect("a sample");
        let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
        eprintln!(
            "{opt}: app::shadow owns {shadow} B, measured {} B",
            v[0]["size"]
        );
        assert_eq!(v[0]["size"], shadow, "{opt}: app::shadow");
    }
}

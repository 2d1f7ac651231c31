//! Containers of a standard library oi-trace does not know (a g++ fixture that spells its
//! types as libc++ does, `std::__1::vector`, and a real clang++/libc++ build): never walked
//! as plain structs. Each is a node not walked (`notWalked`, exclusiveSize = staticSize), one
//! warning names each type, and the footprint counts no member of theirs; at -O0 and -O2, jit
//! and remote byte-identical.

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
/// installs both). Every libc++ container of its struct is a node not walked, each type is
/// named once on stderr, and the footprint is the struct's own bytes, never a plain-struct
/// walk of libc++'s internals.
#[test]
fn libcxx_containers_are_not_walked_as_plain_structs() {
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
        let (text, _, stderr) = run_probe_stderr(&exe, 0, &["--format", "json"]);
        let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let root = &json[0];
        assert_eq!(root["size"], root["staticSize"], "{opt}: {text}");
        let members = root["members"].as_array().expect("members");
        assert_eq!(members.len(), 14, "{opt}: {text}");
        for m in members {
            assert_eq!(m["notWalked"], m["staticSize"], "{opt}: {m}");
            assert_eq!(m["members"], serde_json::json!([]), "{opt}: {m}");
        }
        // One warning per distinct type: the three shared_ptr<string> members share one.
        let warnings: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("oi-trace: warning: std::__1::"))
            .collect();
        assert_eq!(warnings.len(), 12, "{opt}:\n{stderr}");
        let mut distinct = warnings.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), warnings.len(), "{opt}:\n{stderr}");
    }
}

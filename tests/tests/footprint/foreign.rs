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

/// The bytes each member of `footprint_owned`'s struct owns on the heap, as the fixture's
/// counting operator new saw them (`CHECK member NAME N`), in declaration order.
fn member_bytes(exe: &std::path::Path) -> Vec<(String, u64)> {
    let out = std::process::Command::new(exe)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the fixture");
    let text = String::from_utf8_lossy(&out.stdout);
    let members: Vec<(String, u64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("CHECK member "))
        .map(|l| {
            let (name, n) = l.split_once(' ').expect("CHECK member NAME N");
            (name.to_string(), n.trim().parse().expect("a byte count"))
        })
        .collect();
    assert_eq!(members.len(), 13, "{text}");
    members
}

/// Members of `footprint_owned`'s struct whose libc++ container oi-trace does not walk yet.
const LIBCXX_NOT_WALKED: &[&str] = &["queue"];

/// The real thing: `footprint_owned` built with clang++ and libc++ (`cargo xtask setup`
/// installs both). Every libc++ container oi-trace knows (strings, vector, unique_ptr, list,
/// map, unordered_map/set, shared_ptr from make_shared and from new, optional, and containers
/// of them) is charged exactly the heap bytes the fixture's counting operator new saw for that
/// member; the one it does not know yet (`deque`) is a node not walked, named once on stderr,
/// never a plain-struct walk. -O0 and -O2, jit and remote byte-identical.
#[test]
fn libcxx_containers_are_walked_exactly_or_not_at_all() {
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
        let owned = member_bytes(&exe);
        let real = ["--sizes", "real", "--format", "json"];
        let (text, _, stderr) =
            run_probe_stderr(&exe, 0, &[&real[..], &["--mode", "jit"]].concat());
        let (remote, _, _) =
            run_probe_stderr(&exe, 0, &[&real[..], &["--mode", "remote"]].concat());
        assert_eq!(text, remote, "{opt}: jit and remote differ");
        let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let root = &json[0];
        let members = root["members"].as_array().expect("members");
        assert_eq!(members.len(), 14, "{opt}: {text}");
        let mut heap = 0;
        for m in members {
            let name = m["name"].as_str().expect("name");
            let size = m["size"].as_u64().expect("size");
            let stat = m["staticSize"].as_u64().expect("staticSize");
            if LIBCXX_NOT_WALKED.contains(&name) {
                assert_eq!(m["notWalked"], m["staticSize"], "{opt}: {m}");
                assert_eq!(size, stat, "{opt}: {m}");
                continue;
            }
            assert!(
                m.get("notWalked").is_none(),
                "{opt}: {name} not walked: {m}"
            );
            // `none` (an empty unordered_set) owns nothing and has no line of its own.
            let want = owned.iter().find(|(n, _)| n == name).map_or(0, |(_, b)| *b);
            eprintln!("{opt}: {name}: owned {want} B, reported {} B", size - stat);
            assert_eq!(size - stat, want, "{opt}: {name}: {m}");
            heap += want;
        }
        let root_size = root["size"].as_u64().expect("size");
        let root_static = root["staticSize"].as_u64().expect("staticSize");
        assert_eq!(root_size, root_static + heap, "{opt}: {text}");
        // One warning per type not walked, and no other.
        let warnings: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("oi-trace: warning: "))
            .collect();
        assert_eq!(warnings.len(), LIBCXX_NOT_WALKED.len(), "{opt}:\n{stderr}");
        assert!(
            warnings[0].starts_with("oi-trace: warning: std::__1::deque<int"),
            "{opt}:\n{stderr}"
        );
    }
}

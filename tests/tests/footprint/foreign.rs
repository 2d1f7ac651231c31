//! Containers of a standard library oi-trace does not know (a g++ fixture that spells its
//! types as libc++ does, `std::__1::vector`): never walked as plain structs. Each is a node
//! not walked (`notWalked`, exclusiveSize = staticSize), one warning names each type, and the
//! footprint counts no member of theirs; at -O0 and -O2, jit and remote byte-identical.

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

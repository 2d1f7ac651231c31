//! Unions: a one-member union is walked as its member, every other union stays opaque, and
//! the JSON (`notWalked`), the tree and `--summary` say how many bytes sat in unions that
//! were not walked; at -O0 and -O2, jit and remote byte-identical.

use oi_e2e::{TempDir, privileged};
use serde_json::Value;

/// Sum of `notWalked` over a JSON sample's nodes.
fn not_walked(v: &Value) -> u64 {
    v["notWalked"].as_u64().unwrap_or(0)
        + v["members"]
            .as_array()
            .map_or(0, |m| m.iter().map(not_walked).sum())
}

#[test]
fn opaque_unions_are_reported_and_single_member_unions_walked() {
    if !privileged() {
        return;
    }
    for opt in ["-O0", "-O2"] {
        let failures = crate::common::check_probe("footprint_unions", opt, 0);
        assert!(
            failures.is_empty(),
            "{opt}: mismatches:\n{}",
            failures.join("\n")
        );
    }
    let (text, _) = crate::common::run_probe("footprint_unions", "-O2", 0, &[]);
    let json: Value = serde_json::from_str(&text).expect("JSON");
    let bytes = not_walked(&json[0]);
    // The opaque member and the three in the vector: 4 × 56.
    assert_eq!(bytes, 4 * 56, "{text}");
    // The one-member unions (named and anonymous) have members and no `notWalked`.
    let one = crate::common::find(&json, "0/one");
    assert!(one.get("notWalked").is_none(), "{one}");

    let dir = TempDir::new("unions");
    let summary = dir.file("summary.json");
    let summary_arg = summary.to_str().expect("utf8").to_string();
    let (tree, _) = crate::common::run_probe(
        "footprint_unions",
        "-O2",
        0,
        &["--format", "tree", "--summary", &summary_arg],
    );
    assert!(
        tree.contains(&format!("{bytes} B in unions not walked")),
        "{tree}"
    );
    assert!(tree.contains("union, not walked"), "{tree}");
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary")).expect("JSON");
    assert_eq!(s[0]["union_bytes_not_walked"], bytes, "{s}");
}

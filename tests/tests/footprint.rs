//! Journeys: `oi-trace --mode remote` on live g++ fixtures, compared with the numbers each
//! fixture computes about itself (SEMANTICS.md), exact equality. The footprint pipeline is
//! also tested without the CLI in `oi-user` (`interp::live_tests`), with the same fixtures.

mod footprint_common;

use footprint_common::check_fixture;

#[test]
fn structs_strings_vectors_this_by_value_and_retval() {
    check_fixture("footprint_basic", "-O1");
}

#[test]
fn every_container_family_and_nesting() {
    check_fixture("footprint_containers", "-O1");
}

#[test]
fn type_kinds_and_features() {
    check_fixture("footprint_types", "-O1");
}

#[test]
fn polymorphic_inheritance() {
    check_fixture("footprint_poly", "-O1");
}

#[test]
fn tree_format_summarises_a_million_strings() {
    let (text, p) =
        footprint_common::run_probe("footprint_bigvec", "-O2", 0, &["--format", "tree"]);
    let total = p
        .expect
        .iter()
        .find(|e| e.1 == "size")
        .map(|e| e.2)
        .expect("size");
    let mut lines = text.lines();
    let title = lines.next().unwrap_or("");
    assert!(
        title.starts_with("# pid ") && title.contains(", hit "),
        "{text}"
    );
    let first = lines.next().unwrap_or("");
    assert!(first.starts_with("a0: std::vector<"), "{text}");
    assert!(first.contains("[len 1,000,000, cap "), "{first}");
    assert!(first.ends_with("(100.0%)"), "{first}");
    assert!(text.contains("… 999,990 more elements"), "{text}");
    // Largest first: the ten shown are heap strings of the longest length (69 chars).
    let shown: Vec<&str> = text.lines().skip(2).take(10).collect();
    assert!(
        shown.iter().all(|l| l.contains("[len 69, cap 69]")),
        "{shown:?}"
    );
    let human = format!("{:.1} MiB", total as f64 / (1024.0 * 1024.0));
    assert!(first.contains(&human), "{first} should show {human}");
}

#[test]
fn pretty_json_is_the_same_document() {
    let (pretty, _) = footprint_common::run_probe(
        "footprint_basic",
        "-O1",
        0,
        &["--format", "json", "--pretty"],
    );
    let (plain, _) =
        footprint_common::run_probe("footprint_basic", "-O1", 0, &["--format", "json"]);
    assert_eq!(plain.lines().count(), 1);
    assert!(pretty.lines().count() > 10);
    let a: serde_json::Value = serde_json::from_str(&pretty).expect("pretty JSON");
    let b: serde_json::Value = serde_json::from_str(&plain).expect("plain JSON");
    // Same sizes and shape; only addresses (pointer keys) may differ between runs.
    assert_eq!(a[0]["size"], b[0]["size"]);
    assert_eq!(
        a[0]["members"].as_array().map(Vec::len),
        b[0]["members"].as_array().map(Vec::len)
    );
}

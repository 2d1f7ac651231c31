//! Journeys: `oi-trace --mode remote` on live g++ fixtures, compared with the numbers each
//! fixture computes about itself (docs/semantics.md), exact equality. The footprint pipeline is
//! also tested without the CLI in `oi-user` (`interp::live_tests`), with the same fixtures.

use crate::common::check_fixture;

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
    let (text, p) = crate::common::run_probe("footprint_bigvec", "-O2", 0, &["--format", "tree"]);
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
    assert!(
        first.starts_with("arg0 v: std::vector<std::string>  "),
        "{text}"
    );
    assert!(first.contains("  100.0%  len 1,000,000 / cap "), "{first}");
    let human = format!("{:.1} MiB", total as f64 / (1024.0 * 1024.0));
    assert!(first.contains(&human), "{first} should show {human}");
    // Alike strings fold: `[] × N: std::string  S B each, …`, largest total first, then
    // one line for the rest; the counts add up to the million.
    let (mut count, mut last_total) = (0u64, u64::MAX);
    let number = |s: &str| s.replace(',', "").parse::<u64>().expect("number");
    let rest: Vec<&str> = lines.collect();
    assert_eq!(rest.len(), 11, "ten lines and a summary: {text}");
    for line in &rest[..10] {
        let (n, each) = line
            .strip_prefix("  [] × ")
            .and_then(|l| l.split_once(": std::string  "))
            .and_then(|(n, l)| Some((n, l.split_once(" B each, ")?.0)))
            .unwrap_or_else(|| panic!("{line}"));
        let (n, each) = (number(n), number(each));
        assert!(n * each <= last_total, "largest first: {text}");
        last_total = n * each;
        count += n;
    }
    let more = rest[10]
        .strip_prefix("  … ")
        .and_then(|l| l.split_once(" more elements ("))
        .map(|(n, _)| number(n))
        .unwrap_or_else(|| panic!("{}", rest[10]));
    assert_eq!(count + more, 1_000_000, "{text}");
    // The fixture's largest group: std::to_string(i) of the 600,000 six-digit i not
    // divisible by 3, all inline.
    assert!(
        rest[0].starts_with("  [] × 600,000: std::string  32 B each, ")
            && rest[0].ends_with("  len 6 / cap 15 (inline)"),
        "{text}"
    );
}

#[test]
fn pretty_json_is_the_same_document() {
    let (pretty, _) = crate::common::run_probe(
        "footprint_basic",
        "-O1",
        0,
        &["--format", "json", "--pretty"],
    );
    let (plain, _) = crate::common::run_probe("footprint_basic", "-O1", 0, &["--format", "json"]);
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

/// std::stack / queue / priority_queue over deque, vector and list, nested, as members and as
/// the probed argument, at -O0 and -O2, jit and remote (byte-identical): the numbers the
/// fixture computes; then the names OI gives them.
#[test]
fn container_adapters_as_oi_shows_them() {
    for opt in ["-O0", "-O2"] {
        check_fixture("footprint_adapters", opt);
    }
    let (text, _) = crate::common::run_probe("footprint_adapters", "-O2", 0, &[]);
    let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let names = |path: &str| {
        let n = crate::common::find(&json, path);
        (n["typeNames"].clone(), n["typePath"].clone())
    };
    let spelled = |path: &str| names(path).0[0].as_str().unwrap_or("").to_string();
    assert_eq!(
        spelled("0/stk"),
        "std::stack<int32_t, std::deque<int32_t, std::allocator<int32_t>>>"
    );
    assert_eq!(
        spelled("0/stk/[]"),
        "std::deque<int32_t, std::allocator<int32_t>>"
    );
    assert_eq!(
        spelled("0/que_list"),
        "std::queue<int32_t, std::__cxx11::list<int32_t, std::allocator<int32_t>>>"
    );
    // The comparator is spelled as other non-measured arguments are: its bare DWARF name
    // (g++ writes `long int`).
    assert_eq!(
        spelled("0/pq"),
        "std::priority_queue<int32_t, std::vector<int32_t, std::allocator<int32_t>>, less<int>>"
    );
    assert_eq!(
        spelled("0/pq_deque"),
        "std::priority_queue<int64_t, std::deque<int64_t, std::allocator<int64_t>>, greater<long int>>"
    );
    assert_eq!(
        names("0/nested/[]/[]#1/[]").1,
        serde_json::json!(["a0", "nested", "[]", "[]", "[]"])
    );
    // The comparator is never a child: the adapter has exactly one.
    let pq = crate::common::find(&json, "0/pq");
    assert_eq!(pq["members"].as_array().map(Vec::len), Some(1), "{pq}");
}

/// A pointer to a class the program only declares (`std::deque<short>*`, no deque<short> ever
/// made, so no definition anywhere in the DWARF): chased, it is L 0 C 1 with no child, and
/// its container name is respelled from g++'s text by the same rules, at -O0 and -O2.
#[test]
fn pointer_to_a_declared_only_container() {
    const PROBE: usize = 8;
    for opt in ["-O0", "-O2"] {
        let failures = crate::common::check_probe("footprint_types", opt, PROBE);
        assert!(failures.is_empty(), "{opt}: {}", failures.join("\n"));
        let (text, p) = crate::common::run_probe("footprint_types", opt, PROBE, &[]);
        assert_eq!(p.symbol, "_Z13declared_onlyRK12DeclaredOnly");
        let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let never = crate::common::find(&json, "0/never");
        assert_eq!(
            never["typeNames"],
            serde_json::json!(["std::deque<int16_t, std::allocator<int16_t>>*"]),
            "{opt}: {never}"
        );
        assert_eq!(never["members"], serde_json::json!([]), "{opt}: {never}");
    }
}

//! Journeys beyond libstdc++: protobuf messages and Abseil containers, real Debian libraries
//! (`cargo xtask setup` installs libprotobuf-dev, protobuf-compiler, libabsl-dev), fixtures
//! at -O0 and -O2 -fomit-frame-pointer.
//!
//! Each fixture first proves its own layout notes (the ones in the shipped description
//! files): every Abseil container has a twin with a counting allocator, and the blocks the
//! layout predicts must be exactly what the twin allocated; the protobuf fixture's
//! layout-derived footprint must equal the message's own `SpaceUsedLong()`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use oi_e2e::FixtureBuild;
use serde_json::Value;

const O0: &[&str] = &["-O0"];
const O2: &[&str] = &["-O2", "-fomit-frame-pointer"];

/// The libraries the Abseil fixture links (hash tables and their hash; the b-tree,
/// InlinedVector and node map are header-only beyond that).
const ABSL_LIBS: &[&str] = &[
    "-labsl_raw_hash_set",
    "-labsl_hash",
    "-labsl_city",
    "-labsl_low_level_hash",
];

fn absl_fixture(flags: &[&str]) -> PathBuf {
    let output = format!("beyond_absl{}", flags[0].trim_start_matches('-'));
    FixtureBuild::new("beyond_absl")
        .variant(&output, flags)
        .libs(ABSL_LIBS)
        .build()
}

fn protobuf_fixture(flags: &[&str]) -> PathBuf {
    let output = format!("beyond_protobuf{}", flags[0].trim_start_matches('-'));
    FixtureBuild::new("beyond_protobuf")
        .variant(&output, flags)
        .protoc("beyond_order")
        .libs(&["-lprotobuf"])
        .build()
}

/// Runs the fixture without a tracer (stdin closed: it calls its probes once and exits) and
/// returns its lines that start with `tag`, split into words after the tag.
fn notes(exe: &Path, tag: &str) -> Vec<Vec<String>> {
    let out = Command::new(exe)
        .stdin(Stdio::null())
        .output()
        .expect("run fixture");
    assert!(out.status.success(), "{} failed", exe.display());
    let lines: Vec<Vec<String>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix(tag))
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    assert!(
        !lines.is_empty(),
        "{} printed no {tag} lines",
        exe.display()
    );
    lines
}

/// `CHECK <what> <layout bytes> <allocated bytes>`: the first must equal the second.
fn layout_notes_hold(exe: &Path) {
    let wrong: Vec<String> = notes(exe, "CHECK ")
        .into_iter()
        .filter(|w| w[w.len() - 2] != w[w.len() - 1])
        .map(|w| w.join(" "))
        .collect();
    assert!(wrong.is_empty(), "layout notes wrong: {wrong:#?}");
}

#[test]
fn abseil_layout_notes_match_the_counted_allocations() {
    layout_notes_hold(&absl_fixture(O0));
    layout_notes_hold(&absl_fixture(O2));
}

/// `SPACE_USED <probe> N` and `LAYOUT <probe> N` per probe: equal, but for the tree
/// objects of maps whose buckets turned into trees (`TREE_OBJECTS <probe> N`), which
/// SpaceUsedLong() leaves out.
fn protobuf_layout_equals_space_used(exe: &Path) {
    let trees: Vec<Vec<String>> = notes(exe, "TREE_OBJECTS ");
    let tree_objects = |probe: &str| -> u64 {
        trees
            .iter()
            .find(|w| w[0] == probe)
            .map_or(0, |w| w[1].parse().expect("TREE_OBJECTS number"))
    };
    let space = notes(exe, "SPACE_USED ");
    let layout: Vec<Vec<String>> = notes(exe, "LAYOUT ")
        .into_iter()
        .map(|w| {
            let n: u64 = w[1].parse().expect("LAYOUT number");
            vec![w[0].clone(), (n - tree_objects(&w[0])).to_string()]
        })
        .collect();
    assert_eq!(space, layout, "layout-derived footprint vs SpaceUsedLong()");
}

#[test]
fn protobuf_layout_equals_space_used_long() {
    protobuf_layout_equals_space_used(&protobuf_fixture(O0));
    protobuf_layout_equals_space_used(&protobuf_fixture(O2));
}

/// The Abseil fixture's probes, through the shipped abseil.toml (embedded in oi-trace: no
/// `--containers`).
fn absl_probes(flags: &[&str], symbols: &[&str]) {
    check_probes_with(&absl_fixture(flags), symbols, &[]);
}

/// Checks the named probes of a fixture with oi-trace, JIT and `--mode remote` (identical
/// output), against the fixture's own numbers (exact).
fn check_probes_with(exe: &Path, symbols: &[&str], extra: &[&str]) {
    let probes = crate::common::start_fixture(exe).2;
    let failures: Vec<String> = symbols
        .iter()
        .flat_map(|s| {
            let index = probes
                .iter()
                .position(|p| p.symbol == *s)
                .unwrap_or_else(|| panic!("{} has no probe {s}", exe.display()));
            crate::common::check_exe_with(exe, index, extra)
        })
        .collect();
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

const INLINED_VECTOR: &[&str] = &["take_inline", "take_spilled", "take_str_inline"];

#[test]
fn abseil_inlined_vector_inline_and_spilled() {
    absl_probes(O0, INLINED_VECTOR);
    absl_probes(O2, INLINED_VECTOR);
}

const FLAT_HASH: &[&str] = &[
    "take_i64_map",
    "take_str_vec_map",
    "take_i64_set",
    "take_empty_set",
];

#[test]
fn abseil_flat_hash_map_and_set() {
    absl_probes(O0, FLAT_HASH);
    absl_probes(O2, FLAT_HASH);
}

const BTREE: &[&str] = &[
    "take_btree",
    "take_small_btree",
    "take_empty_btree",
    "take_str_btree",
];

/// `btree_map`: every node's allocation (leaves, internal nodes, a root leaf grown to 4
/// slots) as the counting twin saw it, the empty tree's static node not charged, and the
/// values walked in key order (strings with heap).
#[test]
fn abseil_btree_map() {
    absl_probes(O0, BTREE);
    absl_probes(O2, BTREE);
}

/// `node_hash_map<int64, string>`: the table's block of 8-byte slots, one node per element
/// (each walked as an owned pointer), and the strings the nodes own.
#[test]
fn abseil_node_hash_map() {
    absl_probes(O0, &["take_node_map"]);
    absl_probes(O2, &["take_node_map"]);
}

const REPEATED_PTR_FIELD: &[&str] = &["take_tags", "take_no_tags"];

#[test]
fn protobuf_repeated_ptr_field_of_strings() {
    for flags in [O0, O2] {
        check_probes_with(&protobuf_fixture(flags), REPEATED_PTR_FIELD, &[]);
    }
}

/// The whole message and its repeated scalars, with the shipped protobuf.toml only (embedded
/// in oi-trace: no `--containers`).
const WHOLE_MESSAGE: &[&str] = &[
    "take_order",
    "take_empty_order",
    "take_prices",
    "take_qty",
    "take_no_qty",
];

/// The fixture's `Order` (strings short and long, a nested message, repeated messages,
/// repeated scalars, a map, repeated strings): exactly the layout-derived footprint (JIT =
/// remote), and within 5 % of the message's own `SpaceUsedLong()`.
#[test]
fn protobuf_message_measured_whole() {
    for flags in [O0, O2] {
        let exe = protobuf_fixture(flags);
        check_probes_any_map_order(&exe, WHOLE_MESSAGE, &[]);
        let probes = crate::common::start_fixture(&exe).2;
        for w in notes(&exe, "SPACE_USED ") {
            let space: u64 = w[1].parse().expect("SPACE_USED number");
            let index = probes
                .iter()
                .position(|p| p.symbol == w[0])
                .unwrap_or_else(|| panic!("no probe {}", w[0]));
            let args = ["--format", "json"];
            let (text, _) = crate::common::run_probe_exe(&exe, index, &args);
            let json: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON ({e}): {text}"));
            let got = crate::common::find(&json, "0")["size"]
                .as_u64()
                .expect("size");
            assert!(
                got.abs_diff(space) * 20 <= space,
                "{flags:?} {}: oi-trace {got} B, SpaceUsedLong() {space} B",
                w[0]
            );
        }
    }
}

/// A `Catalog` whose maps' buckets turned into trees (`by_name` one, `by_id` two: the
/// fixture picked keys that land in one bucket under the map's seed and proved that each
/// bucket pair shares one tree, and that the maps' blocks are what its counting operator new
/// saw): exactly the layout-derived footprint, the tree objects and
/// their nodes included (JIT = remote), and within 5 % of `SpaceUsedLong()`, which counts
/// the tree nodes but not the tree objects.
#[test]
fn protobuf_map_with_tree_buckets_measured_exactly() {
    for flags in [O0, O2] {
        let exe = protobuf_fixture(flags);
        let trees = notes(&exe, "TREE take_catalog ");
        assert_eq!(trees.len(), 3, "{flags:?}: the fixture's trees: {trees:?}");
        // The maps' blocks (table, nodes, tree objects, tree nodes, strings) as the layout
        // notes say = what the fixture's counting operator new saw.
        layout_notes_hold(&exe);
        check_probes_any_map_order(&exe, &["take_catalog"], &[]);
        let space: u64 = notes(&exe, "SPACE_USED take_catalog ")[0][0]
            .parse()
            .expect("SPACE_USED number");
        let probes = crate::common::start_fixture(&exe).2;
        let index = probes
            .iter()
            .position(|p| p.symbol == "take_catalog")
            .expect("take_catalog probe");
        let (text, p) = crate::common::run_probe_exe(&exe, index, &["--format", "json"]);
        let json: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON ({e}): {text}"));
        let got = crate::common::find(&json, "0")["size"]
            .as_u64()
            .expect("size");
        let want = p.expect.iter().find(|e| e.1 == "size").expect("E 0 size").2;
        assert_eq!(got, want, "{flags:?}: oi-trace vs the layout");
        assert!(
            got > space && (got - space) * 20 <= space,
            "{flags:?}: oi-trace {got} B, SpaceUsedLong() {space} B"
        );
    }
}

/// One `Choice` per case of its oneof `kind` (a long string, a sub-message, a scalar, none),
/// the second oneof `other` set in some (a double, a string).
const ONEOF: &[&str] = &[
    "take_choice_text",
    "take_choice_where",
    "take_choice_num",
    "take_choice_none",
    "take_choice_label",
];

/// Oneofs through protobuf.toml's `[[union]]` rule: each message exactly its layout-derived
/// footprint (JIT = remote) and equal to its own `SpaceUsedLong()`, -O0 and -O2; no union is
/// left not walked.
#[test]
fn protobuf_oneof_walks_the_active_member() {
    for flags in [O0, O2] {
        let exe = protobuf_fixture(flags);
        check_probes_with(&exe, ONEOF, &[]);
        let probes = crate::common::start_fixture(&exe).2;
        for w in notes(&exe, "SPACE_USED ")
            .iter()
            .filter(|w| ONEOF.contains(&w[0].as_str()))
        {
            let space: u64 = w[1].parse().expect("SPACE_USED number");
            let index = probes
                .iter()
                .position(|p| p.symbol == w[0])
                .unwrap_or_else(|| panic!("no probe {}", w[0]));
            let (text, _) = crate::common::run_probe_exe(&exe, index, &["--format", "json"]);
            assert!(!text.contains("notWalked"), "{flags:?} {}: {text}", w[0]);
            let json: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON ({e}): {text}"));
            let got = crate::common::find(&json, "0")["size"]
                .as_u64()
                .expect("size");
            assert_eq!(
                got, space,
                "{flags:?} {}: oi-trace vs SpaceUsedLong()",
                w[0]
            );
        }
    }
}

/// [`check_probes_with`] where a protobuf `Map`'s elements may come in another order in the
/// two runs: `InnerMap` seeds its hash with the time stamp counter, so the two fixture
/// processes (jit, remote) put the same entries in other buckets. Each map's children are
/// sorted before the outputs are compared; the walkers' byte-identity on one object is
/// `jit::tests::jit_described_node_chains_tagged_and_owned_pointers` (and `..._with_trees`).
fn check_probes_any_map_order(exe: &Path, symbols: &[&str], extra: &[&str]) {
    let probes = crate::common::start_fixture(exe).2;
    let mut failures = Vec::new();
    for s in symbols {
        let index = probes
            .iter()
            .position(|p| p.symbol == *s)
            .unwrap_or_else(|| panic!("{} has no probe {s}", exe.display()));
        let run = |mode: &str| {
            let mut args = vec!["--format", "json", "--mode", mode];
            args.extend_from_slice(extra);
            let (text, p) = crate::common::run_probe_exe(exe, index, &args);
            let mut json: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON ({e}): {text}"));
            sort_map_entries(&mut json);
            (json, p)
        };
        let (remote, p) = run("remote");
        let (jit, _) = run("jit");
        if jit != remote {
            failures.push(format!("{s}: --mode jit differs from --mode remote"));
            continue;
        }
        for (path, key, want) in &p.expect {
            let got = crate::common::find(&remote, path)[key.as_str()].as_u64();
            if got != Some(*want) {
                failures.push(format!(
                    "{s} {path} {key}: got {got:?}, fixture says {want}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

/// Sorts the children of every `google::protobuf::Map` node by their text.
fn sort_map_entries(v: &mut Value) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(sort_map_entries),
        Value::Object(node) => {
            let is_map = node
                .get("typeNames")
                .and_then(Value::as_array)
                .and_then(|t| t.first())
                .and_then(Value::as_str)
                .is_some_and(|t| t.starts_with("google::protobuf::Map<"));
            if let Some(members) = node.get_mut("members") {
                sort_map_entries(members);
                if is_map && let Value::Array(items) = members {
                    items.sort_by_cached_key(Value::to_string);
                }
            }
        }
        _ => {}
    }
}

//! `calls --pprof`, read by `go tool pprof` (`-raw`, `-top`) and `protoc --decode` against the
//! vendored `profile.proto`: one sample per node of the JSON tree of the same run, with its
//! calls, total and self time, at -O0 and at -O2 without frame pointers.

use std::collections::BTreeMap;

use oi_e2e::{
    TempDir,
    pprof::{Decoded, go_pprof, protoc_decode, raw_sample_types, raw_totals, top_total},
    privileged,
};

use super::{assert_exact, fixture, nodes, traced_run};

const TYPES: [&str; 3] = ["calls/count", "wall/nanoseconds", "self/nanoseconds"];
const KEYS: [&str; 3] = ["calls", "total_ns", "self_ns"];

#[test]
fn pprof_call_tree_read_by_go_pprof_and_protoc() {
    if !privileged() {
        return;
    }
    for (variant, flags) in [
        ("calls_o0", &["-O0"][..]),
        ("calls_o2", &["-O2", "-fomit-frame-pointer"][..]),
    ] {
        let binary = fixture(variant, flags);
        let dir = TempDir::new("calls-pprof");
        let profile = dir.file("calls.pb.gz");
        let (printed, report, out) =
            traced_run(&binary, 1, 12, &["--pprof", profile.to_str().unwrap()]);
        assert_exact(&report, &printed, false, &out);
        let tree = nodes(&report["tree"]);
        let sum = |key: &str| -> i64 { tree.values().map(|n| n[key].as_i64().unwrap()).sum() };

        // go tool pprof: the three types, self the default; -raw's sums are the tree's.
        let raw = go_pprof(&["-raw"], &profile);
        assert_eq!(raw_sample_types(&raw), TYPES, "{raw}");
        assert!(raw.contains("self/nanoseconds[dflt]"), "{raw}");
        let want: Vec<i64> = KEYS.iter().map(|k| sum(k)).collect();
        assert_eq!(raw_totals(&raw), want, "{raw}");
        // -top adds self times: its total is the entry's total time; and the calls.
        let entry_ns = report["tree"]["total_ns"].as_i64().unwrap();
        assert_eq!(sum("self_ns"), entry_ns);
        let top = go_pprof(&["-top", "-unit=ns"], &profile);
        assert_eq!(top_total(&top), format!("{entry_ns}ns"), "{top}");
        let top = go_pprof(&["-top", "-sample_index=calls"], &profile);
        assert_eq!(top_total(&top), sum("calls").to_string(), "{top}");

        // protoc: each node is one sample, its frames the node's path (leaf first), its
        // values the node's numbers.
        let decoded = Decoded::parse(&protoc_decode(&profile));
        let types: Vec<String> = decoded
            .sample_types
            .iter()
            .map(|(t, u)| format!("{t}/{u}"))
            .collect();
        assert_eq!(types, TYPES);
        assert_eq!(decoded.default_sample_type, "self");
        assert_eq!(decoded.strings[0], "");
        let samples: BTreeMap<String, Vec<i64>> = decoded
            .samples
            .iter()
            .map(|(locations, values)| {
                let mut names = decoded.frame_names(locations);
                names.reverse();
                (names.join("/"), values.clone())
            })
            .collect();
        assert_eq!(samples.len(), tree.len());
        for (path, node) in &tree {
            let values: Vec<i64> = KEYS.iter().map(|k| node[*k].as_i64().unwrap()).collect();
            assert_eq!(samples.get(path), Some(&values), "{path}");
        }
        // The entry, with its demangled and its mangled name.
        let handle = decoded
            .functions
            .values()
            .find(|(name, _)| name == "shop::handle")
            .expect("shop::handle among the functions");
        assert!(handle.1.starts_with("_ZN4shop6handle"), "{handle:?}");
    }
}

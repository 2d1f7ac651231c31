//! `allocs --pprof` and `--pprof-lifetimes`, read by the readers people use: `go tool pprof`
//! (`-raw`, `-top`) and `protoc --decode` against the vendored `profile.proto`. The fixture
//! runs as in the other journeys, at -O0 and at -O2 without frame pointers; the profiles
//! must hold exactly what the JSON report of the same run says: totals per sample type, per
//! site (frames and values), per type (its leaf frame), and the lifetimes per bucket.

use std::{collections::BTreeMap, path::Path};

use oi_e2e::{
    TempDir,
    pprof::{Decoded, go_pprof, protoc_decode, raw_sample_types, raw_totals, top_rows, top_total},
    privileged,
};
use serde_json::Value;

use super::{assert_exact, journey, o0, o2};

const HEAP_TYPES: [&str; 4] = [
    "alloc_objects/count",
    "alloc_space/bytes",
    "inuse_objects/count",
    "inuse_space/bytes",
];
/// The report's keys of the heap profile's four values, in its order.
const HEAP_KEYS: [&str; 4] = ["allocs", "bytes", "live_allocs", "live_bytes"];

fn u(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("a number: {v}"))
}

/// The run's heap and lifetimes profiles against its report.
fn check(binary: &Path, extra: &[&str], exact: bool) {
    let dir = TempDir::new("allocs-pprof");
    let heap = dir.file("heap.pb.gz");
    let lifetimes = dir.file("lifetimes.pb.gz");
    let mut args = vec![
        "--pprof",
        heap.to_str().unwrap(),
        "--pprof-lifetimes",
        lifetimes.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (printed, report) = journey(binary, &args);
    if exact {
        assert_exact(&printed, &report, "glibc");
    }
    let totals = &report["totals"];

    // go tool pprof: the four types in Go's order, inuse_space the default, and totals equal
    // to the report's, summed over -raw's samples and as -top prints them.
    let raw = go_pprof(&["-raw"], &heap);
    assert_eq!(raw_sample_types(&raw), HEAP_TYPES, "{raw}");
    assert!(raw.contains("inuse_space/bytes[dflt]"), "{raw}");
    assert!(raw.contains("PeriodType: space bytes"), "{raw}");
    let want: Vec<i64> = HEAP_KEYS.iter().map(|k| u(&totals[*k])).collect();
    assert_eq!(raw_totals(&raw), want, "-raw totals against {totals}");
    for (index, want) in HEAP_TYPES.iter().zip(&want) {
        let (name, unit) = index.split_once('/').unwrap();
        // Bytes in bytes, not kB; counts as they are.
        let unit_flag = if unit == "bytes" { "B" } else { "" };
        let index = format!("-sample_index={name}");
        let mut flags = vec!["-top", index.as_str()];
        if unit == "bytes" {
            flags.push("-unit=B");
        }
        let top = go_pprof(&flags, &heap);
        // pprof prints a zero total as "0".
        let expected = if *want == 0 {
            "0".to_string()
        } else {
            format!("{want}{unit_flag}")
        };
        assert_eq!(top_total(&top), expected, "{name}: {top}");
    }
    // The comments say how the run sampled.
    let sampled = report["sampled"].as_bool().unwrap();
    assert_eq!(raw.contains("not sampled"), !sampled, "{raw}");

    // protoc: the same file against the vendored .proto.
    let decoded = Decoded::parse(&protoc_decode(&heap));
    let types: Vec<String> = decoded
        .sample_types
        .iter()
        .map(|(t, u)| format!("{t}/{u}"))
        .collect();
    assert_eq!(types, HEAP_TYPES);
    assert_eq!(decoded.default_sample_type, "inuse_space");
    assert_eq!(decoded.strings[0], "");
    // The fixture's executable is the first mapping, with its GNU build id.
    let (_, file, build_id) = &decoded.mappings[0];
    assert_eq!(Path::new(file), binary, "{:?}", decoded.mappings);
    assert_eq!(*build_id, build_id_of(binary));
    // A known function, with its demangled and its mangled name: in the profile exactly when
    // the report has it (a sampled run may take none of its allocations).
    let leak = decoded
        .functions
        .values()
        .find(|(name, _)| name == "shop::leak");
    assert_eq!(
        leak.is_some(),
        report.to_string().contains("shop::leak"),
        "shop::leak in the profile and in the report"
    );
    assert!(!exact || leak.is_some(), "an unsampled run has shop::leak");
    if let Some(leak) = leak {
        assert!(leak.1.starts_with("_ZN4shop4leak"), "{leak:?}");
    }

    // Each site of the report is one sample: its type, its classes, then its stack (inlined
    // frames innermost first), with its four numbers.
    let mut samples: BTreeMap<Vec<&str>, Vec<i64>> = BTreeMap::new();
    for (locations, values) in &decoded.samples {
        samples.insert(decoded.frame_names(locations), values.clone());
    }
    let sites = report["sites"].as_array().unwrap();
    assert_eq!(decoded.samples.len(), sites.len());
    let mut by_type: BTreeMap<String, i64> = BTreeMap::new();
    for site in sites {
        let mut frames: Vec<String> = Vec::new();
        if let Some(t) = site["type"].as_str() {
            frames.push(format!("type: {t}"));
            *by_type.entry(t.to_string()).or_default() += u(&site["bytes"]);
        }
        let stack: Vec<String> = site["stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_string())
            .collect();
        let code: Vec<&str> = stack.iter().map(String::as_str).collect();
        // The sample whose frames are this type, then class frames only, then this stack.
        let found = samples
            .iter()
            .find(|(names, _)| {
                names.len() >= frames.len() + code.len()
                    && names.ends_with(&code)
                    && frames.iter().zip(names.iter()).all(|(f, n)| f == n)
                    && names[frames.len()..names.len() - code.len()]
                        .iter()
                        .all(|f| f.starts_with("class: "))
            })
            .unwrap_or_else(|| panic!("no sample for {site}"));
        let values: Vec<i64> = HEAP_KEYS.iter().map(|k| u(&site[*k])).collect();
        assert_eq!(*found.1, values, "{site}");
    }
    // Types as pprof -top lists them: their leaf frame's flat bytes. pprof shortens
    // template names, so only the types without template arguments are compared there.
    let top = go_pprof(
        &[
            "-top",
            "-sample_index=alloc_space",
            "-unit=B",
            "-nodefraction=0",
            "-nodecount=1000",
        ],
        &heap,
    );
    let rows = top_rows(&top);
    // A sampled run may take no allocation of a known type; an unsampled one always does.
    assert!(!exact || !by_type.is_empty(), "no typed site: {report}");
    for t in report["types"].as_array().unwrap() {
        let name = t["type"].as_str().unwrap();
        assert_eq!(by_type[name], u(&t["bytes"]), "{t}");
        if !name.contains('<') {
            let row = rows
                .iter()
                .find(|r| r.2 == format!("type: {name}"))
                .unwrap_or_else(|| panic!("type: {name} not in -top:\n{top}"));
            assert_eq!(row.0, format!("{}B", u(&t["bytes"])), "{top}");
        }
    }
    // Classes: a class frame's cum is every site beneath one of its methods.
    for c in report["classes"].as_array().unwrap() {
        let name = format!("class: {}", c["class"].as_str().unwrap());
        let cum: i64 = decoded
            .samples
            .iter()
            .filter(|(l, _)| decoded.frame_names(l).contains(&name.as_str()))
            .map(|(_, v)| v[1])
            .sum();
        assert_eq!(cum, u(&c["bytes"]), "{name}");
    }

    // Lifetimes: frees per stack and bucket, the bucket the leaf frame; the total is every
    // site's lifetimes summed.
    let raw = go_pprof(&["-raw"], &lifetimes);
    assert_eq!(raw_sample_types(&raw), ["frees/count"], "{raw}");
    let frees: i64 = sites
        .iter()
        .flat_map(|s| s["lifetimes"].as_array().unwrap())
        .map(u)
        .sum();
    assert!(!exact || frees > 0, "no frees: {report}");
    assert_eq!(raw_totals(&raw), [frees]);
    let top = go_pprof(&["-top"], &lifetimes);
    assert_eq!(top_total(&top), frees.to_string(), "{top}");
    let decoded = Decoded::parse(&protoc_decode(&lifetimes));
    let buckets = report["buckets_s"].as_array().unwrap();
    let mut per_bucket: BTreeMap<&str, i64> = BTreeMap::new();
    for (locations, values) in &decoded.samples {
        let leaf = decoded.frame_names(&locations[..1])[0];
        *per_bucket.entry(leaf).or_default() += values[0];
    }
    let below = format!("lifetime: < {} s", buckets[0]);
    let above = format!("lifetime: >= {} s", buckets[buckets.len() - 1]);
    let sum = |i: usize| -> i64 { sites.iter().map(|s| u(&s["lifetimes"][i])).sum() };
    assert_eq!(
        per_bucket.get(below.as_str()).copied().unwrap_or(0),
        sum(0),
        "{per_bucket:?}"
    );
    assert_eq!(
        per_bucket.get(above.as_str()).copied().unwrap_or(0),
        sum(buckets.len()),
        "{per_bucket:?}"
    );
}

/// The build id `readelf -n` prints for `binary`.
fn build_id_of(binary: &Path) -> String {
    let out = std::process::Command::new("readelf")
        .arg("-n")
        .arg(binary)
        .output()
        .expect("run readelf");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .expect("the fixture has a build id")
}

#[test]
fn pprof_heap_and_lifetimes_profiles_read_by_go_pprof_and_protoc() {
    if !privileged() {
        return;
    }
    for binary in [o0(), o2()] {
        check(&binary, &[], true);
    }
}

/// Sampled runs: the profiles hold the report's estimates, and say how they were sampled.
#[test]
fn pprof_of_sampled_runs_holds_the_reports_estimates() {
    if !privileged() {
        return;
    }
    check(&o2(), &["--every", "3"], false);
    check(&o0(), &["--sample-bytes", "4096"], false);
}

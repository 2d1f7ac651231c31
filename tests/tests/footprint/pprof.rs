//! Footprint `--pprof`, read by `go tool pprof` (`-raw`, `-top`) and `protoc --decode` against
//! the vendored `profile.proto`, on the live `output_people` fixture (at -O0 and -O2), which
//! prints its own footprint: the profile's total is the sampled object's size, each member's
//! cum (its frame and everything beneath) is its inclusive size in the JSON report of the same
//! run and in the fixture's own count, and `-top` lists first the member holding the most.

use std::time::Duration;

use oi_e2e::{
    Fixture, FixtureBuild, TempDir,
    pprof::{Decoded, go_pprof, protoc_decode, raw_sample_types, raw_totals, top_rows, top_total},
    privileged, run_oi_trace,
};

const TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn pprof_of_a_footprint_lists_members_by_bytes() {
    if !privileged() {
        return;
    }
    for (variant, flag) in [("output_people_O0", "-O0"), ("output_people_O2", "-O2")] {
        let bin = FixtureBuild::new("output_people")
            .variant(variant, &[flag])
            .build();
        let f = Fixture::start(&bin, &["tree"]);
        let facts: std::collections::HashMap<String, i64> = f
            .stdout
            .seen()
            .iter()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                (w.next()? == "F").then_some(())?;
                Some((w.next()?.to_string(), w.next()?.parse().ok()?))
            })
            .collect();
        let dir = TempDir::new("footprint-pprof");
        let profile = dir.file("footprint.pb.gz");
        let pid = f.pid.to_string();
        let out = run_oi_trace(
            &[
                "--pid",
                &pid,
                "--sizes",
                "oi",
                "--uprobe",
                "inspect",
                "--count",
                "1",
                "--format",
                "json",
                "--pprof",
                profile.to_str().unwrap(),
            ],
            TIMEOUT,
        );
        assert!(out.status.success(), "{out:#?}");
        let report = oi_e2e::json(out.stdout.trim());
        let root = &report[0];
        let size = root["size"].as_i64().unwrap();
        assert_eq!(size, facts["record.size"]);

        // go tool pprof: in-use bytes the default; the total is the object's size.
        let raw = go_pprof(&["-raw"], &profile);
        assert_eq!(
            raw_sample_types(&raw),
            ["inuse_objects/count", "inuse_space/bytes"],
            "{raw}"
        );
        assert!(raw.contains("inuse_space/bytes[dflt]"), "{raw}");
        assert_eq!(raw_totals(&raw)[1], size, "{raw}");
        let top = go_pprof(
            &["-top", "-unit=B", "-nodefraction=0", "-nodecount=1000"],
            &profile,
        );
        assert_eq!(top_total(&top), format!("{size}B"), "{top}");
        // -top's first row holds the most bytes of its own: the tags' strings.
        let rows = top_rows(&top);
        assert!(rows[0].2.starts_with("arg0 r.tags[]: "), "{top}");
        // Each member's cum is its inclusive size: the fixture's, and the JSON report's.
        let cum = |member: &str| -> String {
            let row = rows
                .iter()
                .find(|r| r.2.starts_with(&format!("arg0 r.{member}: ")))
                .unwrap_or_else(|| panic!("no row of {member}:\n{top}"));
            row.1.clone()
        };
        for member in ["tags", "index", "same", "name"] {
            assert_eq!(
                cum(member),
                format!("{}B", facts[&format!("record.{member}")])
            );
        }
        for m in root["members"].as_array().unwrap() {
            let (name, bytes) = (m["name"].as_str().unwrap(), m["size"].as_i64().unwrap());
            if bytes > 0 {
                assert_eq!(cum(name), format!("{bytes}B"), "{m}");
            }
        }

        // protoc: the same types and frames.
        let decoded = Decoded::parse(&protoc_decode(&profile));
        assert_eq!(decoded.default_sample_type, "inuse_space");
        assert_eq!(decoded.strings[0], "");
        assert!(
            decoded.strings.iter().any(|s| s == "arg0 r: app::Record"),
            "{:?}",
            decoded.strings
        );
        let total: i64 = decoded.samples.iter().map(|(_, v)| v[1]).sum();
        assert_eq!(total, size);
        f.assert_running();
    }
}

//! chase-raw-pointers' heap blocks, on a live g++ fixture (`raw_arena.cpp`, at -O0 and at -O2
//! -fomit-frame-pointer) that prints `malloc_usable_size` of its blocks itself: a `char*`
//! that owns a block is charged the block's usable size (arena and mmapped chunks), once,
//! with `heapBlock` in its JSON; the same block through another pointer is not charged
//! again; an object reachable twice is measured once; a struct and its first member share
//! an address and are both measured; a pointer inside a block charges no block. Both the
//! walker in the target (jit) and the remote interpreter give the same numbers.

use std::collections::HashMap;
use std::time::Duration;

use oi_e2e::{Fixture, FixtureBuild, json, maps_of, privileged, run_oi_trace};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(60);

fn builds() -> [std::path::PathBuf; 2] {
    [
        FixtureBuild::new("raw_arena")
            .variant("raw_arena_O0", &["-O0"])
            .build(),
        FixtureBuild::new("raw_arena")
            .variant("raw_arena_O2", &["-O2", "-fomit-frame-pointer"])
            .build(),
    ]
}

/// The fixture's `F key value` lines.
fn facts(f: &Fixture) -> HashMap<String, u64> {
    f.stdout
        .seen()
        .iter()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "F").then_some(())?;
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect()
}

fn member<'a>(root: &'a Value, name: &str) -> &'a Value {
    root["members"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["name"] == name))
        .unwrap_or_else(|| panic!("no member {name} in {root}"))
}

#[test]
fn blocks_are_charged_at_their_usable_size_once() {
    if !privileged() {
        return;
    }
    for bin in builds() {
        let f = Fixture::start(&bin, &[]);
        let facts = facts(&f);
        assert_eq!(facts["mmapped"], 1, "blocks[2] is not an mmapped chunk");
        let maps = maps_of(f.pid);
        let pid = f.pid.to_string();
        for mode in ["jit", "remote"] {
            let args = [
                "--pid",
                &pid,
                "--uprobe",
                "inspect",
                "--arg",
                "arg0",
                "--feature",
                "chase-raw-pointers",
                "--count",
                "1",
                "--mode",
                mode,
            ];
            let out = run_oi_trace(&args, TIMEOUT);
            assert!(out.status.success(), "{mode}: {out:#?}");
            let doc = json(&out.stdout);
            let root = &doc[0];
            let what = format!("{} {mode}", bin.display());
            assert_eq!(root["size"], facts["total"], "{what}: {root}");

            // Each block: the char* is charged the whole block, the char inside it once.
            let blocks = member(root, "blocks")["members"]
                .as_array()
                .expect("blocks");
            for (i, b) in blocks.iter().enumerate() {
                let usable = facts[&format!("usable{i}")];
                assert_eq!(b["heapBlock"], usable, "{what}: block {i}: {b}");
                assert_eq!(b["size"], 8 + usable, "{what}: block {i}: {b}");
                assert_eq!(b["exclusiveSize"], 8 + usable - 1, "{what}: block {i}");
                assert_eq!(b["length"], 1, "{what}: block {i}");
                assert_eq!(b["members"][0]["size"], 1, "{what}: block {i}");
            }
            // The same block through the same type: a revisit, nothing more.
            let again = member(root, "again");
            assert_eq!(again["size"], 8, "{what}: {again}");
            assert_eq!(again["length"], 0, "{what}: {again}");
            assert!(again.get("heapBlock").is_none(), "{what}: {again}");
            // The same block as another type: its first byte is measured, the block is not
            // charged twice.
            let bytes = member(root, "bytes");
            assert_eq!(bytes["size"], 9, "{what}: {bytes}");
            assert_eq!(bytes["length"], 1, "{what}: {bytes}");
            assert!(bytes.get("heapBlock").is_none(), "{what}: {bytes}");
            // One node through two pointers: measured once. A lone object's block is no
            // larger than the object needs: measured as OI does, no heapBlock.
            let (a, b) = (member(root, "a"), member(root, "b"));
            assert_eq!(a["size"], 8 + facts["node"], "{what}: {a}");
            assert!(a.get("heapBlock").is_none(), "{what}: {a}");
            assert_eq!(b["size"], 8, "{what}: {b}");
            assert_eq!(b["length"], 0, "{what}: {b}");
            // A struct and its first member at one address: both measured.
            let (pair, first) = (member(root, "pair"), member(root, "first"));
            assert_eq!(pair["size"], 8 + facts["pair"], "{what}: {pair}");
            assert_eq!(first["size"], 16, "{what}: {first}");
            assert_eq!(first["length"], 1, "{what}: {first}");
            assert_eq!(first["pointer"], pair["pointer"], "{what}");
            // Inside a block, not at its start.
            let inner = member(root, "inner");
            assert_eq!(inner["size"], 16, "{what}: {inner}");
            assert_eq!(inner["length"], 1, "{what}: {inner}");
            assert!(inner.get("heapBlock").is_none(), "{what}: {inner}");
        }
        f.assert_running();
        assert_eq!(maps_of(f.pid), maps, "maps changed");
        assert!(f.finish().success());
    }
}

/// Without chase-raw-pointers nothing changes: every pointer is a stubbed 8 bytes.
#[test]
fn without_the_feature_pointers_stay_stubbed() {
    if !privileged() {
        return;
    }
    let bin = &builds()[1];
    let f = Fixture::start(bin, &[]);
    let pid = f.pid.to_string();
    let out = run_oi_trace(
        &["--pid", &pid, "--uprobe", "inspect", "--count", "1"],
        TIMEOUT,
    );
    assert!(out.status.success(), "{out:#?}");
    let doc = json(&out.stdout);
    assert_eq!(doc[0]["size"], 80, "{}", doc[0]);
    assert!(!out.stdout.contains("heapBlock"));
    assert!(f.finish().success());
}

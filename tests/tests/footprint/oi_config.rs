//! OI's configuration file (`--config`): `[[codegen.ignore]]` makes a type opaque or drops
//! members before padding, `[[codegen.capture_keys]]` captures map keys, `features` adds
//! features; a malformed file is a one-line error. Compared against the same object measured
//! without the file, in the same process.

use std::time::Duration;

use oi_e2e::{Fixture, FixtureBuild, TempDir, json, privileged, run_oi_trace};
use serde_json::Value;

const SECOND: Duration = Duration::from_secs(1);

/// `shop::inspect(const Ledger&, long)`'s Ledger (items: vector<string> of 100, notes:
/// map<long, string> of 10), measured once, with `config` as OI's file if given.
fn ledger(pid: i32, dir: &TempDir, config: Option<&str>) -> Value {
    let pid = pid.to_string();
    let path = dir.file("oid.toml");
    let mut args = vec!["--pid", &pid, "--uprobe", "shop::inspect", "--count", "1"];
    let path_arg = path.to_str().unwrap_or_default().to_string();
    if let Some(text) = config {
        std::fs::write(&path, text).expect("config");
        args.extend(["--config", &path_arg]);
    }
    let out = run_oi_trace(&args, 60 * SECOND);
    assert!(out.status.success(), "{out:#?}");
    json(&out.stdout)[0].clone()
}

fn num(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

#[test]
fn ignore_capture_keys_and_features_from_oids_file() {
    if !privileged() {
        return;
    }
    let mut f = Fixture::start(&FixtureBuild::new("races").build(), &["10"]);
    f.stdout.expect("tick", 20 * SECOND);
    let dir = TempDir::new("oid-config");
    let plain = ledger(f.pid, &dir, None);
    let members = plain["members"].as_array().expect("members");
    let items = members
        .iter()
        .find(|m| m["name"] == "items")
        .expect("items");

    // The whole type ignored: opaque, as a union is.
    let opaque = ledger(
        f.pid,
        &dir,
        Some("[[codegen.ignore]]\ntype = \"shop::Ledger\"\n"),
    );
    let s = num(&plain, "staticSize");
    assert_eq!(
        (
            num(&opaque, "staticSize"),
            num(&opaque, "exclusiveSize"),
            num(&opaque, "size")
        ),
        (s, s, s),
        "{opaque}"
    );
    assert_eq!(opaque["members"], Value::Array(Vec::new()));

    // One member ignored: gone, its bytes the struct's padding, its heap not counted.
    let some = ledger(
        f.pid,
        &dir,
        Some("[[codegen.ignore]]\ntype = \"shop::Ledger\"\nmembers = [\"items\"]\n"),
    );
    let names: Vec<&Value> = some["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| &m["name"])
        .collect();
    assert_eq!(names, ["notes"]);
    assert_eq!(
        num(&some, "exclusiveSize"),
        num(&plain, "exclusiveSize") + num(items, "staticSize")
    );
    assert_eq!(
        num(&some, "size"),
        num(&plain, "size") - num(items, "size") + num(items, "staticSize"),
        "the ledger keeps its static size; the items' heap is not counted"
    );

    // Keys captured where the file selects them: `notes` of the struct named Ledger (the
    // map's keys are 0..9), with a feature from the file too. `top_level` selects the root
    // alone, which is no map here: no keys anywhere.
    let notes_data = |config: &str| -> (Vec<Option<u64>>, u64) {
        let v = ledger(f.pid, &dir, Some(config));
        let notes = v["members"]
            .as_array()
            .expect("members")
            .iter()
            .find(|m| m["name"] == "notes")
            .expect("notes")
            .clone();
        let data = notes["members"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| e["data"].as_u64())
            .collect();
        (data, num(&v, "size"))
    };
    let (data, size) = notes_data(
        "features = [\"chase-raw-pointers\"]\n[[codegen.capture_keys]]\ntype = \"Ledger\"\nmembers = [\"notes\"]\n",
    );
    assert_eq!(data, (0..10).map(Some).collect::<Vec<_>>());
    assert_eq!(size, num(&plain, "size"), "sizes unchanged");
    let (data, _) = notes_data("[[codegen.capture_keys]]\ntop_level = true\n");
    assert_eq!(data, vec![None; 10], "only the root's map is selected");

    // A file that is not TOML: one line, exit 2.
    let pid = f.pid.to_string();
    let bad = dir.file("bad.toml");
    std::fs::write(&bad, "features = [").expect("write");
    let out = run_oi_trace(
        &[
            "--pid",
            &pid,
            "--uprobe",
            "shop::inspect",
            "--count",
            "1",
            "--config",
            bad.to_str().unwrap_or_default(),
        ],
        60 * SECOND,
    );
    assert_eq!(out.status.code(), Some(2), "{out:#?}");
    assert_eq!(out.stderr.len(), 1, "{out:#?}");
    assert!(
        out.stderr[0].starts_with("oi-trace: error: --config "),
        "{out:#?}"
    );
    f.assert_running();
}

//! A real C++ library nobody here wrote, driven the way a user's program drives it:
//! nlohmann/json (Debian's nlohmann-json3-dev, installed by `cargo xtask setup`), in a driver
//! built at -O2 -g. The library's central objects (a JSON object and a JSON array) are
//! measured while the program runs, and every number is checked against what the library
//! itself reports (its element counts, its keys, its capacity); a library function that -O2
//! only inlines is counted by the name a user types.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use oi_e2e::{Fixture, FixtureBuild, OiTrace, SIGINT, SIGUSR1, TempDir, json, maps_of, privileged};
use serde_json::Value;

const SECOND: Duration = Duration::from_secs(1);
const ROUNDS: usize = 40;

fn driver() -> PathBuf {
    assert!(
        Path::new("/usr/include/nlohmann/json.hpp").exists(),
        "nlohmann-json3-dev is missing: run `cargo xtask setup`"
    );
    FixtureBuild::new("real_json")
        .variant("real_json_O2", &["-O2"])
        .build()
}

fn lines_in(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(json)
        .collect()
}

/// The driver's own report of round R: what the library says of the object and the array.
#[derive(Debug)]
struct Round {
    keys: u64,
    object_bytes: u64,
    items: u64,
    capacity: u64,
    array_bytes: u64,
}

#[test]
fn nlohmann_json_objects_measured_against_the_library() {
    if !privileged() {
        return;
    }
    let binary = driver();
    let mut fixture = Fixture::start(&binary, &[&ROUNDS.to_string()]);
    let pid = fixture.pid.to_string();
    let maps = maps_of(fixture.pid);
    let dir = TempDir::new("json");
    let log = dir.file("samples.jsonl");
    let measuring = OiTrace::attached(&[
        "--pid",
        &pid,
        // The fixture computes OI's rules (docs/semantics.md).
        "--sizes",
        "oi",
        "--uprobe",
        "catalog",
        "--uprobe",
        "shelve",
        "--arg",
        "arg0",
        "--sample-log",
        log.to_str().unwrap(),
    ]);
    // The library's push_back exists at -O2 only inlined into main: counted by the name a
    // user types, namespace and class template arguments left out.
    let mut counting = OiTrace::start(&[
        "--pid",
        &pid,
        "--uprobe",
        "nlohmann::basic_json::push_back",
        "--count-only",
    ]);
    let attached = counting.stderr.expect("oi-trace: attached", 60 * SECOND);
    assert!(attached.contains("inlined"), "{attached}");
    fixture.signal(SIGUSR1);
    let mut rounds = Vec::new();
    for r in 1..=ROUNDS {
        let line = fixture.stdout.expect("round", 60 * SECOND);
        let n: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|w| w.parse().unwrap())
            .collect();
        assert_eq!(n[0], r as u64, "{line}");
        rounds.push(Round {
            keys: n[1],
            object_bytes: n[2],
            items: n[3],
            capacity: n[4],
            array_bytes: n[5],
        });
    }
    let done = fixture.stdout.expect("done", 60 * SECOND);
    let pushes: u64 = done.split_whitespace().nth(2).unwrap().parse().unwrap();
    // Every sample in (or dropped on a loaded machine), then stop both runs.
    let deadline = Instant::now() + 30 * SECOND;
    let (mut seen, mut since) = (usize::MAX, Instant::now());
    loop {
        let now = lines_in(&log).len();
        if now != seen {
            (seen, since) = (now, Instant::now());
        }
        if now > 0 && since.elapsed() > Duration::from_millis(500) {
            break;
        }
        assert!(Instant::now() < deadline, "no samples");
        std::thread::sleep(Duration::from_millis(20));
    }
    measuring.signal(SIGINT);
    counting.signal(SIGINT);
    let measured = measuring.finish(60 * SECOND);
    let counted = counting.finish(60 * SECOND);
    assert!(measured.status.success(), "{measured:#?}");
    assert!(counted.status.success(), "{counted:#?}");

    let samples: Vec<Value> = measured.stdout.lines().map(json).collect();
    let log = lines_in(&log);
    assert_eq!(samples.len(), log.len());
    let (mut objects, mut arrays) = (0, 0);
    for (record, sample) in log.iter().zip(&samples) {
        let round = &rounds[record["hit"].as_u64().unwrap() as usize - 1];
        let root = &sample[0];
        match record["probe"].as_str().unwrap() {
            "catalog" => {
                objects += 1;
                assert_eq!(root["length"], round.keys, "{round:?}");
                assert_eq!(root["size"], round.object_bytes, "{round:?}: {root}");
            }
            _ => {
                arrays += 1;
                assert_eq!(root["length"], round.items, "{round:?}");
                assert_eq!(root["capacity"], round.capacity, "{round:?}");
                assert_eq!(root["size"], round.array_bytes, "{round:?}: {root}");
            }
        }
    }
    assert!(
        objects > 0 && arrays > 0,
        "{objects} objects, {arrays} arrays"
    );
    let line = format!(
        "oi-trace: nlohmann::basic_json::push_back: {pushes} hits, 0 sampled, 0 dropped, 0 \
         filtered"
    );
    assert!(counted.stderr.contains(&line), "{line}: {counted:#?}");
    fixture.assert_running();
    assert_eq!(maps_of(fixture.pid), maps, "maps changed");
    assert!(fixture.finish().success());
}

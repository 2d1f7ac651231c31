//! Binaries that are not where `/proc/PID/maps` says: a process chrooted under its own mount
//! and pid namespaces (its maps name files from our root, and `/proc/PID/root` holds them under
//! other names), and a binary deleted and replaced on disk after it started (a rolling
//! deployment). Both are sampled exactly: the same footprint as the same program run plainly.

use std::{path::Path, process::Command, time::Duration};

use oi_e2e::{Fixture, FixtureBuild, TempDir, json, privileged, run_oi_trace};
use serde_json::Value;

const SECOND: Duration = Duration::from_secs(1);

/// `shop::inspect`'s Ledger, once, as JSON with the run-dependent keys left out.
fn ledger(pid: i32) -> Value {
    let pid = pid.to_string();
    let out = run_oi_trace(
        &["--pid", &pid, "--uprobe", "shop::inspect", "--count", "1"],
        60 * SECOND,
    );
    assert!(out.status.success(), "{out:#?}");
    strip(&json(&out.stdout))
}

fn strip(v: &Value) -> Value {
    match v {
        Value::Object(o) => o
            .iter()
            .filter(|(k, _)| k.as_str() != "pointer")
            .map(|(k, v)| (k.clone(), strip(v)))
            .collect(),
        Value::Array(a) => a.iter().map(strip).collect(),
        other => other.clone(),
    }
}

fn plain_ledger(binary: &Path) -> Value {
    let mut f = Fixture::start(binary, &["50"]);
    f.stdout.expect("tick", 20 * SECOND);
    ledger(f.pid)
}

/// The only child of `pid` (unshare's forked child, pid 1 of its namespace).
fn child_of(pid: i32) -> i32 {
    let deadline = std::time::Instant::now() + 10 * SECOND;
    loop {
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(c) = children.split_whitespace().next() {
            return c.parse().expect("pid");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "unshare forked no child"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_process_in_a_chroot_under_its_own_namespaces() {
    if !privileged() {
        return;
    }
    let binary = FixtureBuild::new("races")
        .variant("races_static", &["-static"])
        .build();
    let expected = plain_ledger(&binary);
    let root = TempDir::new("jail");
    std::fs::create_dir_all(root.file("bin")).expect("bin");
    oi_e2e::copy_executable(&binary, &root.file("bin/shop"));
    let mut jail = Fixture::start_with(
        Command::new("unshare")
            .args(["--mount", "--pid", "--fork", "chroot"])
            .arg(root.path())
            .args(["/bin/shop", "50"]),
    );
    jail.stdout.expect("tick", 20 * SECOND);
    let pid = child_of(jail.pid);
    assert_eq!(ledger(pid), expected);
    jail.stdout.expect("tick", 20 * SECOND);
}

#[test]
fn a_binary_deleted_and_replaced_after_it_started() {
    if !privileged() {
        return;
    }
    for binary in [
        FixtureBuild::new("races").build(),
        FixtureBuild::new("races")
            .variant("races_O2", &["-O2"])
            .build(),
    ] {
        deleted_and_replaced(&binary);
    }
}

fn deleted_and_replaced(binary: &Path) {
    let expected = plain_ledger(binary);
    let dir = TempDir::new("deployed");
    let installed = dir.file("shop");
    oi_e2e::copy_executable(binary, &installed);
    let mut f = Fixture::start(&installed, &["50"]);
    f.stdout.expect("tick", 20 * SECOND);
    // The next release goes in place: the running process keeps the old, deleted file.
    std::fs::remove_file(&installed).expect("delete");
    std::fs::write(&installed, b"#!/bin/sh\nexit 0\n").expect("a new file at the same path");
    assert_eq!(ledger(f.pid), expected);
    f.assert_running();
    f.stdout.expect("tick", 20 * SECOND);
}

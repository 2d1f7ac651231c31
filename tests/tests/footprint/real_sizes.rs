//! Real sizes against ground truth: `footprint_owned` builds a struct of standard containers
//! (and containers of containers) while its own operator new/delete counts the live bytes.
//! Under `--sizes real` (the default) the footprint equals the bytes the struct owns,
//! exactly; at -O0 and -O2, jit and remote byte-identical. `--sizes oi` keeps OI's numbers
//! (more here: hash words and unordered maps' entries counted twice; less: terminators,
//! control blocks), and the summary line and `--framed` say which sizing was used.

use crate::common::{build_fixture, check_exe_with, run_probe_stderr};
use oi_e2e::privileged;

/// The bytes the fixture says its struct owns (`CHECK owned N`).
pub(crate) fn owned(exe: &std::path::Path) -> u64 {
    let out = std::process::Command::new(exe)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the fixture");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("CHECK owned "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no CHECK owned line: {text}"))
}

/// The bytes each member of `footprint_owned`'s struct owns on the heap, as the fixture's
/// counting operator new saw them (`CHECK member NAME N`), in declaration order.
pub(crate) fn member_bytes(exe: &std::path::Path) -> Vec<(String, u64)> {
    let out = std::process::Command::new(exe)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run the fixture");
    let text = String::from_utf8_lossy(&out.stdout);
    let members: Vec<(String, u64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix("CHECK member "))
        .map(|l| {
            let (name, n) = l.split_once(' ').expect("CHECK member NAME N");
            (name.to_string(), n.trim().parse().expect("a byte count"))
        })
        .collect();
    assert_eq!(members.len(), 20, "{text}");
    members
}

/// Each of the 21 members of the struct in the JSON sample `text` is walked (no
/// `notWalked`) and charged beyond its static size exactly the heap bytes the fixture saw it
/// own (`none`, an empty unordered_set, owns nothing and has no line of its own), and the
/// root is its static size and those bytes.
pub(crate) fn each_member_exact(opt: &str, text: &str, owned: &[(String, u64)]) {
    let json: serde_json::Value = serde_json::from_str(text).expect("JSON");
    let root = &json[0];
    let members = root["members"].as_array().expect("members");
    assert_eq!(members.len(), 21, "{opt}: {} bytes of JSON", text.len());
    let mut heap = 0;
    for m in members {
        let name = m["name"].as_str().expect("name");
        let size = m["size"].as_u64().expect("size");
        let stat = m["staticSize"].as_u64().expect("staticSize");
        assert!(
            m.get("notWalked").is_none(),
            "{opt}: {name} not walked: {m}"
        );
        let want = owned.iter().find(|(n, _)| n == name).map_or(0, |(_, b)| *b);
        eprintln!("{opt}: {name}: owned {want} B, reported {} B", size - stat);
        assert_eq!(
            size - stat,
            want,
            "{opt}: {name}: size {size}, staticSize {stat}, exclusiveSize {}, length {}, \
             capacity {}",
            m["exclusiveSize"],
            m["length"],
            m["capacity"]
        );
        heap += want;
    }
    let root_size = root["size"].as_u64().expect("size");
    let root_static = root["staticSize"].as_u64().expect("staticSize");
    assert_eq!(root_size, root_static + heap, "{opt}: the root");
}

fn root_size(json: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(json).expect("JSON");
    v[0]["size"].as_u64().expect("size")
}

#[test]
fn footprint_equals_the_bytes_the_object_owns() {
    if !privileged() {
        return;
    }
    for opt in ["-O0", "-O2"] {
        let exe = build_fixture("footprint_owned", opt);
        // jit and remote, byte-identical, and equal to the fixture's own count.
        let failures = check_exe_with(&exe, 0, &["--sizes", "real"]);
        assert!(failures.is_empty(), "{opt}: {}", failures.join("\n"));
        let owned = owned(&exe);
        // The default is real sizes; the summary says so.
        let (json, _, stderr) = run_probe_stderr(&exe, 0, &["--sizes", "real", "--framed"]);
        let framed: serde_json::Value = serde_json::from_str(&json).expect("JSON");
        assert_eq!(framed["sizes"], "real", "{json}");
        assert!(stderr.contains("; real sizes"), "{stderr}");
        let (plain, _, _) = run_probe_stderr(&exe, 0, &["--mode", "jit", "--sizes", "real"]);
        assert_eq!(root_size(&plain), owned, "{opt}");
        each_member_exact(opt, &plain, &member_bytes(&exe));
        // OI's rules: another number, named as such.
        let (oi, _, stderr) = run_probe_stderr(&exe, 0, &["--sizes", "oi"]);
        assert!(stderr.contains("; oi sizes"), "{stderr}");
        let oi = root_size(&oi);
        eprintln!("{opt}: owned {owned} B, --sizes real {owned} B, --sizes oi {oi} B");
        assert_ne!(oi, owned, "{opt}: OI's rules differ on this fixture");
    }
}

//! Real sizes against ground truth: `footprint_owned` builds a struct of standard containers
//! (and containers of containers) while its own operator new/delete counts the live bytes.
//! Under `--sizes real` (the default) the footprint equals the bytes the struct owns,
//! exactly; at -O0 and -O2, jit and remote byte-identical. `--sizes oi` keeps OI's numbers
//! (more here: hash words and unordered maps' entries counted twice; less: terminators,
//! control blocks), and the summary line and `--framed` say which sizing was used.

use crate::common::{build_fixture, check_exe_with, run_probe_stderr};
use oi_e2e::privileged;

/// The bytes the fixture says its struct owns (`CHECK owned N`).
fn owned(exe: &std::path::Path) -> u64 {
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
        // OI's rules: another number, named as such.
        let (oi, _, stderr) = run_probe_stderr(&exe, 0, &["--sizes", "oi"]);
        assert!(stderr.contains("; oi sizes"), "{stderr}");
        let oi = root_size(&oi);
        eprintln!("{opt}: owned {owned} B, --sizes real {owned} B, --sizes oi {oi} B");
        assert_ne!(oi, owned, "{opt}: OI's rules differ on this fixture");
    }
}

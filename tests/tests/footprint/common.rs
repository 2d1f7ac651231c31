//! Helpers for the footprint journeys: build a `tests/fixtures/footprint_*.cpp` fixture, read
//! the expectations it prints about itself, run `oi-trace --mode remote` on it for one probe,
//! and compare the JSON sample with the fixture's numbers (exact equality). The fixtures
//! compute OI's rules, so runs pass `--sizes oi` unless a journey gives `--sizes` itself.
//!
//! Fixture protocol (see `tests/fixtures/footprint_basic.cpp`): lines
//! `PROBE <entry|return> <symbol> <args> <features|->`, each followed by `E <path> <key>
//! <value>` lines, then `READY`; the fixture then waits for a line on stdin and calls the
//! probed functions once each, in PROBE order.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Probe {
    pub is_return: bool,
    pub symbol: String,
    pub args: String,
    pub features: Vec<String>,
    pub expect: Vec<(String, String, u64)>,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Compiles a fixture into `target/fixtures/` (rebuilt when the source is newer).
pub fn build_fixture(name: &str, opt: &str) -> PathBuf {
    build_fixture_with(name, opt, "g++", &[], "")
}

/// [`build_fixture`] with another compiler and flags (`clang++`, `-stdlib=libc++`), into a
/// file named with `suffix`.
pub fn build_fixture_with(
    name: &str,
    opt: &str,
    compiler: &str,
    flags: &[&str],
    suffix: &str,
) -> PathBuf {
    // Tests run in parallel threads and share fixtures: build one at a time.
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let src = workspace()
        .join("tests/fixtures")
        .join(format!("{name}.cpp"));
    let dir = workspace().join("target/fixtures");
    std::fs::create_dir_all(&dir).expect("create target/fixtures");
    let exe = dir.join(format!("{name}{suffix}{}", opt.trim_start_matches('-')));
    let mtime = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    if mtime(&exe).is_none() || mtime(&exe) < mtime(&src) {
        let out = Command::new(compiler)
            .args(["-g", "-std=c++17", opt])
            .args(flags)
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output()
            .unwrap_or_else(|e| panic!("run {compiler}: {e}"));
        assert!(
            out.status.success(),
            "{compiler}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    exe
}

/// The oi-trace binary under test (`$OI_TRACE_BIN`, else `target/release/oi-trace`): the same
/// one the trigger journeys use. Missing is a failure, never a skip.
pub fn oi_trace() -> PathBuf {
    oi_e2e::oi_trace_bin()
}

/// A process killed by pid when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the fixture and reads its probes up to READY.
pub fn start_fixture(exe: &Path) -> (Killed, BufReader<std::process::ChildStdout>, Vec<Probe>) {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = Command::new(exe);
    // Without address randomisation two runs lay out the same objects at the same addresses,
    // so the outputs of two walker backends on two runs must be byte-identical.
    // SAFETY: personality(2) only changes this (single-threaded, about to exec) child.
    unsafe {
        cmd.pre_exec(|| {
            libc::personality(libc::ADDR_NO_RANDOMIZE as libc::c_ulong);
            Ok(())
        });
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start fixture");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut probes: Vec<Probe> = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).expect("read") > 0,
            "fixture exited before READY"
        );
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["READY"] => break,
            ["NATIVE_NS", _] => {}
            // A fixture's notes about itself (its own cross-checks, a library's own count),
            // read by the journeys that need them (tests/tests/footprint/beyond_stdlib.rs).
            [
                "CHECK" | "SPACE_USED" | "LAYOUT" | "TREE" | "TREE_OBJECTS",
                ..,
            ] => {}
            ["PROBE", kind, sym, args, feats] => probes.push(Probe {
                is_return: *kind == "return",
                symbol: sym.to_string(),
                args: args.to_string(),
                features: if *feats == "-" {
                    vec![]
                } else {
                    feats.split(',').map(String::from).collect()
                },
                expect: vec![],
            }),
            ["E", path, key, value] => probes.last_mut().expect("E before PROBE").expect.push((
                path.to_string(),
                key.to_string(),
                value.parse().expect("number"),
            )),
            _ => panic!("unexpected fixture line: {line}"),
        }
    }
    (Killed(child), out, probes)
}

/// Follows `0/name/[]#2` through a JSON sample.
pub fn find<'v>(json: &'v Value, path: &str) -> &'v Value {
    let mut parts = path.split('/');
    let root: usize = parts
        .next()
        .and_then(|p| p.parse().ok())
        .expect("root index");
    let mut cur = &json[root];
    for part in parts {
        let (name, nth) = match part.split_once('#') {
            Some((n, i)) => (n, i.parse::<usize>().expect("index")),
            None => (part, 0),
        };
        cur = cur["members"]
            .as_array()
            .expect("members")
            .iter()
            .filter(|m| m["name"] == name)
            .nth(nth)
            .unwrap_or_else(|| panic!("no {part} in {path}"));
    }
    cur
}

/// Runs `oi-trace --mode remote --count 1 --format json` for probe `index` of the fixture
/// and returns the mismatches between its sample and the fixture's expectations.
/// Checks one probe in both walker modes: the JIT's output must be byte-identical to the
/// remote walker's, and both must match the fixture's own numbers.
pub fn check_probe(name: &str, opt: &str, index: usize) -> Vec<String> {
    check_probe_with(name, opt, index, &[])
}

/// [`check_probe`] with `extra` oi-trace options (`--containers FILE`).
pub fn check_probe_with(name: &str, opt: &str, index: usize, extra: &[&str]) -> Vec<String> {
    check_exe_with(&build_fixture(name, opt), index, extra)
}

/// `check_probe` on a fixture binary built elsewhere (one that links libraries).
pub fn check_probe_exe(exe: &Path, index: usize) -> Vec<String> {
    check_exe_with(exe, index, &[])
}

/// [`check_probe_exe`] with `extra` oi-trace options.
pub fn check_exe_with(exe: &Path, index: usize, extra: &[&str]) -> Vec<String> {
    let with = |mode: &str| {
        let mut args = vec!["--format", "json", "--mode", mode];
        args.extend_from_slice(extra);
        run_probe_exe(exe, index, &args)
    };
    let (text, p) = with("remote");
    let (jit, _) = with("jit");
    if jit != text {
        return vec![format!(
            "{}: --mode jit differs from --mode remote:\n  jit:    {jit}  remote: {text}",
            p.symbol
        )];
    }
    let json: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON ({e}): {text}"));
    p.expect
        .iter()
        .filter_map(|(path, key, want)| {
            let got = find(&json, path)[key.as_str()].as_u64();
            (got != Some(*want)).then(|| {
                format!(
                    "{} {path} {key}: got {got:?}, fixture says {want}",
                    p.symbol
                )
            })
        })
        .collect()
}

/// Runs `oi-trace --mode remote --count 1` with `extra` options on probe `index` of the
/// fixture; returns everything it printed on stdout, and the probe.
pub fn run_probe(name: &str, opt: &str, index: usize, extra: &[&str]) -> (String, Probe) {
    run_probe_exe(&build_fixture(name, opt), index, extra)
}

/// `run_probe` on a fixture binary built elsewhere.
pub fn run_probe_exe(exe: &Path, index: usize, extra: &[&str]) -> (String, Probe) {
    let (text, p, _) = run_probe_stderr(exe, index, extra);
    (text, p)
}

/// `run_probe_exe`, also returning everything oi-trace printed on stderr.
pub fn run_probe_stderr(exe: &Path, index: usize, extra: &[&str]) -> (String, Probe, String) {
    let (mut fixture, _out, mut probes) = start_fixture(exe);
    let p = probes.swap_remove(index);
    let mut cmd = Command::new(oi_trace());
    cmd.arg("--pid")
        .arg(fixture.0.id().to_string())
        .arg(if p.is_return {
            "--uretprobe"
        } else {
            "--uprobe"
        })
        .arg(&p.symbol)
        .args(["--arg", &p.args, "--count", "1"])
        .args(extra);
    // The fixtures compute OI's rules (docs/semantics.md) unless a journey asks for others.
    if !extra.contains(&"--sizes") {
        cmd.args(["--sizes", "oi"]);
    }
    for f in &p.features {
        cmd.args(["--feature", f]);
    }
    let mut tracer = Killed(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start oi-trace"),
    );
    // Wait until the probes are armed, then let the fixture run.
    let mut err = BufReader::new(tracer.0.stderr.take().expect("stderr"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut before = String::new();
    loop {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).expect("stderr") > 0,
            "oi-trace exited: {before}{line}"
        );
        before.push_str(&line);
        if line.contains("attached") {
            break;
        }
        assert!(Instant::now() < deadline, "oi-trace did not attach");
    }
    let stderr_rest = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        rest
    });
    // Kept open until oi-trace is done: a fixture that waits for its end stays alive.
    let mut stdin = fixture.0.stdin.take().expect("stdin");
    stdin.write_all(b"go\n").expect("go");
    let mut text = String::new();
    tracer
        .0
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut text)
        .expect("sample");
    let status = tracer.0.wait().expect("wait oi-trace");
    drop(stdin);
    let stderr = before + &stderr_rest.join().unwrap_or_default();
    if !status.success() {
        panic!("oi-trace failed: {status}\n{stderr}");
    }
    (text, p, stderr)
}

/// Checks every probe of a fixture, one oi-trace run each.
pub fn check_fixture(name: &str, opt: &str) {
    check_exe(&build_fixture(name, opt));
}

/// `check_fixture` on a fixture binary built elsewhere.
pub fn check_exe(exe: &Path) {
    let count = start_fixture(exe).2.len();
    let failures: Vec<String> = (0..count).flat_map(|i| check_probe_exe(exe, i)).collect();
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

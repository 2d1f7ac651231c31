//! The `calls` figures of `cargo xtask bench`: what `oi-trace calls` costs a probed call, inside
//! and outside the entry, against a bare uprobe + uretprobe pair (bpftrace with empty actions),
//! against bpftrace running the equivalent script, and against uftrace on a program it launches;
//! and how long attaching 1,000 and 10,000 functions takes, with multi-uprobe links and (1,000
//! only) with one perf event per probe, against bpftrace attaching the same 1,000 functions.
//!
//! bpftrace and uftrace come from Debian's packages, installed here (never in CI). Every time
//! is measured by the target itself (`calls_bench` prints the wall time of each run), as the
//! median of several runs; per-call costs are the difference to the same run without probes.

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use oi_e2e::{Fixture, FixtureBuild, OiTrace, SIGINT, SIGUSR1};

use super::{Figure, median, value_of};

const WORK: &str = "_ZN5bench4workEl";
const REQUEST: &str = "_ZN5bench7requestEl";

pub fn run(root: &Path, quick: bool, figures: &mut Vec<Figure>) -> Result<()> {
    install_tools()?;
    per_call(quick, figures)?;
    attach_scale(root, quick, figures)?;
    Ok(())
}

/// bpftrace and uftrace from Debian, if missing.
fn install_tools() -> Result<()> {
    let missing: Vec<&str> = ["bpftrace", "uftrace"]
        .into_iter()
        .filter(|tool| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("bench: apt-get install {}", missing.join(" "));
    let ok = Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()?
        .success()
        || (Command::new("apt-get")
            .args(["update", "-q"])
            .status()?
            .success()
            && Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()?
                .success());
    if !ok {
        bail!("installing {} failed", missing.join(" "));
    }
    Ok(())
}

/// A running bpftrace, stopped with SIGINT when dropped.
pub(super) struct Bpftrace(Child);

impl Bpftrace {
    /// Starts `script` (which must print `armed` from BEGIN) and waits until it has.
    pub(super) fn start(script: &str, pid: Option<&str>) -> Result<Self> {
        let mut cmd = Command::new("bpftrace");
        if let Some(pid) = pid {
            cmd.args(["-p", pid]);
        }
        let mut child = cmd
            .args(["-e", script])
            .env("BPFTRACE_MAX_PROBES", "100000")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting bpftrace")?;
        let stdout = child.stdout.take().context("bpftrace stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.contains("armed") => break,
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill();
                    bail!("bpftrace never armed: {script}");
                }
            }
        }
        Ok(Self(child))
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.0.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Median wall time of `runs` runs of the fixture's work, per call, in ns.
fn per_call_ns(fixture: &mut Fixture, calls: u64, runs: usize) -> Result<f64> {
    fixture.stdout.take();
    let mut times = Vec::new();
    for _ in 0..runs {
        fixture.signal(SIGUSR1);
        let line = fixture.stdout.expect("ns ", Duration::from_secs(300));
        times.push(value_of(&line, "ns ").context("ns")? / calls as f64);
    }
    Ok(median(times))
}

/// Figure: cost per call inside and outside the entry, against bare probes, bpftrace and uftrace.
fn per_call(quick: bool, figures: &mut Vec<Figure>) -> Result<()> {
    let calls: u64 = if quick { 5_000 } else { 20_000 };
    let runs = if quick { 3 } else { 5 };
    let binary = FixtureBuild::new("calls_bench")
        .variant("calls_bench_o2", &["-O2"])
        .build();
    let b = binary.display().to_string();
    let bare_pair = format!(
        "uprobe:{b}:{WORK} {{}} uretprobe:{b}:{WORK} {{}} BEGIN {{ printf(\"armed\\n\"); }}"
    );
    // The equivalent of `oi-trace calls --entry bench::request` for this program: a per-thread
    // flag set by the entry, and the callee's time per call while it is set.
    let script = format!(
        "uprobe:{b}:{REQUEST} {{ @inside[tid] = 1; }} \
         uretprobe:{b}:{REQUEST} {{ delete(@inside[tid]); }} \
         uprobe:{b}:{WORK} /@inside[tid]/ {{ @start[tid] = nsecs; }} \
         uretprobe:{b}:{WORK} /@start[tid]/ {{ @ns = stats(nsecs - @start[tid]); delete(@start[tid]); }} \
         BEGIN {{ printf(\"armed\\n\"); }}"
    );
    let mut results = std::collections::BTreeMap::new();
    for mode in ["inside", "outside"] {
        let mut fixture = Fixture::start(&binary, &[mode, &calls.to_string()]);
        let pid = fixture.pid.to_string();
        results.insert((mode, "none"), per_call_ns(&mut fixture, calls, runs)?);
        {
            let _bare = Bpftrace::start(&bare_pair, Some(&pid))?;
            results.insert((mode, "bare"), per_call_ns(&mut fixture, calls, runs)?);
        }
        {
            let tracer = OiTrace::attached(&["calls", "--pid", &pid, "--entry", "bench::request"]);
            if mode == "inside" {
                let line = tracer.stderr.seen().last().cloned().unwrap_or_default();
                results.insert((mode, "calibrated hit"), calibrated_hit_ns(&line)?);
            }
            results.insert((mode, "oi-trace"), per_call_ns(&mut fixture, calls, runs)?);
            tracer.signal(SIGINT);
            let out = tracer.finish(Duration::from_secs(120));
            if !out.status.success() {
                bail!("oi-trace calls failed: {:?}", out.stderr);
            }
        }
        {
            let tracer = OiTrace::attached(&[
                "calls",
                "--pid",
                &pid,
                "--entry",
                "bench::request",
                "--mechanism",
                "inject",
            ]);
            results.insert((mode, "inject"), per_call_ns(&mut fixture, calls, runs)?);
            tracer.signal(SIGINT);
            let out = tracer.finish(Duration::from_secs(120));
            if !out.status.success() {
                bail!("oi-trace calls --mechanism inject failed: {:?}", out.stderr);
            }
        }
        if mode == "inside" {
            let _script = Bpftrace::start(&script, Some(&pid))?;
            results.insert((mode, "bpftrace"), per_call_ns(&mut fixture, calls, runs)?);
        }
    }
    let cost = |mode, what| results[&(mode, what)] - results[&(mode, "none")];
    for (mode, label) in [
        ("inside", "inside the entry"),
        ("outside", "outside the entry"),
    ] {
        figures.push(Figure {
            name: format!(
                "calls: cost per call of a probed function {label} (baseline: bare uprobe + uretprobe, bpftrace)"
            ),
            value: cost(mode, "oi-trace") / 1e3,
            baseline: cost(mode, "bare") / 1e3,
            unit: "µs",
            goal: "report".into(),
            pass: None,
        });
    }
    figures.push(Figure {
        name: "calls: cost per call inside the entry (baseline: bpftrace running the equivalent script)".into(),
        value: cost("inside", "oi-trace") / 1e3,
        baseline: cost("inside", "bpftrace") / 1e3,
        unit: "µs",
        goal: "report".into(),
        pass: None,
    });
    figures.push(Figure {
        name: "calls: probe cost per call as oi-trace estimates it (2 hits at the calibrated cost) (baseline: measured)".into(),
        value: 2.0 * results[&("inside", "calibrated hit")] / 1e3,
        baseline: cost("inside", "oi-trace") / 1e3,
        unit: "µs",
        goal: "report".into(),
        pass: None,
    });
    figures.push(Figure {
        name: "calls --mechanism inject: cost per call of a patched function outside the entry (baseline: uprobes)".into(),
        value: cost("outside", "inject"),
        baseline: cost("outside", "oi-trace"),
        unit: "ns",
        goal: "≤ 10 ns".into(),
        pass: Some(cost("outside", "inject") <= 10.0),
    });
    uftrace(
        calls,
        runs,
        &[
            ("calls", cost("inside", "oi-trace")),
            ("calls --mechanism inject", cost("inside", "inject")),
        ],
        figures,
    )
}

/// The cost of a hit that oi-trace measured at start, from its `attached` line (`… a probe hit
/// costs 4.4 µs here`), in ns.
fn calibrated_hit_ns(line: &str) -> Result<f64> {
    let text = line
        .split("a probe hit costs ")
        .nth(1)
        .with_context(|| format!("no calibrated cost in {line:?}"))?;
    let mut words = text.split_whitespace();
    let value: f64 = words.next().context("cost")?.parse()?;
    let scale = match words.next() {
        Some("ns") => 1.0,
        Some("µs") => 1e3,
        Some("ms") => 1e6,
        Some("s") => 1e9,
        other => bail!("unit {other:?} in {line:?}"),
    };
    Ok(value * scale)
}

/// uftrace launches a `-pg` build and records every call beneath `bench::request` (`-F`),
/// in process: the cost per call against that build run alone.
fn uftrace(
    calls: u64,
    runs: usize,
    ours_ns: &[(&str, f64)],
    figures: &mut Vec<Figure>,
) -> Result<()> {
    let binary = FixtureBuild::new("calls_bench")
        .variant("calls_bench_pg", &["-O2", "-pg"])
        .build();
    let dir = oi_e2e::TempDir::new("bench-uftrace");
    let once = |traced: bool| -> Result<f64> {
        let mut cmd = if traced {
            let mut c = Command::new("uftrace");
            c.args(["record", "-F", "bench::request", "-d"])
                .arg(dir.file("data"));
            c.arg(&binary);
            c
        } else {
            Command::new(&binary)
        };
        let out = cmd
            .args(["once", &calls.to_string()])
            .current_dir(dir.path())
            .stderr(Stdio::null())
            .output()?;
        if !out.status.success() {
            bail!("{cmd:?} failed");
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let ns = text
            .lines()
            .find_map(|l| value_of(l, "ns "))
            .context("the fixture printed no time")?;
        Ok(ns / calls as f64)
    };
    let alone = median((0..runs).map(|_| once(false)).collect::<Result<Vec<_>>>()?);
    let traced = median((0..runs).map(|_| once(true)).collect::<Result<Vec<_>>>()?);
    let uftrace_ns = traced - alone;
    for &(tool, ns) in ours_ns {
        let inject = tool.contains("inject");
        figures.push(Figure {
            name: format!(
                "{tool}: cost per call inside the entry (baseline: uftrace record -F on a -pg \
                 build it launches)"
            ),
            value: ns / 1e3,
            baseline: uftrace_ns / 1e3,
            unit: "µs",
            goal: if inject { "≤ 2× uftrace" } else { "report" }.into(),
            pass: inject.then_some(ns <= 2.0 * uftrace_ns),
        });
    }
    Ok(())
}

/// A program of `n` functions `gen::fNNNNN` and an entry that calls ten of them.
fn generated(root: &Path, n: usize) -> Result<PathBuf> {
    let dir = root.join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let name = format!("calls_generated_{n}");
    // No debug info (`-g0`): the program stands for a stripped build.
    let build = FixtureBuild::new(&name)
        .source_in(&dir)
        .output_in(&dir)
        .variant(&name, &["-g0"]);
    let src = dir.join(format!("{name}.cpp"));
    if src.exists() {
        return Ok(build.build());
    }
    let mut text = String::from("#include <cstdio>\n#include <unistd.h>\nnamespace gen {\n");
    for i in 0..n {
        text.push_str(&format!(
            "__attribute__((noinline)) long f{i:05}(long x) {{ asm volatile(\"\" ::: \"memory\"); return x * {m} + {i}; }}\n",
            m = i % 7 + 2
        ));
    }
    text.push_str("__attribute__((noinline)) long entry(long x) { long s = 0;");
    for i in 0..10.min(n) {
        text.push_str(&format!(" s += f{i:05}(x);"));
    }
    text.push_str(
        " return s; }\n}\nint main() { std::printf(\"ready %d\\n\", getpid()); std::fflush(stdout); \
         volatile long s = 0; for (long i = 0;; ++i) { s = s + gen::entry(i); usleep(1000); } }\n",
    );
    std::fs::write(&src, text)?;
    eprintln!("bench: compiling a program of {n} functions");
    Ok(build.build())
}

/// The attach time oi-trace reports (`… in N ms (…)`) and its wall time until armed, in ms.
fn oi_trace_attach(pid: &str, glob: &str, fallback: bool) -> Result<(f64, f64)> {
    let env: Vec<(&str, &Path)> = if fallback {
        vec![("OI_TRACE_DISABLE_FEATURES", Path::new("uprobe-multi"))]
    } else {
        Vec::new()
    };
    let started = Instant::now();
    let mut tracer = OiTrace::start_with_env(
        &[
            "calls",
            "--pid",
            pid,
            "--entry",
            "gen::entry",
            "--filter",
            glob,
        ],
        &env,
    );
    let line = tracer
        .stderr
        .expect("oi-trace: attached", Duration::from_secs(600));
    let wall = started.elapsed().as_secs_f64() * 1e3;
    tracer.signal(SIGINT);
    let out = tracer.finish(Duration::from_secs(600));
    if !out.status.success() {
        bail!("oi-trace calls failed: {:?}", out.stderr);
    }
    let attach = line
        .split(" in ")
        .last()
        .and_then(|s| s.split_whitespace().next())
        .and_then(|ms| ms.parse::<f64>().ok())
        .with_context(|| format!("no attach time in {line:?}"))?;
    Ok((attach, wall))
}

/// Figure: attaching 1,000 and 10,000 functions.
fn attach_scale(root: &Path, quick: bool, figures: &mut Vec<Figure>) -> Result<()> {
    let n = 10_000;
    let exe = generated(root, n)?;
    let fixture = Fixture::start(&exe, &[]);
    let pid = fixture.pid.to_string();
    let e = exe.display().to_string();
    let sizes: &[(usize, &str, &str)] = if quick {
        &[(1_000, "gen::f00*", "_ZN3gen6f00*")]
    } else {
        &[
            (1_000, "gen::f00*", "_ZN3gen6f00*"),
            (10_000, "gen::f*", "_ZN3gen6f*"),
        ]
    };
    for &(count, glob, mangled) in sizes {
        let (multi, multi_wall) = oi_trace_attach(&pid, glob, false)?;
        // One perf event per probe only for the smaller size: on 6.18 closing a uprobe perf
        // event waits for a grace period, so detaching 20,000 of them takes the better part
        // of an hour (about 0.3 s each on this busy VM).
        let perf = if count <= 1_000 {
            oi_trace_attach(&pid, glob, true)?.0
        } else {
            f64::NAN
        };
        figures.push(Figure {
            name: format!(
                "calls: attach {count} functions (entries and returns), multi-uprobe links (baseline: one perf event per probe)"
            ),
            value: multi,
            baseline: perf,
            unit: "ms",
            goal: "< 10 s".into(),
            pass: Some(multi < 10_000.0),
        });
        // bpftrace 0.17 (Debian 12) takes minutes for a thousand functions (one perf event
        // and one symbol lookup per probe): only the smaller size, only in a full run.
        if quick || count > 1_000 {
            continue;
        }
        let started = Instant::now();
        drop(Bpftrace::start(
            &format!(
                "uprobe:{e}:{mangled} {{}} uretprobe:{e}:{mangled} {{}} BEGIN {{ printf(\"armed\\n\"); }}"
            ),
            Some(&pid),
        )?);
        let bpftrace = started.elapsed().as_secs_f64() * 1e3;
        figures.push(Figure {
            name: format!(
                "calls: {count} functions, start to armed, oi-trace (baseline: bpftrace uprobe + uretprobe on the same, start to armed to exit)"
            ),
            value: multi_wall,
            baseline: bpftrace,
            unit: "ms",
            goal: "report".into(),
            pass: None,
        });
    }
    drop(fixture);
    Ok(())
}

//! `cargo xtask bench`: the figures of oi-trace's speed promise, each a ratio against a
//! baseline measured in the same run on the same machine. Prints a table and writes
//! `target/bench/results.json`. `--quick` shrinks the objects and repetitions.
//!
//! It also writes `target/bench/results.md`: the same table in Markdown, as docs/performance.md
//! shows it, headed by what the run was (the command, its start and end time, commit, load
//! average), so that docs/performance.md's "Latest full table" is the latest run pasted whole,
//! never figures copied by hand.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use oi_e2e::{Fixture, FixtureBuild, OiTrace, SIGINT, SIGUSR1, TempDir};
use serde_json::json;

/// One measured figure.
struct Figure {
    name: String,
    value: f64,
    baseline: f64,
    unit: &'static str,
    goal: String,
    pass: Option<bool>,
}

impl Figure {
    fn ratio(&self) -> f64 {
        if self.baseline > 0.0 {
            self.value / self.baseline
        } else {
            f64::NAN
        }
    }
}

mod agent;
mod allocs;
mod allocs_inject;
mod bare_uprobe;
mod calls;
mod pause;
mod protobuf;
mod record;
mod unwind;

const FIGURES: [&str; 13] = [
    "pause",
    "first-result",
    "start-up",
    "probe-cost",
    "dwarf",
    "throughput",
    "calls",
    "allocs",
    "agent",
    "oil",
    "unwind",
    "protobuf",
    "record",
];

pub fn run(root: &Path, quick: bool, only: &[String]) -> Result<()> {
    if let Some(bad) = only.iter().find(|f| !FIGURES.contains(&f.as_str())) {
        bail!("unknown figure `{bad}` (known: {})", FIGURES.join(", "));
    }
    let wanted = |f: &str| only.is_empty() || only.iter().any(|o| o == f);
    let _stats_off = BpfStatsOff::new();
    let started = RunStamp::now(root);
    // The fixtures' helpers run the same binary (`$OI_TRACE_BIN`, else this one).
    let bin = oi_e2e::oi_trace_bin();
    let mut figures = Vec::new();
    if wanted("pause") {
        pause::run(quick, &mut figures)?;
    }
    if wanted("first-result") {
        first_result(&bin, &mut figures)?;
    }
    if wanted("start-up") {
        start_up(&bin, &mut figures)?;
    }
    if wanted("probe-cost") {
        probe_cost(quick, &mut figures)?;
    }
    if wanted("dwarf") {
        dwarf_at_scale(root, &bin, quick, &mut figures)?;
    }
    if wanted("throughput") {
        throughput(quick, &mut figures)?;
    }
    if wanted("calls") {
        calls::run(root, quick, &mut figures)?;
    }
    if wanted("allocs") {
        allocs::run(quick, &mut figures)?;
    }
    if wanted("agent") {
        agent::run(quick, &mut figures)?;
    }
    if wanted("oil") {
        oil(quick, &mut figures)?;
    }
    if wanted("unwind") {
        unwind::run(&mut figures)?;
    }
    if wanted("protobuf") {
        protobuf::run(quick, &mut figures)?;
    }
    if wanted("record") {
        record::run(quick, &mut figures)?;
    }
    report(root, &figures)?;
    let mut command = match std::env::var("OI_BENCH_PAUSE") {
        Ok(k) if wanted("pause") => format!("OI_BENCH_PAUSE={k} cargo xtask bench"),
        _ => String::from("cargo xtask bench"),
    };
    if quick {
        command.push_str(" --quick");
    }
    for o in only {
        command.push_str(" --only ");
        command.push_str(o);
    }
    write_markdown(root, &command, &started, &RunStamp::now(root), &figures)
}

/// `kernel.bpf_stats_enabled` off for the run, as it was again after: while it is on, every
/// eBPF program run also reads the clock twice, which the bench would charge to oi-trace's
/// programs and not to the bare probes they are compared with.
struct BpfStatsOff(bool);

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStatsOff {
    fn new() -> Self {
        let on = std::fs::read_to_string(BPF_STATS).is_ok_and(|s| s.trim() != "0");
        if on {
            match std::fs::write(BPF_STATS, "0") {
                Ok(()) => eprintln!("bench: kernel.bpf_stats_enabled off for the run"),
                Err(e) => eprintln!(
                    "bench: kernel.bpf_stats_enabled is on and stays on ({e}): eBPF figures \
                     include its clock reads"
                ),
            }
        }
        Self(on)
    }
}

impl Drop for BpfStatsOff {
    fn drop(&mut self) {
        if self.0 {
            let _ = std::fs::write(BPF_STATS, "1");
        }
    }
}

/// When a run started or ended, on what, under what load.
struct RunStamp {
    utc: String,
    commit: String,
    load: String,
}

impl RunStamp {
    fn now(root: &Path) -> Self {
        let out = |cmd: &mut Command| {
            cmd.output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_else(|| "unknown".into())
        };
        let utc = out(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M"]));
        let commit = out(Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .current_dir(root));
        let load = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_string))
            .unwrap_or_else(|| "unknown".into());
        RunStamp { utc, commit, load }
    }
}

/// A number as docs/performance.md prints it: three significant digits or whole units.
fn readable(v: f64) -> String {
    if !v.is_finite() {
        "—".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// `target/bench/results.md`: the run's table, ready for docs/performance.md
/// ("Latest full table").
fn write_markdown(
    root: &Path,
    command: &str,
    start: &RunStamp,
    end: &RunStamp,
    figures: &[Figure],
) -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut md = format!(
        "`{command}`, {} to {} UTC, commit {}, load average {} at the start and {} at the \
         end ({cores} cores).\n\n| figure | value | baseline | ratio | goal | met |\n\
         |---|---|---|---|---|---|\n",
        start.utc,
        end.utc.rsplit(' ').next().unwrap_or(&end.utc),
        start.commit,
        start.load,
        end.load,
    );
    for f in figures {
        let baseline = if f.baseline > 0.0 {
            format!("{} {}", readable(f.baseline), f.unit)
        } else {
            "—".into()
        };
        let met = match f.pass {
            Some(true) => "yes",
            Some(false) => "no",
            None => "—",
        };
        md.push_str(&format!(
            "| {} | {} {} | {baseline} | {} | {} | {met} |\n",
            f.name,
            readable(f.value),
            f.unit,
            readable(f.ratio()),
            f.goal,
        ));
    }
    let path = root.join("target/bench/results.md");
    std::fs::write(&path, md)?;
    println!("written to {}", path.display());
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn value_of(line: &str, key: &str) -> Option<f64> {
    line.strip_prefix(key)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The number after `key` anywhere in `line` (`… walk in the target 1.234 ms …`).
fn value_after(line: &str, key: &str) -> Option<f64> {
    let (_, rest) = line.split_once(key)?;
    value_of(rest.trim_start(), "")
}

/// `oi-trace --count 1` on the ledger of a running demo_shop, with its own cache directory.
fn demo_shop_sample(bin: &Path, pid: &str, cache: &TempDir) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(["--pid", pid, "--uprobe", "shop::Ledger::inspect"])
        .args(["--arg", "this", "--count", "1"])
        .env("XDG_CACHE_HOME", cache.path());
    cmd
}

/// Figure 2: Time to the first result, cold (empty cache) and warm, against gdb printing the
/// object. The result is there when its first byte reaches stdout; the time to exit is
/// reported apart, since most of what follows is the kernel's unregistering of the uprobe
/// (an RCU grace period, 100–150 ms on this VM) that every uprobe tool pays at exit.
fn first_result(bin: &Path, figures: &mut Vec<Figure>) -> Result<()> {
    let target = FixtureBuild::new("demo_shop").build();
    let fixture = Fixture::start(&target, &[]);
    let pid = fixture.pid.to_string();
    let cache = TempDir::new("bench-cache");
    let run = || timed_output(&mut demo_shop_sample(bin, &pid, &cache));
    let cold = run()?;
    let warm: Vec<(f64, f64)> = (0..3).map(|_| run()).collect::<Result<_>>()?;
    let warm = (
        median(warm.iter().map(|w| w.0).collect()),
        median(warm.iter().map(|w| w.1).collect()),
    );
    let gdb = timed_output(Command::new("gdb").args(["-p", &pid, "-batch", "-ex", "print ledger"]))
        .map_or(f64::NAN, |(output, _)| output);
    for (name, (value, exit), goal, limit) in [
        ("cold", cold, "< 200 ms and < gdb", 0.2),
        ("warm", warm, "< 100 ms and < gdb", 0.1),
    ] {
        figures.push(Figure {
            name: format!("time to first result, {name} (baseline: gdb -p -batch print)"),
            value: value * 1e3,
            baseline: gdb * 1e3,
            unit: "ms",
            goal: goal.into(),
            pass: Some(value < limit && (gdb.is_nan() || value < gdb)),
        });
        figures.push(Figure {
            name: format!("time to exit after the first result, {name} (baseline: the result)"),
            value: exit * 1e3,
            baseline: value * 1e3,
            unit: "ms",
            goal: "report".into(),
            pass: None,
        });
    }
    drop(fixture);
    Ok(())
}

/// One command, which must succeed: the wall time until its first byte on stdout, and until
/// it exited.
fn timed_output(cmd: &mut Command) -> Result<(f64, f64)> {
    use std::io::Read as _;
    let started = Instant::now();
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let mut stdout = child.stdout.take().context("stdout")?;
    let mut first = [0u8; 1];
    let got = stdout.read(&mut first)?;
    let output = started.elapsed().as_secs_f64();
    std::io::copy(&mut stdout, &mut std::io::sink())?;
    let out = child.wait_with_output()?;
    let exit = started.elapsed().as_secs_f64();
    if !out.status.success() || got == 0 {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok((output, exit))
}

/// The verifier's limit of processed instructions per program (`BPF_COMPLEXITY_LIMIT_INSNS`).
const VERIFIER_LIMIT: f64 = 1_000_000.0;

/// Figure 2b: the profilers' start-up. `allocs` and `calls` on the running demo, each three
/// times: the median of their own "armed N ms after start" (start of oi-trace to every probe
/// attached and armed), and the instructions the kernel's verifier processed to accept each
/// program, against its limit (goal: at most half of it, so the next kernel's verifier has
/// room).
fn start_up(bin: &Path, figures: &mut Vec<Figure>) -> Result<()> {
    let target = FixtureBuild::new("demo_shop").build();
    let fixture = Fixture::start(&target, &[]);
    let pid = fixture.pid.to_string();
    let tools: [(&str, &[&str]); 2] = [
        ("allocs", &["allocs", "--duration", "0.2"]),
        (
            "calls",
            &[
                "calls",
                "--entry",
                "shop::Ledger::inspect",
                "--duration",
                "0.2",
            ],
        ),
    ];
    for (tool, args) in tools {
        let mut armed = Vec::new();
        let mut verified = f64::NAN;
        for _ in 0..3 {
            let out = Command::new(bin)
                .args(args)
                .args(["--pid", &pid])
                .env("OI_TRACE_VERIFIER_STATS", "1")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() {
                bail!("oi-trace {tool} failed: {stderr}");
            }
            for line in stderr.lines() {
                if let Some(ms) = value_after(line, "armed") {
                    armed.push(ms);
                }
                if let Some(n) = line
                    .split_once("eBPF program in ")
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    .and_then(|n| n.replace(',', "").parse::<f64>().ok())
                {
                    verified = n;
                }
            }
        }
        if armed.len() != 3 {
            bail!("oi-trace {tool} did not say when it was armed");
        }
        let armed = median(armed);
        figures.push(Figure {
            name: format!("{tool}: start to armed"),
            value: armed,
            baseline: f64::NAN,
            unit: "ms",
            goal: "< 500 ms".into(),
            pass: Some(armed < 500.0),
        });
        figures.push(Figure {
            name: format!("{tool}: instructions the verifier processed (baseline: its limit)"),
            value: verified,
            baseline: VERIFIER_LIMIT,
            unit: "insns",
            goal: "≤ 0.5× the limit".into(),
            pass: Some(verified <= VERIFIER_LIMIT / 2.0),
        });
    }
    drop(fixture);
    Ok(())
}

/// Figure 3: Cost per call of the probed function: no probe, a counting probe, a sampling probe.
fn probe_cost(quick: bool, figures: &mut Vec<Figure>) -> Result<()> {
    let calls: u64 = if quick { 200_000 } else { 1_000_000 };
    let target = FixtureBuild::new("bench_target").build();
    let mut fixture = Fixture::start(&target, &["hot", &calls.to_string()]);
    let pid = fixture.pid.to_string();
    let mut per_call = |args: Option<&[&str]>| -> Result<f64> {
        let tracer = args.map(|a| {
            let mut all = vec!["--pid", &pid, "--uprobe", "bench::hot"];
            all.extend_from_slice(a);
            OiTrace::attached(&all)
        });
        let mut runs = Vec::new();
        for _ in 0..3 {
            fixture.signal(SIGUSR1);
            let line = fixture.stdout.expect("hot_ns", Duration::from_secs(120));
            runs.push(value_of(&line, "hot_ns ").context("hot_ns")? / calls as f64);
        }
        if let Some(t) = tracer {
            t.signal(SIGINT);
            t.finish(Duration::from_secs(60));
        }
        Ok(median(runs))
    };
    let none = per_call(None)?;
    let counting = per_call(Some(&["--count-only"]))?;
    let sampling = per_call(Some(&["--every", "1000"]))?;
    figures.push(Figure {
        name: "probe cost per call, counting probe (baseline: no probe)".into(),
        value: counting,
        baseline: none,
        unit: "ns",
        goal: "report".into(),
        pass: None,
    });
    figures.push(Figure {
        name: "probe cost per call, --every 1000 (baseline: counting probe)".into(),
        value: sampling,
        baseline: counting,
        unit: "ns",
        goal: "≤ 1.1× counting".into(),
        pass: Some(sampling <= 1.1 * counting),
    });
    Ok(())
}

/// Writes a C++ program with `types` struct types and four functions per type.
fn generate_program(path: &Path, types: usize) -> Result<()> {
    let mut src = String::from(
        "#include <map>\n#include <string>\n#include <vector>\n#include <unistd.h>\n#include <cstdio>\nnamespace gen {\nstruct T0 { int a; };\n",
    );
    for i in 1..types {
        src.push_str(&format!(
            "struct T{i} {{ int a{i}; double b; std::string name; std::vector<T{p}> items; std::map<int, T{q}*> index; }};\n",
            p = i / 2,
            q = i / 3
        ));
        for k in 0..4 {
            src.push_str(&format!(
                "__attribute__((noinline)) long f{i}_{k}(const T{i}& x) {{ asm volatile(\"\" ::: \"memory\"); return x.a{i} + {k} + (long)x.items.size(); }}\n"
            ));
        }
    }
    let last = types - 1;
    src.push_str(&format!(
        "}}\nint main() {{ static gen::T{last} t; std::printf(\"ready %d\\n\", getpid()); std::fflush(stdout); long s = 0; for (;;) {{ s += gen::f{last}_0(t); usleep(1000); }} }}\n"
    ));
    std::fs::write(path, src)?;
    Ok(())
}

/// Runs `cmd` to completion; returns wall seconds and peak RSS in MiB: the child's own
/// VmHWM, polled while it runs (wait4's ru_maxrss would also count what the forked child
/// inherited from us).
fn timed_with_rss(cmd: &mut Command) -> Result<(f64, f64)> {
    let started = Instant::now();
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0.0f64;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if let Ok(text) = std::fs::read_to_string(&status_file)
            && let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        {
            peak_kib = peak_kib.max(kib);
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let wall = started.elapsed().as_secs_f64();
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok((wall, peak_kib / 1024.0))
}

/// Figure 4: Resolving a probe and building its type graph in a program with thousands of types.
fn dwarf_at_scale(root: &Path, bin: &Path, quick: bool, figures: &mut Vec<Figure>) -> Result<()> {
    let types = if quick { 1_000 } else { 5_000 };
    let dir = root.join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let name = format!("generated_{types}");
    let src = dir.join(format!("{name}.cpp"));
    if !src.exists() {
        generate_program(&src, types)?;
        eprintln!(
            "bench: compiling a program with {types} types and {} functions",
            4 * (types - 1)
        );
    }
    let exe = FixtureBuild::new(&name)
        .source_in(&dir)
        .output_in(&dir)
        .variant(&name, &["-O0"])
        .build();
    let fixture = Fixture::start(&exe, &[]);
    let pid = fixture.pid.to_string();
    let symbol = format!("gen::f{}_0", types - 1);
    let cache = TempDir::new("bench-dwarf");
    let (wall, rss) = timed_with_rss(
        Command::new(bin)
            .args(["--pid", &pid, "--uprobe", &symbol, "--count", "1"])
            .env("XDG_CACHE_HOME", cache.path()),
    )?;
    // Baseline: the same run on a small program (the fixed cost of oi-trace itself).
    let small = FixtureBuild::new("demo_shop").build();
    let small_fixture = Fixture::start(&small, &[]);
    let small_pid = small_fixture.pid.to_string();
    let (base_wall, base_rss) = timed_with_rss(&mut demo_shop_sample(bin, &small_pid, &cache))?;
    let functions = 4 * (types - 1);
    figures.push(Figure {
        name: format!(
            "first sample, {types} types / {functions} functions: wall (baseline: small program)"
        ),
        value: wall * 1e3,
        baseline: base_wall * 1e3,
        unit: "ms",
        goal: "< 1 s".into(),
        pass: Some(wall < 1.0),
    });
    figures.push(Figure {
        name: format!("first sample, {types} types / {functions} functions: peak RSS (baseline: small program)"),
        value: rss,
        baseline: base_rss,
        unit: "MiB",
        goal: "< 300 MiB".into(),
        pass: Some(rss < 300.0),
    });
    Ok(())
}

/// Figure 5: Samples per second with --every 1 on 4 threads calling 10,000 times a second in all.
fn throughput(quick: bool, figures: &mut Vec<Figure>) -> Result<()> {
    let target = FixtureBuild::new("bench_target").build();
    let fixture = Fixture::start(&target, &["busy", "4", "2500"]);
    let pid = fixture.pid.to_string();
    let dir = TempDir::new("bench-throughput");
    let summary = dir.file("summary.json");
    let seconds = if quick { 2 } else { 5 };
    let tracer = OiTrace::attached(&[
        "--pid",
        &pid,
        "--uprobe",
        "bench::hot",
        "--every",
        "1",
        "--arg",
        "arg0",
        "--duration",
        &seconds.to_string(),
        "--summary",
        summary.to_str().unwrap_or_default(),
    ]);
    let out = tracer.finish(Duration::from_secs(120));
    if !out.status.success() {
        bail!("throughput run failed: {:?}", out.stderr);
    }
    let sum: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&summary)?)?;
    let per_s = |k: &str| sum[0][k].as_f64().unwrap_or(f64::NAN) / seconds as f64;
    figures.push(Figure {
        name: format!(
            "samples per second, --every 1, 4 threads (baseline: hits per second; dropped {:.0}/s)",
            per_s("dropped")
        ),
        value: per_s("sampled"),
        baseline: per_s("hits"),
        unit: "/s",
        goal: "report".into(),
        pass: None,
    });
    Ok(())
}

/// Figure 6: OIL, a program measuring its own objects (`oil.h` + `liboil.so`). The program
/// times the first `oil::size` of each type (debug information, plan, compilation and one
/// walk), then `oil::size` in the steady state against a hand-written C++ walk of the same
/// object computing the same number (checked equal), interleaved, in the same run. Small
/// objects are timed in batches of calls (~20 µs a sample), so the clock's own cost does not
/// count.
fn oil(quick: bool, figures: &mut Vec<Figure>) -> Result<()> {
    let exe = FixtureBuild::new("oil_bench")
        .variant("oil_bench", &["-O2"])
        .with_oil()
        .build();
    let scale = if quick { 10 } else { 1 };
    // (kind, elements, label, repetitions)
    let objects = [
        ("vecstr", 1_000_000 / scale, "vector<string>", 15),
        ("mapstr", 100_000 / scale, "map<int,string>", 21),
        (
            "umap",
            100_000 / scale,
            "unordered_map<string,vector<int>>",
            21,
        ),
        ("struct", 0, "struct of 20 members, 3 levels", 2_001),
    ];
    for (kind, n, label, reps) in objects {
        let mut fixture = Fixture::start(&exe, &[kind, &n.to_string(), &reps.to_string()]);
        let mut get = |key: &str| -> Result<f64> {
            let line = fixture.stdout.expect(key, Duration::from_secs(300));
            value_of(&line, &format!("{key} ")).with_context(|| format!("{key} in {line:?}"))
        };
        let first = get("first_ns")?;
        let steady = get("oil_ns")?;
        let native = get("native_ns")?;
        let of_n = if n > 0 {
            format!(" of {n}")
        } else {
            String::new()
        };
        figures.push(Figure {
            name: format!("OIL first oil::size (DWARF, plan, compile, walk), {label}{of_n}"),
            value: first / 1e3,
            baseline: steady / 1e3,
            unit: "µs",
            goal: "report (vs steady state)".into(),
            pass: None,
        });
        // Small objects take nanoseconds by hand.
        let (scale, unit) = if native < 1e3 {
            (1.0, "ns")
        } else {
            (1e3, "µs")
        };
        figures.push(Figure {
            name: format!("OIL steady-state oil::size, {label}{of_n}"),
            value: steady / scale,
            baseline: native / scale,
            unit,
            goal: "≤ 1.2× hand-written walk".into(),
            pass: Some(steady <= 1.2 * native),
        });
        drop(fixture);
    }
    Ok(())
}

fn report(root: &Path, figures: &[Figure]) -> Result<()> {
    println!(
        "\n{:<92} {:>12} {:>12} {:>8}  {:<24} pass",
        "figure", "value", "baseline", "ratio", "goal"
    );
    for f in figures {
        println!(
            "{:<92} {:>9.1} {:<2} {:>9.1} {:<2} {:>8.3}  {:<24} {}",
            f.name,
            f.value,
            f.unit,
            f.baseline,
            f.unit,
            f.ratio(),
            f.goal,
            match f.pass {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            }
        );
    }
    let rows: Vec<_> = figures
        .iter()
        .map(|f| {
            json!({"name": f.name, "value": f.value, "unit": f.unit, "baseline": f.baseline,
                   "ratio": f.ratio(), "goal": f.goal, "pass": f.pass})
        })
        .collect();
    let dir = root.join("target/bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&rows)?,
    )?;
    println!("\nwritten to {}", dir.join("results.json").display());
    Ok(())
}

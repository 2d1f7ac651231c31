//! The `agent` figures of `cargo xtask bench`: what `oi-trace agent` itself costs, with
//! its defaults (allocations sampled by bytes, one per 512 KiB on average) and 1 s
//! intervals to a directory, on 1 and on 4 processes that allocate without pause
//! (`allocs_bench`, one thread each, malloc(64) + free pairs): the agent's CPU time (its own
//! process, every thread: reading the kernel's tables, symbolizing, encoding, writing) per
//! target and per million allocations, and its peak resident memory.
//!
//! What the probes cost is paid in the targets' own threads (a trap per allocator call) and
//! is the `allocs` figures' business, not this one's; the allocation rate each target reached
//! under the agent is in the figure's name, so that the CPU per target reads against it.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use oi_e2e::{Fixture, FixtureBuild, OiTrace, SIGINT, SIGUSR1, TempDir};

use super::Figure;

/// Pairs per round of a target: about a second under the probes on this VM, so that a round
/// ends soon after the window does.
const PAIRS: u64 = 200_000;

pub fn run(quick: bool, figures: &mut Vec<Figure>) -> Result<()> {
    let window = Duration::from_secs(if quick { 4 } else { 15 });
    let binary = FixtureBuild::new("allocs_bench")
        .variant("allocs_bench_o2", &["-O2"])
        .build();
    for targets in [1usize, 4] {
        let mut fixtures: Vec<Fixture> = (0..targets)
            .map(|_| Fixture::start(&binary, &["1", &PAIRS.to_string()]))
            .collect();
        let dir = TempDir::new("bench-agent");
        let pids: Vec<String> = fixtures.iter().map(|f| f.pid.to_string()).collect();
        let mut args = vec!["agent", "--interval", "1s"];
        for pid in &pids {
            args.extend(["--pid", pid]);
        }
        args.extend(["--pprof-dir", dir.path().to_str().context("temp dir")?]);
        let mut agent = OiTrace::start(&args);
        for _ in 0..targets {
            agent
                .stderr
                .expect("oi-trace: attached", Duration::from_secs(120));
        }
        let cpu_before = cpu_seconds(agent.pid())?;
        let started = Instant::now();
        let mut pairs = 0u64;
        while started.elapsed() < window {
            for f in &fixtures {
                f.signal(SIGUSR1);
            }
            for f in &mut fixtures {
                f.stdout.expect("ns ", Duration::from_secs(300));
                pairs += PAIRS;
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds(agent.pid())? - cpu_before;
        let peak_kib =
            crate::soak::status_number(agent.pid(), "VmHWM:").context("the agent's VmHWM")?;
        agent.signal(SIGINT);
        let done = agent.finish(Duration::from_secs(60));
        if !done.status.success() {
            bail!("oi-trace agent failed: {:#?}", done.stderr);
        }
        let rate = pairs as f64 / elapsed / targets as f64;
        let name = |what: &str| {
            format!(
                "agent: {what}, {targets} target(s) at {:.0} k allocations/s each",
                rate / 1e3
            )
        };
        figures.push(Figure {
            name: name("CPU per target (% of one core)"),
            value: 100.0 * cpu / elapsed / targets as f64,
            baseline: f64::NAN,
            unit: "%",
            goal: "reported".into(),
            pass: None,
        });
        figures.push(Figure {
            name: name("CPU per million allocations"),
            value: 1e3 * cpu / (pairs as f64 / 1e6),
            baseline: f64::NAN,
            unit: "ms",
            goal: "reported".into(),
            pass: None,
        });
        figures.push(Figure {
            name: name("peak resident memory"),
            value: peak_kib as f64 / 1024.0,
            baseline: f64::NAN,
            unit: "MiB",
            goal: "reported".into(),
            pass: None,
        });
    }
    Ok(())
}

/// User and system CPU time of process `pid` and all its threads so far, in seconds
/// (`/proc/PID/stat`'s utime and stime, in clock ticks).
fn cpu_seconds(pid: i32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command, which is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(") ")
        .map(|(_, r)| r)
        .context("/proc/PID/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are the line's fields 14 and 15: the 12th and 13th after the command.
    let ticks = |i: usize| -> Result<f64> { Ok(fields.get(i).context("stat field")?.parse()?) };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok((ticks(11)? + ticks(12)?) / hz)
}

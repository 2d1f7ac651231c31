//! The `allocs --mechanism inject` figures of `cargo xtask bench`: what counting inside the
//! target adds to a malloc + free pair, beside today's uprobe path and bpftrace's accounting
//! script (their added costs measured by `bench::allocs` in the same run), beside heaptrack
//! attached with `heaptrack -p` (Debian's package, `cargo xtask setup`), and a 4-thread run at
//! full speed with what it could not count (`no_slot`, `table_full`). The rows run with the
//! default sampling (a stack every 512 KiB on average), and one with `--every 1` (every
//! allocation's stack copied and unwound) beside it.
//!
//! A wrapped pair costs tens of ns, not µs: these runs make millions of pairs, in a fixture of
//! their own. The 1-thread cost comes from interleaved rounds (no probes, then oi-trace
//! attached for its turn and detached), each the difference to the same round's run without
//! probes, the figure the median over the rounds. heaptrack cannot be detached (its library
//! stays in the process), so it gets a fixture of its own, measured without it first, then
//! attached until the fixture is killed. Every time is the fixture's own wall time of a run.

use std::{
    io::{BufRead as _, BufReader},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use oi_e2e::{Fixture, OiTrace, SIGINT, TempDir};

use super::{Figure, allocs::per_pair_ns, median};

/// The added costs per pair (ns) that `bench::allocs` measured in this run, for the rows
/// beside them.
pub struct Beside {
    pub uprobes_ns: f64,
    pub bpftrace_ns: f64,
}

pub fn run(
    binary: &std::path::Path,
    quick: bool,
    beside: Beside,
    figures: &mut Vec<Figure>,
) -> Result<()> {
    let pairs: u64 = if quick { 200_000 } else { 2_000_000 };
    let runs = if quick { 3 } else { 7 };
    let inject = one_thread(binary, pairs, runs, &[])?;
    figures.push(Figure {
        name: format!(
            "allocs --mechanism inject: cost per malloc+free pair attached, median of {runs} \
             interleaved rounds (baseline: the uprobe path, this run)"
        ),
        value: inject,
        baseline: beside.uprobes_ns,
        unit: "ns",
        goal: "≤ 60 ns".into(),
        pass: Some(inject <= 60.0),
    });
    // The sampling's slow path on every allocation: its stack copied and unwound.
    let every = one_thread(binary, pairs, runs, &["--every", "1"])?;
    figures.push(Figure {
        name: format!(
            "allocs --mechanism inject --every 1 (every allocation's stack taken): cost per \
             malloc+free pair attached, median of {runs} interleaved rounds (baseline: the \
             default sampling, this run)"
        ),
        value: every,
        baseline: inject,
        unit: "ns",
        goal: "report".into(),
        pass: None,
    });
    figures.push(Figure {
        name: "allocs --mechanism inject: cost per malloc+free pair attached (baseline: \
               bpftrace per-call accounting script, this run)"
            .into(),
        value: inject,
        baseline: beside.bpftrace_ns,
        unit: "ns",
        goal: "< 1×".into(),
        pass: Some(inject < beside.bpftrace_ns),
    });
    match heaptrack(binary, pairs, runs) {
        Ok(heaptrack_ns) => figures.push(Figure {
            name: "allocs --mechanism inject: cost per malloc+free pair attached (baseline: \
                   heaptrack -p attached to the same loop)"
                .into(),
            value: inject,
            baseline: heaptrack_ns,
            unit: "ns",
            goal: "< 1×".into(),
            pass: Some(inject < heaptrack_ns),
        }),
        // heaptrack's attach goes through gdb and may fail on a machine without ptrace
        // rights for it: the other rows stand, and the table says why this one is missing.
        Err(e) => eprintln!("bench: heaptrack -p: {e:#}"),
    }
    threads(binary, pairs, runs, figures)
}

/// The median added ns per pair of `allocs --mechanism inject` with `extra` options, one
/// thread.
fn one_thread(binary: &std::path::Path, pairs: u64, runs: usize, extra: &[&str]) -> Result<f64> {
    let mut fixture = Fixture::start(binary, &["1", &pairs.to_string()]);
    let pid = fixture.pid.to_string();
    let mut added = Vec::new();
    for _ in 0..runs {
        let free = per_pair_ns(&mut fixture, pairs, 1)?;
        let tracer = attach(&pid, extra);
        let attached = per_pair_ns(&mut fixture, pairs, 1)?;
        finish(tracer)?;
        added.push(attached - free);
    }
    Ok(median(added))
}

/// Figure: allocations per second with 4 threads allocating at full speed, with the inject
/// mechanism, and what it could not count.
fn threads(
    binary: &std::path::Path,
    pairs: u64,
    runs: usize,
    figures: &mut Vec<Figure>,
) -> Result<()> {
    let mut fixture = Fixture::start(binary, &["4", &pairs.to_string()]);
    let pid = fixture.pid.to_string();
    let none = per_pair_ns(&mut fixture, pairs, runs)?;
    let tracer = attach(&pid, &[]);
    let attached = per_pair_ns(&mut fixture, pairs, runs)?;
    let report = finish(tracer)?;
    let allocs = report["totals"]["allocs"].as_u64().unwrap_or(0);
    let table_full = report["totals"]["dropped"].as_u64().unwrap_or(u64::MAX);
    let no_slot = report["counters"]["no_slot"].as_u64().unwrap_or(u64::MAX);
    let made = 4 * pairs * runs as u64;
    if allocs.saturating_add(no_slot) < made {
        bail!("inject counted {allocs} allocations ({no_slot} without a slot) of {made}");
    }
    let drops = no_slot.saturating_add(table_full);
    // 4 threads × pairs allocations per run; per_pair_ns is the run's wall time / pairs.
    let per_second = |ns_per_pair: f64| 4.0 * 1e9 / ns_per_pair;
    figures.push(Figure {
        name: format!(
            "allocs --mechanism inject: allocations per second, 4 threads at full speed, \
             attached ({allocs} counted; not counted: {no_slot} no_slot, {table_full} \
             table_full) (baseline: no probes)"
        ),
        value: per_second(attached) / 1e6,
        baseline: per_second(none) / 1e6,
        unit: "M/s",
        goal: "drops ≤ 1 %".into(),
        pass: Some(drops as f64 <= 0.01 * made as f64),
    });
    Ok(())
}

/// `oi-trace allocs --mechanism inject` attached to `pid`, with `extra` options.
fn attach(pid: &str, extra: &[&str]) -> OiTrace {
    let mut args = vec![
        "allocs",
        "--pid",
        pid,
        "--mechanism",
        "inject",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    OiTrace::attached(&args)
}

/// Detaches and reads the report, which must say that the run was counted in the target.
fn finish(tracer: OiTrace) -> Result<serde_json::Value> {
    tracer.signal(SIGINT);
    let out = tracer.finish(Duration::from_secs(120));
    if !out.status.success() {
        bail!(
            "oi-trace allocs --mechanism inject failed: {:?}",
            out.stderr
        );
    }
    let report: serde_json::Value =
        serde_json::from_str(out.stdout.trim()).context("oi-trace allocs JSON")?;
    if report["mechanism"] != "inject" {
        bail!("the run fell back to uprobes: {:?}", out.stderr);
    }
    Ok(report)
}

/// The median added ns per pair with `heaptrack -p` attached to a fixture of its own.
fn heaptrack(binary: &std::path::Path, pairs: u64, runs: usize) -> Result<f64> {
    let mut fixture = Fixture::start(binary, &["1", &pairs.to_string()]);
    let none = per_pair_ns(&mut fixture, pairs, runs)?;
    let dir = TempDir::new("heaptrack");
    let mut heaptrack = Heaptrack::attach(fixture.pid, &dir)?;
    let attached = per_pair_ns(&mut fixture, pairs, runs);
    // heaptrack ends with the process it traces.
    drop(fixture);
    heaptrack.wait();
    Ok(attached? - none)
}

/// A running `heaptrack -p`, its data written into a directory of ours.
struct Heaptrack(Child);

impl Heaptrack {
    /// Starts `heaptrack -p pid` and waits until its library is in the process.
    fn attach(pid: i32, dir: &TempDir) -> Result<Self> {
        // Options before `-p`: heaptrack's script stops reading them there.
        let mut child = Command::new("heaptrack")
            .arg("-o")
            .arg(dir.file("heaptrack.%p"))
            .args(["-p", &pid.to_string()])
            .current_dir(dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting heaptrack")?;
        let stdout = child.stdout.take().context("heaptrack stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.contains("injection finished") => return Ok(Self(child)),
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("heaptrack -p {pid} never said its injection finished");
                }
            }
        }
    }

    /// Waits (at most 30 s) for heaptrack to end after its process did, then kills it.
    fn wait(&mut self) {
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

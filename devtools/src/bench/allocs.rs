//! The `allocs` figures of `cargo xtask bench`: what `oi-trace allocs` costs a malloc + free
//! pair, against the same run without probes, against bare uprobes on the same functions at
//! the same places (malloc's entry and uretprobe, free's entry: perf events with no eBPF
//! program), and against bpftrace running the equivalent per-call
//! accounting (live blocks with size and time, bytes per stack); and the allocations per second
//! sustained with 4 threads allocating at once, with the dropped count. Then the
//! `--mechanism inject` figures beside these (`bench::allocs_inject`).
//!
//! oi-trace puts an entry probe on the first instruction the kernel emulates (glibc's `free`
//! on the `je` after its first `test`): every other instruction is stepped out of line, a
//! second exception that costs far more than the first on a VM. bpftrace can only probe a
//! function's first instruction, so its script pays that step; the bare baseline asks
//! `allocs::hooks::probes_of` where oi-trace probes and probes there, so that the ratio to it
//! is the cost of oi-trace's programs alone.
//!
//! bpftrace comes from Debian's package (`cargo xtask setup`). Every time is measured by the
//! target itself (`allocs_bench` prints the wall time of each run). The per-pair costs come
//! from interleaved rounds (no probes, bare probes, oi-trace, bpftrace's script, one run
//! each, each tracer started for its turn): each is the difference to the same round's run
//! without probes, and the figures are medians over the rounds, so that a load that changes
//! during the bench moves every configuration alike.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use oi_e2e::{Fixture, FixtureBuild, OiTrace, SIGINT, SIGUSR1};
use oi_trace::{
    allocs::hooks::{Blocks, probes_of},
    debuginfo::Binary,
};

use super::{
    Figure,
    allocs_inject::{self, Beside},
    bare_uprobe::BareUprobe,
    calls::Bpftrace,
    median, value_of,
};

const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

pub fn run(quick: bool, figures: &mut Vec<Figure>) -> Result<()> {
    // A probed pair costs tens of µs on a VM (traps): enough pairs for a stable median, few
    // enough that the 4-thread run takes seconds.
    let pairs: u64 = if quick { 5_000 } else { 50_000 };
    // Seven rounds: a verdict that a load spike in one or two rounds cannot flip.
    let runs = if quick { 3 } else { 7 };
    let binary = FixtureBuild::new("allocs_bench")
        .variant("allocs_bench_o2", &["-O2"])
        .build();
    // oi-trace's places on malloc (entry and uretprobe) and free (entry), for the bare probes.
    let libc = Binary::open(LIBC).context(LIBC)?;
    let places: Vec<(u64, bool)> = ["malloc", "free"]
        .iter()
        .flat_map(|f| probes_of(&libc, Blocks::Glibc, f))
        .map(|s| (s.file_offset, s.is_uretprobe()))
        .collect();
    if places.len() != 3 {
        bail!("oi-trace hooks malloc and free of {LIBC} with {places:?}, not 3 probes");
    }
    // What `oi-trace allocs` keeps, per call: the request, the live block (size, time), bytes
    // per allocating stack, the lifetime of freed blocks.
    let script = format!(
        "uprobe:{LIBC}:malloc {{ @size[tid] = arg0; }} \
         uretprobe:{LIBC}:malloc /@size[tid]/ {{ @live[retval] = (@size[tid], nsecs); \
           @bytes[ustack] = sum(@size[tid]); delete(@size[tid]); }} \
         uprobe:{LIBC}:free /@live[arg0].0/ {{ @life = hist(nsecs - @live[arg0].1); \
           delete(@live[arg0]); }} \
         BEGIN {{ printf(\"armed\\n\"); }}"
    );
    let mut fixture = Fixture::start(&binary, &["1", &pairs.to_string()]);
    let pid = fixture.pid.to_string();
    // Interleaved rounds: the machine's load moves over a run (other builds, other benches),
    // and four blocks measured one after the other would each see a different load. Each round
    // measures every configuration once (no probes, bare probes, oi-trace, bpftrace's script:
    // each tracer started for its turn and stopped after it), each per-pair cost is taken
    // against the same round's run without probes, and the figures are the medians over the
    // rounds; the comparison with bpftrace also says in how many rounds oi-trace was below.
    let (mut none, mut bare_cost, mut oi_cost, mut bpf_cost) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut below = 0;
    for _ in 0..runs {
        let free = per_pair_ns(&mut fixture, pairs, 1)?;
        let bare_ns = {
            let _bare = places
                .iter()
                .map(|&(offset, ret)| BareUprobe::attach(LIBC.as_ref(), offset, ret, fixture.pid))
                .collect::<Result<Vec<_>>>()?;
            per_pair_ns(&mut fixture, pairs, 1)?
        };
        let oi_ns = {
            let tracer = OiTrace::attached(&["allocs", "--pid", &pid, "--format", "json"]);
            let ns = per_pair_ns(&mut fixture, pairs, 1)?;
            tracer.signal(SIGINT);
            let out = tracer.finish(Duration::from_secs(120));
            if !out.status.success() {
                bail!("oi-trace allocs failed: {:?}", out.stderr);
            }
            ns
        };
        let bpftrace_ns = {
            let _script = Bpftrace::start(&script, Some(&pid))?;
            per_pair_ns(&mut fixture, pairs, 1)?
        };
        none.push(free);
        bare_cost.push(bare_ns - free);
        oi_cost.push(oi_ns - free);
        bpf_cost.push(bpftrace_ns - free);
        if oi_ns < bpftrace_ns {
            below += 1;
        }
    }
    drop(fixture);
    let (none, oi, bare, bpf) = (
        median(none),
        median(oi_cost),
        median(bare_cost),
        median(bpf_cost),
    );
    figures.push(Figure {
        name: format!(
            "allocs: cost per malloc+free pair attached, median of {runs} interleaved rounds \
             (baseline: bare uprobes at the same places)"
        ),
        value: oi / 1e3,
        baseline: bare / 1e3,
        unit: "µs",
        goal: "≤ 1.5×".into(),
        pass: Some(oi <= 1.5 * bare),
    });
    figures.push(Figure {
        name: format!(
            "allocs: cost per malloc+free pair attached, median of {runs} interleaved rounds, \
             below in {below} of {runs} (baseline: bpftrace per-call accounting script)"
        ),
        value: oi / 1e3,
        baseline: bpf / 1e3,
        unit: "µs",
        goal: "< 1×".into(),
        pass: Some(oi < bpf),
    });
    figures.push(Figure {
        name: "allocs: a malloc+free pair without probes (for scale)".into(),
        value: none,
        baseline: none,
        unit: "ns",
        goal: "report".into(),
        pass: None,
    });
    threads(&binary, pairs, runs, figures)?;
    allocs_inject::run(
        &binary,
        quick,
        Beside {
            uprobes_ns: oi,
            bpftrace_ns: bpf,
        },
        figures,
    )
}

/// Figure: allocations per second with 4 threads allocating, attached, and the dropped count.
fn threads(
    binary: &std::path::Path,
    pairs: u64,
    runs: usize,
    figures: &mut Vec<Figure>,
) -> Result<()> {
    let mut fixture = Fixture::start(binary, &["4", &pairs.to_string()]);
    let pid = fixture.pid.to_string();
    let none = per_pair_ns(&mut fixture, pairs, runs)?;
    let tracer = OiTrace::attached(&["allocs", "--pid", &pid, "--format", "json"]);
    let attached = per_pair_ns(&mut fixture, pairs, runs)?;
    tracer.signal(SIGINT);
    let out = tracer.finish(Duration::from_secs(120));
    if !out.status.success() {
        bail!("oi-trace allocs failed: {:?}", out.stderr);
    }
    let report: serde_json::Value =
        serde_json::from_str(out.stdout.trim()).context("oi-trace allocs JSON")?;
    let dropped = report["totals"]["dropped"].as_u64().unwrap_or(u64::MAX);
    let allocs = report["totals"]["allocs"].as_u64().unwrap_or(0);
    // 4 threads × pairs allocations per run; per_pair_ns is the run's wall time / pairs.
    let per_second = |ns_per_pair: f64| 4.0 * 1e9 / ns_per_pair;
    figures.push(Figure {
        name: format!(
            "allocs: allocations per second, 4 threads, attached ({allocs} counted, {dropped} dropped) (baseline: no probes)"
        ),
        // k/s: attached, a pair costs tens of µs, so M/s would print 0.0.
        value: per_second(attached) / 1e3,
        baseline: per_second(none) / 1e3,
        unit: "k/s",
        goal: "report".into(),
        pass: None,
    });
    if dropped != 0 {
        bail!("oi-trace allocs dropped {dropped} allocations with 4 threads");
    }
    Ok(())
}

/// Median wall time of `runs` runs of the fixture's work, per pair (per thread), in ns.
pub(super) fn per_pair_ns(fixture: &mut Fixture, pairs: u64, runs: usize) -> Result<f64> {
    fixture.stdout.take();
    let mut times = Vec::new();
    for _ in 0..runs {
        fixture.signal(SIGUSR1);
        let line = fixture.stdout.expect("ns ", Duration::from_secs(300));
        times.push(value_of(&line, "ns ").context("ns")? / pairs as f64);
    }
    Ok(median(times))
}

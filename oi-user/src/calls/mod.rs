//! `oi-trace calls --entry F`: times every call made beneath an entry function, per thread, in
//! a live process, and shows the call tree (calls, total and self time, average, share of the
//! entry's time).
//!
//! How: uprobes on the first instruction and on every return instruction (`ret`, tail-call
//! `jmp`) of F and of every selected function (`select`, `sites`), never uretprobes (an
//! exception unwinding through a uretprobe's trampoline finds no CFI and kills a C++ program).
//! One eBPF program (`oi-ebpf/src/bin/calls.rs`) keeps a shadow stack per thread while the
//! thread is inside F (its *window*), resynchronised by the stack pointer so that exceptions,
//! longjmp and tail calls never corrupt it, and adds each completed call to the tree node keyed
//! by (parent node, function) in kernel maps: no event per call, except the calls of the first
//! `--trace-entries` windows for `--chrome`. User space attaches (one multi-uprobe link per
//! batch where the kernel has them), arms the program once every probe is in place (a call
//! that starts while only some are would get a partial tree; one already running is not
//! counted), waits in the core's event loop, disarms it before detaching, then rebuilds the
//! tree (`tree`) and prints it (`report`).
//!
//! Honest overhead: before attaching to the target, the cost of a hit is measured on
//! oi-trace's own functions with the same program (`calibrate`); the report gives the hits and
//! the probe cost they put into the times. Nothing is subtracted.
//!
//! The uprobe path never stops, ptraces or writes to the target: only uprobes touch it, and
//! they are removed before the report is printed (on `--count`, `--duration`, Ctrl-C, SIGTERM
//! or the target's exit). `--mechanism inject` (`in_target`) times the calls inside the
//! process instead, through the in-target core, and builds the same tree.

pub mod calibrate;
mod in_target;
pub mod pprof;
pub mod program;
pub mod report;
pub mod select;
pub mod sites;
mod target;
pub mod tree;

use std::{
    io::Write as _,
    path::PathBuf,
    time::{Duration, Instant},
};

use oi_common::calls::{MAX_DEPTH, Record, counter, global, record};

use crate::{
    cli::calls::{CallsArgs, CallsMechanism, TreeFormat},
    error::{Error, Result},
    event_loop::{End, EventLoop, Profiler},
    probe::scope::Scope,
    report::{
        flame::{Folded, Picture},
        tree::thousands,
    },
};
use calibrate::ProbeCost;
use program::{Program, Settings};
use report::{Heading, JsonNode, JsonReport, TracedCall, human_ns};
use target::{Target, attach};
use tree::CallNode;

/// Calls of traced windows kept for `--chrome`; more are counted and left out.
const MAX_TRACED_CALLS: usize = 2_000_000;
/// How often shadow stacks of threads that exited inside a window are removed.
const SWEEP: Duration = Duration::from_secs(1);

pub fn run(args: &CallsArgs) -> Result<()> {
    validate(args)?;
    let scope = Scope::resolve(&args.scope)?;
    profile(args, &scope).map_err(|e| scope.explain(e))
}

fn profile(args: &CallsArgs, scope: &Scope) -> Result<()> {
    let target = Target::resolve(args, scope)?;
    if args.mechanism == CallsMechanism::Inject {
        return in_target::profile(args, scope, &target);
    }
    let settings = Settings {
        target_tgid: scope.pid.map(|p| p as u32),
        cgroup: scope.cgroup.as_ref().map(|c| (c.id, c.level)),
        depth: args.depth,
        max_nodes: args.max_nodes,
        window_limit: args.count,
        traced_windows: if args.chrome.is_some() {
            u64::from(args.trace_entries)
        } else {
            0
        },
        histogram_functions: args.histograms.then_some(target.functions.len() as u32),
        verbose: args.scope.verbose,
    };
    let mut program = Program::load(&settings)?;
    let cost = calibrate::measure(&mut program)?;
    program.reset()?;
    let mut records = program.take_records();
    let logger = program.take_logger();
    if let Some(ring) = records.as_mut() {
        // What the calibration left (nothing is traced for it, but be sure).
        while ring.next().is_some() {}
    }

    let total_probes: usize = target.sites.iter().map(Vec::len).sum();
    eprintln!(
        "oi-trace: probing {} function(s) beneath {} ({} probes): each call of one of them \
         will cost about {} (two hits), and each hit outside a call of the entry about {}",
        thousands(target.functions.len() as u64),
        target.entry_name,
        thousands(total_probes as u64),
        human_ns((2.0 * cost.inside_ns).round() as u64),
        human_ns(cost.outside_ns.round() as u64),
    );
    let attach_start = Instant::now();
    let attachments = attach(&mut program, &target, scope, total_probes)?;
    if let Err(e) = program.arm(true) {
        for attachment in attachments {
            program.detach(attachment);
        }
        return Err(e);
    }
    if scope.pid.is_some() {
        // One process, attached: what is left (reading its maps and files to name functions,
        // detaching) takes no eBPF or admin capability. A cgroup's new processes would.
        crate::privileges::keep_only(crate::privileges::AFTER_ARMING);
    }
    let probes: usize = attachments.iter().map(|a| a.probes).sum();
    let armed = format!(
        "oi-trace: attached {} probe(s) to {} function(s) beneath {} in {} in {} ms ({}), armed \
         {} ms after start; a probe hit costs {} here",
        thousands(probes as u64),
        thousands(target.functions.len() as u64),
        target.entry_name,
        scope.place,
        attach_start.elapsed().as_millis(),
        program.mechanism(),
        crate::uptime::elapsed().as_millis(),
        human_ns(cost.inside_ns.round() as u64),
    );

    let started = Instant::now();
    let mut state = Run {
        program: &mut program,
        target: &target,
        args,
        scope,
        started,
        traced: Vec::new(),
        traced_lost: 0,
        done: false,
        last_sweep: Instant::now(),
        exited_inside: 0,
        armed,
    };
    let mut event_loop = EventLoop::new(args.scope.duration, args.scope.interval);
    if let Some(ring) = records {
        event_loop = event_loop.ring(ring);
    }
    if let Some(logger) = logger {
        event_loop = event_loop.logger(logger);
    }
    if let Some(pid) = scope.pid {
        event_loop = event_loop.watch_process(pid);
    }
    let end = event_loop.run(&mut state);
    let elapsed = started.elapsed();
    let (traced, traced_lost, exited_inside) = (
        std::mem::take(&mut state.traced),
        state.traced_lost,
        state.exited_inside,
    );
    drop(state);
    // The target runs at full speed again before anything is read or printed.
    let _ = program.arm(false);
    let still_inside = program.threads_inside().len();
    for attachment in attachments {
        program.detach(attachment);
    }
    let end = end?;
    if end == End::TargetExited {
        eprintln!("oi-trace: the target exited; the tree holds the calls made until then");
    }
    let outcome = Outcome {
        snapshot: program.snapshot(),
        elapsed,
        cost: Some(cost),
        still_inside,
        traced_lost,
        exited_inside,
        inject: None,
    };
    finish(
        args,
        scope,
        &target,
        &|id| program.histogram(id),
        &outcome,
        &traced,
    )
}

fn validate(args: &CallsArgs) -> Result<()> {
    if args.entry.trim().is_empty() {
        return Err(Error::input("--entry needs a function name"));
    }
    if let Some(d) = args.depth
        && d >= MAX_DEPTH
    {
        return Err(Error::input(format!(
            "--depth {d}: at most {} levels below the entry are timed",
            MAX_DEPTH - 1
        )));
    }
    if args.count == Some(0) {
        return Err(Error::input(
            "--count must be at least 1 (stop after K calls of the entry), got 0",
        ));
    }
    if args.chrome.is_some() && args.trace_entries == 0 {
        return Err(Error::input("--trace-entries must be at least 1, got 0"));
    }
    if args.mechanism == CallsMechanism::Inject {
        let unsupported = [
            (args.histograms, "--histograms"),
            (args.chrome.is_some(), "--chrome"),
            (args.scope.cgroup.is_some(), "--cgroup"),
        ];
        if let Some((_, option)) = unsupported.iter().find(|(given, _)| *given) {
            return Err(Error::input(format!(
                "--mechanism inject times the calls of one process, without per-call records \
                 or histograms yet: {option} needs --mechanism uprobes"
            )));
        }
    }
    if args.max_nodes == 0 || args.max_nodes > 1 << 24 {
        return Err(Error::input(format!(
            "--max-nodes must be between 1 and {}, got {}",
            1 << 24,
            args.max_nodes
        )));
    }
    Ok(())
}

/// The event loop's view of the run.
struct Run<'a> {
    program: &'a mut Program,
    target: &'a Target,
    args: &'a CallsArgs,
    scope: &'a Scope,
    started: Instant,
    traced: Vec<Record>,
    traced_lost: u64,
    done: bool,
    last_sweep: Instant,
    exited_inside: u64,
    /// The line that says the probes are armed, printed once the loop handles signals.
    armed: String,
}

impl Profiler for Run<'_> {
    fn record(&mut self, data: &[u8]) {
        if data.len() < size_of::<Record>() {
            return;
        }
        // SAFETY: the program writes exactly a `Record` (repr(C), every bit pattern valid);
        // unaligned because ring-buffer records are only 8-byte aligned.
        let r = unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<Record>()) };
        match r.kind {
            record::CALL if self.traced.len() < MAX_TRACED_CALLS => self.traced.push(r),
            record::CALL => self.traced_lost += 1,
            record::DONE => self.done = true,
            _ => {}
        }
    }

    fn armed(&mut self) {
        eprintln!("{}", self.armed);
    }

    fn housekeeping(&mut self) -> Option<End> {
        if self.last_sweep.elapsed() >= SWEEP {
            self.last_sweep = Instant::now();
            for pid_tgid in self.program.threads_inside() {
                let (tgid, tid) = (pid_tgid >> 32, pid_tgid & 0xffff_ffff);
                if !std::path::Path::new(&format!("/proc/{tgid}/task/{tid}")).exists() {
                    self.program.forget_thread(pid_tgid);
                    self.exited_inside += 1;
                }
            }
        }
        let count = self.args.count?;
        // The DONE record says it at once; the counter covers a record lost to a full ring.
        let closed = self.program.snapshot_globals()[global::WINDOWS_CLOSED as usize];
        (self.done || closed >= count).then_some(End::Finished)
    }

    fn interval(&mut self) {
        let snapshot = self.program.snapshot();
        let elapsed = self.started.elapsed().as_secs_f64();
        print_interval(self.target, self.scope, self.args, &snapshot, elapsed);
    }
}

/// The tree so far, as `--interval` prints it.
fn print_interval(
    target: &Target,
    scope: &Scope,
    args: &CallsArgs,
    snapshot: &program::Snapshot,
    elapsed: f64,
) {
    let (roots, hidden) = build_tree(target, snapshot, args);
    let hits = snapshot.counters[counter::HITS_INSIDE as usize]
        + snapshot.counters[counter::HITS_OUTSIDE as usize];
    let mut out = std::io::stdout().lock();
    let _ = match args.format {
        TreeFormat::Tree => writeln!(
            out,
            "{}{}",
            report::tree_text(
                &Heading {
                    entry: &target.entry_name,
                    place: &scope.place,
                    elapsed_s: elapsed,
                    probe_hits: hits,
                },
                &roots,
            ),
            hidden_line(hidden, args)
        ),
        TreeFormat::Json => {
            write_json(&mut out, &json_report(target, scope, elapsed, hits, &roots))
        }
    };
    let _ = out.flush();
}

/// What the run left for the report.
struct Outcome {
    snapshot: program::Snapshot,
    elapsed: Duration,
    /// The calibrated cost of a probe hit (uprobes only).
    cost: Option<ProbeCost>,
    still_inside: usize,
    traced_lost: u64,
    exited_inside: u64,
    /// What `--mechanism inject` patched and counted.
    inject: Option<report::JsonInject>,
}

/// The tree of the run so far, pruned by `--min-time`, and how many nodes that hid.
fn build_tree(
    target: &Target,
    snapshot: &program::Snapshot,
    args: &CallsArgs,
) -> (Vec<CallNode>, usize) {
    let mut roots = tree::build(
        &snapshot.nodes,
        &|id| target.name_of(id).to_string(),
        &|id| (id as usize) < target.functions.len(),
    );
    let mut hidden = 0;
    if let Some(min) = args.min_time {
        let min = min.as_nanos() as u64;
        for root in &mut roots {
            hidden += root.prune(min);
        }
    }
    (roots, hidden)
}

/// The line that says what `--min-time` hid, if anything.
fn hidden_line(hidden: usize, args: &CallsArgs) -> String {
    match args.min_time {
        Some(min) if hidden > 0 => format!(
            "({hidden} node(s) with a total under {} hidden by --min-time; their time is in \
             their parent's)\n",
            human_ns(min.as_nanos() as u64)
        ),
        _ => String::new(),
    }
}

/// How much of `total_ns` the probes' `estimate_ns` is: `about X`, or, when the calibration's
/// cost per hit (measured on a quiet moment of oi-trace's own code) times the hits exceeds the
/// whole (hits are cheaper under load, or they overlap sleeps of other threads), `nearly all`:
/// a part never exceeds its whole.
fn probe_share(estimate_ns: f64, total_ns: u64) -> String {
    if estimate_ns > total_ns as f64 {
        "nearly all".to_string()
    } else {
        format!("about {}", human_ns(estimate_ns as u64))
    }
}

/// The JSON report of the tree so far; the final one adds histograms and counters.
fn json_report<'a>(
    target: &'a Target,
    scope: &Scope,
    elapsed_s: f64,
    probe_hits: u64,
    roots: &'a [CallNode],
) -> JsonReport<'a> {
    let tree = roots
        .first()
        .map_or_else(|| JsonNode::empty(&target.entry_name), JsonNode::of);
    JsonReport {
        entry: &target.entry_name,
        pid: scope.pid,
        elapsed_s: (elapsed_s * 1000.0).round() / 1000.0,
        probe_hits,
        tree,
        histograms: None,
        counters: None,
        inject: None,
    }
}

fn write_json(out: &mut dyn std::io::Write, json: &JsonReport<'_>) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, json)?;
    writeln!(out)
}

/// A function's latency histogram (`--histograms`), by function id.
type Histogram<'a> = &'a dyn Fn(u32) -> [u64; oi_common::calls::HISTOGRAM_BUCKETS as usize];

fn finish(
    args: &CallsArgs,
    scope: &Scope,
    target: &Target,
    histogram: Histogram<'_>,
    outcome: &Outcome,
    traced: &[Record],
) -> Result<()> {
    let snapshot = &outcome.snapshot;
    let c = |i: u32| snapshot.counters[i as usize];
    let hits_inside = c(counter::HITS_INSIDE);
    let hits = hits_inside + c(counter::HITS_OUTSIDE);
    let (roots, hidden) = build_tree(target, snapshot, args);
    let elapsed_s = outcome.elapsed.as_secs_f64();
    let counters = report::JsonCounters {
        abandoned: c(counter::ABANDONED),
        unmatched: c(counter::UNMATCHED),
        deeper: c(counter::DEEPER),
        nodes_full: c(counter::NODES_FULL),
        threads_full: c(counter::THREADS_FULL),
        windows_skipped: c(counter::WINDOWS_SKIPPED),
        entered_before_attaching: c(counter::ENTERED_BEFORE_ATTACHING),
        still_inside: outcome.still_inside as u64,
        exited_inside: outcome.exited_inside,
        trace_lost: c(counter::TRACE_LOST) + outcome.traced_lost,
    };
    let write_error = |what: &str, path: &PathBuf, e: std::io::Error| {
        Error::internal(format!("writing {what} {}: {e}", path.display()))
    };

    let histograms = args.histograms.then(|| {
        report::merge_histograms(
            (0..target.functions.len() as u32).map(|id| (target.name_of(id), histogram(id))),
        )
    });
    let mut out = std::io::stdout().lock();
    let printed = match args.format {
        TreeFormat::Tree => {
            let mut text = report::tree_text(
                &Heading {
                    entry: &target.entry_name,
                    place: &scope.place,
                    elapsed_s,
                    probe_hits: hits,
                },
                &roots,
            );
            text.push_str(&hidden_line(hidden, args));
            for (name, buckets) in histograms.iter().flatten() {
                text.push('\n');
                text.push_str(&report::histogram_text(name, buckets));
            }
            out.write_all(text.as_bytes())
        }
        TreeFormat::Json => {
            let json_histograms = histograms.as_ref().map(|all| {
                all.iter()
                    .map(|(name, buckets)| report::JsonHistogram {
                        name,
                        buckets: buckets
                            .iter()
                            .enumerate()
                            .filter(|(_, n)| **n > 0)
                            .map(|(b, &n)| {
                                let (low, high) = report::bucket_range(b);
                                [low, high, n]
                            })
                            .collect(),
                    })
                    .collect()
            });
            let json = JsonReport {
                histograms: json_histograms,
                counters: Some(counters),
                inject: outcome.inject.clone(),
                ..json_report(target, scope, elapsed_s, hits, &roots)
            };
            write_json(&mut out, &json)
        }
    };
    let _ = printed.and_then(|()| out.flush());
    drop(out);

    if args.folded.is_some() || args.flamegraph.is_some() {
        let mut folded = Folded::new();
        for root in &roots {
            root.fold(&mut folded);
        }
        if let Some(path) = &args.folded {
            folded
                .write(path)
                .map_err(|e| write_error("folded stacks to", path, e))?;
        }
        if let Some(path) = &args.flamegraph {
            let subtitle = format!(
                "{} calls of {}",
                thousands(roots.iter().map(|r| r.calls).sum()),
                target.entry_name
            );
            folded
                .write_svg(
                    path,
                    &Picture {
                        title: &format!("calls beneath {}", target.entry_name),
                        subtitle: Some(&subtitle),
                        unit: "ns",
                        icicle: false,
                    },
                )
                .map_err(|e| write_error("a flame graph to", path, e))?;
        }
    }
    if let Some(path) = &args.pprof {
        let symbols = target
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.symbol.mangled.as_str()));
        let entry = &target.entry_name;
        pprof::write(path, &roots, entry, &scope.place, symbols, outcome.elapsed)?;
    }
    if let Some(path) = &args.chrome {
        let calls: Vec<TracedCall<'_>> = traced
            .iter()
            .map(|&record| TracedCall {
                name: target.name_of(record.function),
                record,
            })
            .collect();
        let file = std::fs::File::create(path).map_err(|e| write_error("the trace", path, e))?;
        let mut w = std::io::BufWriter::new(file);
        report::chrome_trace(&calls, &mut w)
            .and_then(|()| w.flush())
            .map_err(|e| write_error("the trace", path, e))?;
    }

    // The summary: what the run saw, what the probes cost, what did not fit.
    let entries: u64 = roots.iter().map(|r| r.calls).sum();
    if outcome.cost.is_some() {
        eprintln!(
            "oi-trace: {} call(s) of {} completed; {} probe hits ({} inside them, {} outside)",
            thousands(entries),
            target.entry_name,
            thousands(hits),
            thousands(hits_inside),
            thousands(c(counter::HITS_OUTSIDE))
        );
    } else {
        eprintln!(
            "oi-trace: {} call(s) of {} completed; {} call events recorded in the target",
            thousands(entries),
            target.entry_name,
            thousands(hits_inside),
        );
    }
    let entry_total: u64 = roots.iter().map(|r| r.total_ns).sum();
    let inside_entry: u64 = roots.iter().map(CallNode::hits_inside).sum();
    if let Some(cost) = outcome.cost {
        eprintln!(
            "oi-trace: probe cost measured at start: {} per hit inside a call of the entry, {} \
             outside (a bare call: {}); {} of the {} spent in {} is probe cost ({} hits), \
             nothing subtracted",
            human_ns(cost.inside_ns.round() as u64),
            human_ns(cost.outside_ns.round() as u64),
            human_ns(cost.bare_call_ns.round() as u64),
            probe_share(inside_entry as f64 * cost.inside_ns, entry_total),
            human_ns(entry_total),
            target.entry_name,
            thousands(inside_entry)
        );
    }
    let warn = |n: u64, what: &str| {
        if n > 0 {
            eprintln!("oi-trace: {} {what}", thousands(n));
        }
    };
    warn(
        counters.nodes_full,
        &format!(
            "call(s) not timed: the node table was full (--max-nodes {})",
            args.max_nodes
        ),
    );
    warn(
        counters.threads_full,
        "call(s) of the entry not timed: too many threads inside it at once",
    );
    warn(
        counters.deeper,
        "call(s) below --depth counted on their deepest node, not timed",
    );
    warn(
        counters.abandoned,
        "call(s) left by an exception or longjmp, timed until the stack showed it",
    );
    warn(
        counters.trace_lost,
        "call record(s) of --chrome lost (ring buffer full)",
    );
    warn(
        counters.unmatched,
        "return(s) that matched another function's frame (please report: a probe was missed)",
    );
    warn(
        counters.entered_before_attaching,
        "call(s) of the entry already running when the probes were armed, not counted",
    );
    warn(
        counters.windows_skipped,
        "call(s) of the entry not counted: --count was reached",
    );
    warn(
        counters.still_inside,
        "call(s) of the entry still running at the end, not counted",
    );
    warn(
        counters.exited_inside,
        "thread(s) exited inside the entry; their open calls were dropped",
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::probe_share;

    #[test]
    fn a_part_never_exceeds_its_whole() {
        assert_eq!(probe_share(38_710e6, 23_510_000_000), "nearly all");
        assert_eq!(probe_share(1_500.0, 23_510), "about 1.5 µs");
    }
}

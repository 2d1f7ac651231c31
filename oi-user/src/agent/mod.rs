//! `oi-trace agent`: the continuous mode. Profiles each target (`--pid`) with the `allocs`
//! profiler for as long as the agent runs, and every `--interval` turns what it counted into one
//! pprof profile per target, delivered to files (`--pprof-dir`), to Pyroscope
//! (`--pyroscope-url`) and, experimentally, as OTLP profiles (`--otlp-endpoint`).
//!
//! How: one thread per target runs the `allocs` pipeline as `oi-trace allocs --pid P
//! --interval T` would (its own eBPF object, its own event loop; SIGINT and SIGTERM reach every
//! loop), with its reports handed to [`intervals`] instead of printed. Profiles for the network
//! go through one bounded [`queue`] per backend, each served by a delivery thread of its own,
//! so a slow or absent backend never holds a profiler (or another backend) up. The main thread prints a status line every interval and the
//! summary at the end.
//!
//! - `targets`: the processes and their labels; `labels`: label rules and spellings;
//! - `intervals`: cumulative reports to per-interval profiles;
//! - `pprof_dir`: files, rotated; `queue`: bounded delivery with backoff; `pyroscope`: the
//!   ingest API; `otlp`: OTLP profiles over HTTP.
//!
//! Never stops, ptraces or writes to a target (the `allocs` profiler's rule); a target that
//! exits is dropped with one line on stderr, and the others go on.

pub mod intervals;
pub mod labels;
pub mod otlp;
pub mod pprof_dir;
pub mod pyroscope;
pub mod queue;
pub mod targets;

use std::{
    sync::{Arc, atomic::Ordering, mpsc},
    time::{Duration, Instant},
};

use clap::Parser as _;

use crate::{
    allocs,
    cli::{agent::AgentArgs, allocs::AllocsArgs},
    error::{Error, Result},
    event_loop::End,
};
use intervals::{Intervals, Outlets, Sampling};
use queue::{Backend, Queue};
use targets::Target;

/// How long the queue may take to drain when the agent stops.
const DRAIN: Duration = Duration::from_secs(5);

pub fn run(args: &AgentArgs) -> Result<()> {
    let extra: Vec<(String, String)> = args
        .labels
        .iter()
        .map(|l| labels::parse_label(l))
        .collect::<std::result::Result<_, _>>()
        .map_err(Error::input)?;
    // OpenTelemetry's variable, as every OTLP exporter reads it.
    let otlp_endpoint = args.otlp_endpoint.clone().or_else(|| {
        std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
            .ok()
            .filter(|v| !v.is_empty())
    });
    if args.pprof_dir.is_none() && args.pyroscope_url.is_none() && otlp_endpoint.is_none() {
        return Err(Error::input(
            "give somewhere to deliver profiles: --pprof-dir DIR, --pyroscope-url URL or \
             --otlp-endpoint URL",
        ));
    }
    if args.every == Some(0) {
        return Err(Error::input(
            "--every must be at least 1 (take every Nth allocation), got 0",
        ));
    }
    if args.queue == 0 {
        return Err(Error::input("--queue must be at least 1"));
    }
    if let Some(url) = &args.pyroscope_url {
        pyroscope::check_url(url).map_err(|e| Error::input(format!("--pyroscope-url {e}")))?;
    }
    if let Some(url) = &otlp_endpoint {
        pyroscope::check_url(url).map_err(|e| Error::input(format!("--otlp-endpoint {e}")))?;
    }
    let token = match &args.bearer_token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Error::input(format!("--bearer-token-file {}: {e}", path.display()))
            })?;
            let token = text.trim().to_string();
            if token.is_empty() || token.contains(['\r', '\n']) {
                return Err(Error::input(format!(
                    "--bearer-token-file {}: expected one token on one line",
                    path.display()
                )));
            }
            Some(token)
        }
        None => None,
    };
    let pprof_dir = match &args.pprof_dir {
        Some(dir) => Some(pprof_dir::PprofDir::open(dir, args.pprof_keep).map_err(Error::input)?),
        None => None,
    };
    let targets = targets::resolve(args, &extra)?;
    // Each target's profiler is `oi-trace allocs` with these options; its own checks apply.
    let allocs_args: Vec<AllocsArgs> = targets
        .iter()
        .map(|t| allocs_args(args, t.pid))
        .collect::<Result<_>>()?;

    let mut backends: Vec<Box<dyn Backend>> = Vec::new();
    if let Some(url) = &args.pyroscope_url {
        backends.push(Box::new(pyroscope::Pyroscope::new(
            url,
            args.tenant_id.clone(),
            token.clone(),
            args.send_timeout,
        )));
    }
    if let Some(url) = &otlp_endpoint {
        eprintln!(
            "oi-trace: agent: OTLP profiles are experimental (the signal is Alpha; messages of \
             opentelemetry-proto v1.11.0 to {url}{})",
            otlp::PROFILES_PATH
        );
        backends.push(Box::new(otlp::Otlp::new(
            url,
            args.tenant_id.clone(),
            token.clone(),
            args.send_timeout,
        )));
    }
    let outlets = Outlets {
        pprof_dir,
        queues: backends
            .iter()
            .map(|b| (b.kind().to_string(), Arc::new(Queue::new(args.queue))))
            .collect(),
        profiles: Default::default(),
        write_errors: Default::default(),
    };
    let sampling = Sampling {
        every: args.every.unwrap_or(1),
        sample_bytes: args.every.is_none().then_some(args.sample_bytes),
    };
    let started = Instant::now();
    let outcome = std::thread::scope(|scope| {
        let mut delivery = Vec::new();
        for (mut backend, (_, queue)) in backends.into_iter().zip(&outlets.queues) {
            let queue = queue.clone();
            let (retry_max, verbose) = (args.retry_max, args.verbose);
            delivery.push(
                std::thread::Builder::new()
                    .name(format!("oi-agent-{}", backend.kind()))
                    .spawn_scoped(scope, move || {
                        queue.serve(backend.as_mut(), retry_max, DRAIN, verbose)
                    })
                    .map_err(|e| Error::internal(format!("starting delivery: {e}")))?,
            );
        }
        let (done_tx, done_rx) = mpsc::channel::<(i32, Result<End>)>();
        for (target, allocs_args) in targets.iter().zip(allocs_args) {
            let done = done_tx.clone();
            let outlets = &outlets;
            std::thread::Builder::new()
                .name(format!("oi-agent-{}", target.pid))
                .spawn_scoped(scope, move || {
                    let mut intervals = Intervals::new(target, outlets, sampling);
                    let outcome = allocs::run_with(&allocs_args, &mut intervals);
                    let _ = done.send((target.pid, outcome));
                })
                .map_err(|e| Error::internal(format!("starting a profiler: {e}")))?;
        }
        drop(done_tx);
        let outcome = watch(&targets, &outlets, args.interval, &done_rx);
        for (_, queue) in &outlets.queues {
            queue.close();
        }
        for thread in delivery {
            let _ = thread.join();
        }
        outcome
    });
    eprintln!(
        "oi-trace: agent: stopped after {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        status_counts(&outlets)
    );
    outcome
}

/// Waits for the targets' profilers to end, printing the status line every `interval`. The
/// agent failed only when no target could be profiled at all: then the first error is its own.
fn watch(
    targets: &[Target],
    outlets: &Outlets,
    interval: Duration,
    done: &mpsc::Receiver<(i32, Result<End>)>,
) -> Result<()> {
    let mut running = targets.len();
    let mut profiled = 0;
    let mut first_error: Option<Error> = None;
    let mut next_status = Instant::now() + interval;
    // Ahead of the profilers' own ticks, so that the line counts the interval just ended.
    let lag = Duration::from_millis(500).min(interval / 4);
    while running > 0 {
        let wait = (next_status + lag).saturating_duration_since(Instant::now());
        match done.recv_timeout(wait) {
            Ok((pid, outcome)) => {
                running -= 1;
                let comm = targets
                    .iter()
                    .find(|t| t.pid == pid)
                    .map_or("?", |t| t.comm.as_str());
                match outcome {
                    Ok(End::TargetExited) => {
                        profiled += 1;
                        eprintln!(
                            "oi-trace: agent: pid {pid} ({comm}) exited; dropped (its last, \
                             partial interval is not delivered)"
                        );
                    }
                    Ok(_) => profiled += 1,
                    Err(e) => {
                        eprintln!("oi-trace: agent: pid {pid} ({comm}): {e}; dropped");
                        first_error.get_or_insert(e);
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                next_status += interval;
                eprintln!(
                    "oi-trace: agent: {running} target(s): {}",
                    status_counts(outlets)
                );
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    match first_error {
        Some(e) if profiled == 0 => Err(e),
        _ => Ok(()),
    }
}

/// `N profile(s), …`: what was made, written and delivered so far.
fn status_counts(outlets: &Outlets) -> String {
    let mut line = format!("{} profile(s)", outlets.profiles.load(Ordering::Relaxed));
    if let Some(dir) = &outlets.pprof_dir {
        let failed = outlets.write_errors.load(Ordering::Relaxed);
        line += &format!(", to {}: {failed} write error(s)", dir.dir.display());
    }
    for (name, queue) in &outlets.queues {
        let s = queue.stats();
        line += &format!(
            ", to {name}: {} delivered, {} queued, {} dropped, {} rejected, {} retried send(s)",
            s.delivered, s.queued, s.dropped, s.rejected, s.retries
        );
    }
    line
}

/// The `allocs` options of one target, parsed as its command line would be, so that every
/// default and check of `oi-trace allocs` holds.
fn allocs_args(args: &AgentArgs, pid: i32) -> Result<AllocsArgs> {
    #[derive(clap::Parser)]
    struct Allocs {
        #[command(flatten)]
        args: AllocsArgs,
    }
    let mut argv: Vec<String> = vec![
        "allocs".into(),
        "--pid".into(),
        pid.to_string(),
        "--interval".into(),
        format!("{}ns", args.interval.as_nanos()),
        "--max-live".into(),
        args.max_live.to_string(),
        "--max-stacks".into(),
        args.max_stacks.to_string(),
    ];
    match args.every {
        Some(n) => argv.extend(["--every".into(), n.to_string()]),
        None => argv.extend(["--sample-bytes".into(), args.sample_bytes.to_string()]),
    }
    if let Some(d) = args.duration {
        argv.extend(["--duration".into(), format!("{}ns", d.as_nanos())]);
    }
    if args.verbose {
        argv.push("--verbose".into());
    }
    Allocs::try_parse_from(&argv).map(|a| a.args).map_err(|e| {
        Error::input(
            format!("{}", e.render())
                .lines()
                .next()
                .unwrap_or("")
                .to_string(),
        )
    })
}

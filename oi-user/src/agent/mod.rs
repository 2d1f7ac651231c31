//! `oi-trace agent`: the continuous mode. Profiles each target (`--pid`, `--cgroup`, every
//! container with `--target all-containers`) with the `allocs` profiler for as long as the
//! agent runs, and every `--interval` turns what it counted into one pprof profile per target,
//! delivered to files (`--pprof-dir`), to Pyroscope (`--pyroscope-url`) and, experimentally,
//! as OTLP profiles (`--otlp-endpoint`).
//!
//! How: one thread per target runs the `allocs` pipeline as `oi-trace allocs --pid P
//! --interval T` (or `--cgroup PATH`) would (its own eBPF object, its own event loop; SIGINT
//! and SIGTERM reach every loop, and the main thread's too), with its reports handed to
//! [`intervals`] instead of printed. Profiles for the network go through one bounded
//! [`queue`] per backend, each served by a delivery thread of its own, so a slow or absent
//! backend never holds a profiler (or another backend) up. The main thread prints a status
//! line every interval and the summary at the end.
//!
//! - `targets`: the processes and cgroups and their labels; `containers`: container cgroups
//!   found under a root, and what their kubepods paths say; `labels`: label rules and
//!   spellings;
//! - `intervals`: cumulative reports to per-interval profiles;
//! - `pprof_dir`: files, rotated; `queue`: bounded delivery with backoff; `pyroscope`: the
//!   ingest API; `otlp`: OTLP profiles over HTTP; `http`: the HTTP client both use.
//!
//! Never stops, ptraces or writes to a target (the `allocs` profiler's rule); a target that
//! exits is dropped with one line on stderr, and the others go on.

pub mod containers;
pub mod http;
pub mod intervals;
pub mod labels;
pub mod otlp;
pub mod pprof_dir;
pub mod push_proto;
pub mod pyroscope;
pub mod queue;
pub mod targets;

use std::{
    path::Path,
    sync::{Arc, atomic::Ordering, mpsc},
    time::{Duration, Instant},
};

use clap::Parser as _;

use crate::{
    allocs,
    cli::{
        agent::{AgentArgs, AgentTarget},
        allocs::AllocsArgs,
    },
    error::{Error, Result},
    event_loop::End,
};
use intervals::{Intervals, Outlets, Sampling};
use queue::{Backend, Queue};
use targets::{Kind, Target};

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
    for t in &targets {
        allocs_args(args, &t.kind)?;
    }
    let containers_root = match args.target {
        Some(AgentTarget::AllContainers) => Some(match &args.cgroup_root {
            Some(root) => crate::cgroup::Cgroup::resolve(root)?.path,
            None => crate::cgroup::cgroup2_mounts()
                .into_iter()
                .next()
                .ok_or_else(|| Error::input("no cgroup2 filesystem is mounted on this machine"))?,
        }),
        None => None,
    };

    let mut backends: Vec<Box<dyn Backend>> = Vec::new();
    if let Some(url) = &args.pyroscope_url {
        backends.push(Box::new(pyroscope::Pyroscope::new(
            url,
            args.pyroscope_api,
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
        stopping: Default::default(),
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
        let (done_tx, done_rx) = mpsc::channel::<(Target, Result<End>)>();
        let outlets = &outlets;
        let spawn = |target: Target| -> Result<()> {
            let allocs_args = allocs_args(args, &target.kind)?;
            let done = done_tx.clone();
            std::thread::Builder::new()
                .name(format!("oi-agent-{}", target.short))
                .spawn_scoped(scope, move || {
                    let outcome = {
                        let mut intervals = Intervals::new(&target, outlets, sampling);
                        allocs::run_with(&allocs_args, &mut intervals)
                    };
                    let _ = done.send((target, outcome));
                })
                .map_err(|e| Error::internal(format!("starting a profiler: {e}")))?;
            Ok(())
        };
        let outcome = Watch {
            args,
            extra: &extra,
            outlets,
            containers_root: containers_root.as_deref(),
            started,
        }
        .run(targets, &spawn, &done_rx);
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

/// The main thread's loop: starts the targets' profilers (and, with `--target
/// all-containers`, those of containers found later, every interval), prints the status line
/// every interval, notices SIGINT, SIGTERM, SIGHUP and `--duration`, and waits for every
/// profiler to end.
struct Watch<'a> {
    args: &'a AgentArgs,
    extra: &'a [(String, String)],
    outlets: &'a Outlets,
    containers_root: Option<&'a Path>,
    started: Instant,
}

impl Watch<'_> {
    /// The agent failed only when no target could be profiled at all and none is looked for:
    /// then the first error is its own.
    fn run(
        &self,
        targets: Vec<Target>,
        spawn: &dyn Fn(Target) -> Result<()>,
        done: &mpsc::Receiver<(Target, Result<End>)>,
    ) -> Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| Error::internal(format!("starting the agent's loop: {e}")))?;
        runtime.block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            let registered = |e: std::io::Error| Error::internal(format!("watching signals: {e}"));
            // Before any profiler starts: a signal during a start-up is the agent's to handle.
            let mut sigint = signal(SignalKind::interrupt()).map_err(registered)?;
            let mut sigterm = signal(SignalKind::terminate()).map_err(registered)?;
            let mut sighup = signal(SignalKind::hangup()).map_err(registered)?;
            let mut running: Vec<Kind> = Vec::new();
            for t in targets {
                running.push(t.kind.clone());
                spawn(t)?;
            }
            let mut profiled = 0;
            let mut first_error: Option<Error> = None;
            let interval = self.args.interval;
            // After the profilers' own ticks, so that the line counts the interval just ended.
            let lag = Duration::from_millis(500).min(interval / 4);
            let mut next_status = Instant::now() + interval + lag;
            let mut next_scan = Instant::now();
            loop {
                let stopping = self.outlets.stopping.load(Ordering::Relaxed);
                if self.containers_root.is_some() && !stopping && Instant::now() >= next_scan {
                    next_scan = Instant::now() + interval;
                    self.scan(&mut running, spawn);
                }
                if running.is_empty() && (stopping || self.containers_root.is_none()) {
                    break;
                }
                tokio::select! {
                    biased;
                    _ = sigint.recv() => self.stop(),
                    _ = sigterm.recv() => self.stop(),
                    _ = sighup.recv() => self.stop(),
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                if self
                    .args
                    .duration
                    .is_some_and(|d| self.started.elapsed() >= d)
                {
                    self.stop();
                }
                while let Ok((target, outcome)) = done.try_recv() {
                    running.retain(|k| *k != target.kind);
                    match outcome {
                        Ok(End::TargetExited) => {
                            profiled += 1;
                            let what = if matches!(target.kind, Kind::Pid(_)) {
                                "exited"
                            } else {
                                "has no process left"
                            };
                            eprintln!(
                                "oi-trace: agent: {} {what}; dropped (its last, partial \
                                 interval is not delivered)",
                                target.place
                            );
                        }
                        Ok(_) => profiled += 1,
                        Err(e) => {
                            eprintln!("oi-trace: agent: {}: {e}; dropped", target.place);
                            first_error.get_or_insert(e);
                        }
                    }
                }
                if Instant::now() >= next_status {
                    next_status += interval;
                    eprintln!(
                        "oi-trace: agent: {} target(s): {}",
                        running.len(),
                        status_counts(self.outlets)
                    );
                }
            }
            match first_error {
                Some(e) if profiled == 0 && self.containers_root.is_none() => Err(e),
                _ => Ok(()),
            }
        })
    }

    /// From now on no profiler starts, and each one that has not seen the signal itself ends
    /// at its next housekeeping (`Intervals::end`).
    fn stop(&self) {
        self.outlets.stopping.store(true, Ordering::Relaxed);
    }

    /// Starts a profiler for every container cgroup that has none yet.
    fn scan(&self, running: &mut Vec<Kind>, spawn: &dyn Fn(Target) -> Result<()>) {
        let Some(root) = self.containers_root else {
            return;
        };
        for path in containers::discover(root) {
            let kind = Kind::Cgroup(path.clone());
            if running.contains(&kind) {
                continue;
            }
            let target =
                targets::cgroup_target(&path, self.args.service_name.as_deref(), self.extra, true);
            eprintln!("oi-trace: agent: found {}", target.place);
            match spawn(target) {
                Ok(()) => running.push(kind),
                Err(e) => eprintln!("oi-trace: agent: {}: {e}", path.display()),
            }
        }
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
fn allocs_args(args: &AgentArgs, kind: &Kind) -> Result<AllocsArgs> {
    #[derive(clap::Parser)]
    struct Allocs {
        #[command(flatten)]
        args: AllocsArgs,
    }
    let (flag, value) = match kind {
        Kind::Pid(pid) => ("--pid", pid.to_string()),
        Kind::Cgroup(path) => ("--cgroup", path.display().to_string()),
    };
    let mut argv: Vec<String> = vec![
        "allocs".into(),
        flag.into(),
        value,
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

//! `--global NAME`: the footprint of a global or namespace-scope variable (or a class's
//! static member), with no function probe: once, or every `--interval S` until `--count`,
//! `--duration` or Ctrl-C. (OI has this as its `global:` probes.)
//!
//! The variable is found as `--uprobe` finds a function (its symbol, by a qualified name, a
//! unique suffix or with anonymous namespaces left out), typed by DWARF, at its address plus
//! the file's load bias, and measured by the same plan, walkers and reports as a probe's
//! argument, labelled with its name:
//! - `--mode jit` (the default) interrupts one thread (the main one) for the walk and lets it
//!   go at once, as a sample of a probe does;
//! - `--mode remote` reads while the process runs: a structure being changed meanwhile may
//!   read torn, which stderr says once; `--stop-all` freezes every thread while it is read.
//!
//! Nothing of the trigger is loaded: no eBPF, no uprobe. The process is left as it was found:
//! our segments unmapped, every thread detached and running.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use oi_common::EntryRegs;

use super::{
    Probe, SignalSet,
    in_target::{Failure, InTarget},
    reporter::{Outputs, Reporter},
};
use crate::{
    cli::{Args, Mode},
    debuginfo::{
        Binary, dwarf,
        symbols::{self, Query, VariableSymbol},
    },
    error::{Error, Result},
    footprint::audit::Audit,
    footprint::measure::{Measurer, RootStream},
    inferior::{ProcessInfo, Tracer, procfs},
    interp::RemoteReader,
    privileges,
};

/// One variable, found and planned.
struct Global {
    name: String,
    measurer: Arc<Measurer>,
    /// Load bias of the file that defines it.
    bias: u64,
}

pub fn run(args: &Args) -> Result<()> {
    let Some(pid) = args.pid else {
        return Err(Error::input(
            "--global needs --pid (a cgroup has no one address space)",
        ));
    };
    privileges::check_footprints().map_err(Error::input)?;
    ProcessInfo::inspect(pid)?;
    if let Some((tracer, name)) = ProcessInfo::tracer_of(pid) {
        return Err(Error::input(format!(
            "pid {pid} is already traced by pid {tracer} ({name})"
        )));
    }
    let features = args.plan_features().map_err(Error::input)?;
    let globals = args
        .global
        .iter()
        .map(|name| find(pid, name, &features))
        .collect::<Result<Vec<_>>>()?;
    let mut warned = std::collections::HashSet::new();
    for w in globals.iter().flat_map(|g| &g.measurer.plan().warnings) {
        if warned.insert(w) {
            eprintln!("oi-trace: warning: {w}");
        }
    }
    let signals = SignalSet::block()?;
    let outputs = Outputs::from_args(args).map_err(Error::input)?;
    let mut reporter = Reporter::start(outputs)
        .map_err(|e| Error::internal(format!("starting the report thread: {e}")))?;
    let mut walker = Walker::new(args, pid, &globals)?;
    if args.mode == Mode::Remote && !args.stop_all {
        eprintln!(
            "oi-trace: note: --mode remote reads pid {pid} while it runs: a structure it changes \
             meanwhile may read torn (--stop-all freezes it while it is read)"
        );
    }
    let every = args.interval.map(Duration::from_secs_f64);
    let deadline = args
        .duration
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    let count = args
        .count
        .unwrap_or(if every.is_some() { u64::MAX } else { 1 });
    let mut failed = 0;
    let mut taken = 0;
    let result = (|| -> Result<()> {
        while taken < count {
            taken += 1;
            for (i, g) in globals.iter().enumerate() {
                match walker.walk(i, g) {
                    Ok(streams) => reporter.submit(
                        (pid, pid, taken),
                        (i, &g.name),
                        g.measurer.clone(),
                        streams,
                    ),
                    Err(Failure::Sample(e)) => {
                        failed += 1;
                        eprintln!("oi-trace: error: {} in pid {pid}: {e}", g.name);
                    }
                    Err(Failure::Gone | Failure::Exec) => {
                        return Err(Error::sample("target exited"));
                    }
                }
            }
            let Some(every) = every.filter(|_| taken < count) else {
                break;
            };
            // Wait for the next round, a signal to stop, or the deadline.
            let next = Instant::now() + every;
            loop {
                if signals.take_termination() {
                    return Ok(());
                }
                let now = Instant::now();
                if deadline.is_some_and(|d| now >= d) {
                    return Ok(());
                }
                if now >= next {
                    break;
                }
                std::thread::sleep((next - now).min(Duration::from_millis(20)));
            }
        }
        Ok(())
    })();
    walker.finish();
    for written in reporter.finish() {
        if let Err(e) = written.result {
            failed += 1;
            eprintln!("oi-trace: error: report of pid {pid}: {}", e.why);
        }
    }
    reporter.outputs().map_err(Error::sample)?;
    result?;
    if failed > 0 {
        return Err(Error::sample(format!(
            "{failed} of {taken} snapshots failed"
        )));
    }
    Ok(())
}

/// The variable `name` in the files `pid` maps: its type, address and plan. Found as
/// `--uprobe` finds a function: by the symbol tables, with a unique suffix or the anonymous
/// namespaces left out (`hidden` for `shop::(anonymous namespace)::hidden`), an error listing
/// the candidates when several variables fit as well; then its type from DWARF. A file
/// without symbol tables falls back to DWARF's qualified names alone.
fn find(pid: i32, name: &str, features: &[String]) -> Result<Global> {
    let maps = procfs::mappings(pid)?;
    let query = Query::parse(name);
    let mut files = Vec::new();
    for file in procfs::executable_files(pid)? {
        let Ok(binary) = Binary::open(&file.host) else {
            continue;
        };
        let found = symbols::find_variables(&binary, &query).unwrap_or_default();
        files.push((file, binary, found));
    }
    let best = files
        .iter()
        .flat_map(|(_, _, found)| found.iter().map(|v| v.fit))
        .min();
    let chosen: Vec<(usize, &VariableSymbol)> = files
        .iter()
        .enumerate()
        .flat_map(|(i, (_, _, found))| found.iter().map(move |v| (i, v)))
        .filter(|(_, v)| Some(v.fit) == best)
        .collect();
    if chosen.len() > 1 {
        let listed: Vec<String> = chosen
            .iter()
            .map(|(i, v)| {
                let path = files[*i].0.target.display();
                format!("{} [{}] in {path}", v.demangled, v.mangled)
            })
            .collect();
        return Err(Error::input(format!(
            "--global {name:?} is ambiguous in pid {pid}, {} candidates: {} (qualify the name)",
            listed.len(),
            listed.join("; ")
        )));
    }
    let mut files_without_dwarf = Vec::new();
    for (i, (file, binary, _)) in files.iter().enumerate() {
        let symbol = chosen.iter().find(|(at, _)| *at == i).map(|(_, v)| *v);
        if !chosen.is_empty() && symbol.is_none() {
            continue;
        }
        let found = dwarf::with_debug_info(binary, |di| {
            let (qualified, at) = match symbol {
                Some(v) => (v.demangled.as_str(), Some(v.address)),
                None => (name, None),
            };
            let vars = di.global_variables(qualified)?;
            let Some(&(ty, address)) = vars
                .iter()
                .find(|(_, address)| at.is_none_or(|a| a == *address))
            else {
                return Ok(None);
            };
            let label = symbol.map_or(name, |v| v.demangled.as_str());
            Measurer::for_global(binary, di, ty, address, label, features).map(Some)
        });
        let measurer = match found {
            Ok(Ok(Some(m))) => m,
            Ok(Ok(None)) => match symbol {
                Some(v) => {
                    return Err(Error::input(format!(
                        "--global {name}: {} (at {:#x} in {}) has no variable of that name in the \
                         debug information",
                        v.demangled,
                        v.address,
                        file.target.display()
                    )));
                }
                None => continue,
            },
            Ok(Err(e)) => return Err(Error::input(format!("--global {name}: {e}"))),
            Err(_) => {
                files_without_dwarf.push(file.target.display().to_string());
                continue;
            }
        };
        let bias = maps
            .iter()
            .filter(|m| m.path == file.target)
            .find_map(|m| binary.load_bias(m.start, m.offset))
            .ok_or_else(|| {
                Error::internal(format!("no load bias for {}", file.target.display()))
            })?;
        return Ok(Global {
            name: name.to_string(),
            measurer: Arc::new(measurer),
            bias,
        });
    }
    let without = if files_without_dwarf.is_empty() {
        String::new()
    } else {
        format!(
            " (without debug information: {})",
            files_without_dwarf.join(", ")
        )
    };
    Err(Error::input(format!(
        "no global variable {name:?} with a fixed address in the files pid {pid} maps{without}"
    )))
}

/// One snapshot read with process_vm_readv, with every thread stopped meanwhile when a
/// `tracer` is given.
fn read_from_outside(
    pid: i32,
    g: &Global,
    mut tracer: Option<&mut Tracer>,
) -> std::result::Result<Vec<RootStream>, Failure> {
    if let Some(t) = tracer.as_mut() {
        t.stop_all(pid).map_err(|_| Failure::Gone)?;
    }
    let walked = g
        .measurer
        .walk_streams(&EntryRegs::default(), g.bias, &RemoteReader::new(pid));
    if let Some(t) = tracer {
        t.resume_all(pid);
    }
    walked.map_err(|e| gone_or(pid, e))
}

/// A failed read from outside: the process is gone, or the snapshot failed.
fn gone_or(pid: i32, e: impl std::fmt::Display) -> Failure {
    if procfs::is_alive(pid) {
        Failure::Sample(Error::sample(e.to_string()))
    } else {
        Failure::Gone
    }
}

/// How snapshots are taken, per `--mode` and `--stop-all`.
enum Walker {
    /// Inside the target, on one of its threads, interrupted outside a system call.
    Jit {
        pid: i32,
        tracer: Tracer,
        in_target: Box<InTarget>,
        /// Whether stderr was told that a snapshot had to be read from outside.
        said_remote: bool,
    },
    /// From outside; with `tracer`, every thread stopped while it reads.
    Remote { pid: i32, tracer: Option<Tracer> },
}

impl Walker {
    fn new(args: &Args, pid: i32, globals: &[Global]) -> Result<Self> {
        Ok(match args.mode {
            Mode::Jit => {
                let mut probes: Vec<Probe> = globals
                    .iter()
                    .map(|g| Probe {
                        symbol: g.name.clone(),
                        is_return: false,
                        sites: Vec::new(),
                        notes: Vec::new(),
                        hints: Vec::new(),
                        measurers: vec![g.measurer.clone()],
                        plans_cached: 0,
                        walkers_cached: 0,
                    })
                    .collect();
                let in_target = Box::new(InTarget::prepare(
                    &mut probes,
                    Duration::from_secs_f64(args.walk_timeout),
                    Audit::new(args.audit_log.as_deref()).map_err(Error::input)?,
                )?);
                let mut tracer = Tracer::default();
                tracer.seize(pid)?;
                Self::Jit {
                    pid,
                    tracer,
                    in_target,
                    said_remote: false,
                }
            }
            Mode::Remote if args.stop_all => {
                let mut tracer = Tracer::default();
                tracer.seize(pid)?;
                Self::Remote {
                    pid,
                    tracer: Some(tracer),
                }
            }
            Mode::Remote => Self::Remote { pid, tracer: None },
        })
    }

    /// One snapshot of global `index`.
    fn walk(&mut self, index: usize, g: &Global) -> std::result::Result<Vec<RootStream>, Failure> {
        let regs = EntryRegs::default();
        match self {
            Self::Jit {
                pid,
                tracer,
                in_target,
                said_remote,
            } => {
                let caught = tracer
                    .stop_outside_syscall(*pid, Duration::from_millis(500))
                    .map_err(|_| Failure::Gone)?;
                if let Some(tid) = caught {
                    return in_target.sample(
                        (*pid, tid),
                        (index, 0),
                        &g.measurer,
                        &regs,
                        g.bias,
                        &mut || {},
                    );
                }
                // Every thread sits in system calls (a server waiting for work): read from
                // outside with all of them stopped, as --mode remote --stop-all would.
                if !*said_remote {
                    *said_remote = true;
                    eprintln!(
                        "oi-trace: note: no thread of pid {pid} was caught outside a system call \
                         within 0.5 s; reading from outside with every thread stopped"
                    );
                }
                read_from_outside(*pid, g, Some(tracer))
            }
            Self::Remote { pid, tracer } => read_from_outside(*pid, g, tracer.as_mut()),
        }
    }

    /// Unmaps our segments and detaches from every thread, leaving each running.
    fn finish(self) {
        match self {
            Self::Jit {
                pid,
                mut tracer,
                mut in_target,
                ..
            } => {
                let mut held = None;
                let mut unmap = |tid| held = in_target.unmap(pid, tid).map(|h| (tid, h));
                tracer.release_with(pid, &|_| false, &mut unmap);
                if let Some((tid, mut signals)) = held {
                    signals.redeliver(pid, tid);
                }
            }
            Self::Remote {
                pid,
                tracer: Some(mut tracer),
            } => tracer.release(pid),
            Self::Remote { tracer: None, .. } => {}
        }
    }
}

//! One run of oi-trace: resolve the probes, seize the targets, arm the trigger, then serve
//! events until the count, the duration, a signal or the target's exit ends it — and always
//! leave every target thread detached and running.

mod arm;
mod globals;
mod in_target;
mod logs;
mod reporter;
mod sample;
mod serve;
mod summary;

use std::{
    collections::HashMap,
    os::fd::{AsFd as _, BorrowedFd},
    sync::Arc,
    time::{Duration, Instant},
};

use nix::{
    poll::{PollFd, PollFlags, PollTimeout, poll},
    sys::{
        signal::{SigSet, Signal},
        signalfd::{SfdFlags, SignalFd},
    },
};
use oi_common::{EntryRegs, Event, ProbeConfig, ProbeCounters, event, filter, flags, point};

use crate::resolve::{self, BinaryCache, Resolved};
use crate::{
    cgroup::Cgroup,
    cli::{Args, Mode},
    debuginfo::{code, points::PointKind},
    error::{Error, Result},
    footprint::audit::Audit,
    footprint::measure::{MeasureError, Measurer},
    footprint::plan_cache::{PlanCache, Source},
    footprint::trigger::{AttachPoint, Trigger},
    guardian::Guardian,
    inferior::{ProcessInfo, Stop, Tracer, procfs, remote},
    interp::RemoteReader,
    privileges,
    probe::monotonic_ns,
};
use arm::{prepare_measurers, resolve_probes};
use in_target::{Failure, InTarget, Phases};
use logs::{Logs, SampleRecord};
use reporter::{BACKLOG, Reporter, Written};
use serve::alive_after_exec;
use summary::describe_points;

/// What the user asked to trace.
enum Scope {
    Pid(ProcessInfo),
    Cgroup(Cgroup),
}

/// One `--uprobe` / `--uretprobe`, with the files it is attached to.
pub struct Probe {
    pub symbol: String,
    pub is_return: bool,
    /// One site per distinct file (more than one only with --cgroup), each with its points:
    /// its entry, or (return probes) every instruction that returns from it.
    pub sites: Vec<Resolved>,
    /// What the user should know about how the points were chosen, said once when armed.
    pub notes: Vec<String>,
    /// Why the probe may get no hits (copies nothing calls, copies not probed): repeated in
    /// one hint line if it gets none within 10 s (or `--duration`).
    pub hints: Vec<String>,
    /// The walk of the requested arguments, per site; empty with --count-only.
    pub measurers: Vec<Arc<Measurer>>,
    /// How many sites' plans came from the plan cache, and their walkers from the walker
    /// cache (reported in `--summary`: a warm run does no DWARF or Cranelift work).
    pub plans_cached: usize,
    pub walkers_cached: usize,
}

/// Why the event loop ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    Done,
    TargetExited,
    /// The target replaced its program (the path of the new one): its probes are gone.
    TargetExec(String),
}

pub fn run(args: &Args) -> Result<()> {
    args.validate().map_err(Error::input)?;
    crate::debuginfo::dwarf::set_max_debuginfo_mb(args.max_debuginfo_mb);
    if !args.global.is_empty() {
        return globals::run(args);
    }
    privileges::check_footprints().map_err(Error::input)?;
    let scope = match (args.pid, &args.cgroup) {
        (Some(pid), _) => {
            let info = ProcessInfo::inspect(pid)?;
            // Sampling needs ptrace, and a process has one tracer at most: say who holds it
            // before anything is loaded. (Counting only needs no ptrace.)
            if !args.count_only
                && let Some((tracer, name)) = ProcessInfo::tracer_of(pid)
            {
                return Err(Error::input(format!(
                    "pid {pid} is already traced by pid {tracer} ({name})"
                )));
            }
            Scope::Pid(info)
        }
        (None, Some(path)) => Scope::Cgroup(Cgroup::resolve(path)?),
        (None, None) => return Err(Error::input("give --pid PID or --cgroup PATH")),
    };
    let mut probes = resolve_probes(args, &scope)?;
    if !args.count_only {
        prepare_measurers(args, &mut probes)?;
    }
    // Block the signals we wait for before anything can send them (SIGCHLD: ptrace stops).
    let signals = SignalSet::block()?;
    // Forked before any eBPF object or thread exists (it must hold neither).
    let guardian = if args.count_only {
        None
    } else {
        Some(
            Guardian::spawn()
                .map_err(|e| Error::internal(format!("starting the guardian: {e}")))?,
        )
    };
    let trigger = Trigger::load()?;
    let outputs = reporter::Outputs::from_args(args).map_err(Error::input)?;
    let in_target = match (args.mode, args.count_only) {
        (Mode::Jit, false) => Some(InTarget::prepare(
            &mut probes,
            Duration::from_secs_f64(args.walk_timeout),
            Audit::new(args.audit_log.as_deref()).map_err(Error::input)?,
        )?),
        _ => None,
    };
    let probe_count = probes.len();
    let mut session = Session {
        sampling: !args.count_only,
        every: args.every,
        count: args.count,
        probes,
        scope,
        trigger,
        tracer: Tracer::default(),
        pending: HashMap::new(),
        samples: 0,
        failed_samples: 0,
        nothing_measured: 0,
        failures: vec![Failures::default(); probe_count],
        cancelled: vec![0; probe_count],
        sites: HashMap::new(),
        in_target,
        reporter: Reporter::start(outputs)
            .map_err(|e| Error::internal(format!("starting the report thread: {e}")))?,
        deferred_busy: Vec::new(),
        guardian,
        logs: Logs::open(args)?,
        armed_at: Instant::now(),
        hinted: false,
        verbose: args.verbose,
    };
    let deadline = args
        .duration
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    let armed = session.arm();
    let was_armed = armed.is_ok();
    if was_armed
        && session.sampling
        && let Scope::Pid(info) = &session.scope
    {
        // What the first sample needs that the kept capabilities would not give.
        if let Some(in_target) = session.in_target.as_mut() {
            in_target.find_bootstrap(info.pid);
        }
        // Everything is loaded and attached, and one process never asks for more: keep what
        // tracing it takes (ptrace, resuming it, reading its files and writing our outputs).
        privileges::keep_only(privileges::AFTER_ARMING);
    }
    let result = armed.and_then(|()| session.serve(&signals, deadline));
    session.shutdown();
    // A target refused while arming (already traced) is bad input: its one line says it all.
    if was_armed {
        session.print_summary()?;
    }
    // Pictures and the growth table, written at exit by the report thread.
    let outputs = session.reporter.outputs().map_err(Error::sample);
    match result? {
        End::TargetExited => Err(Error::sample("target exited")),
        End::TargetExec(program) => Err(Error::sample(format!(
            "target exited (it executed {program})"
        ))),
        End::Done
            if session.failed_samples > 0 && session.nothing_measured == session.failed_samples =>
        {
            // OI's words too, for whoever looks for them (oid exits 6 with this line).
            Err(Error::NothingMeasured(format!(
                "{} of {} samples measured none of their arguments (Nothing to output: failed \
                 to run TreeBuilder on any argument)",
                session.failed_samples, session.samples
            )))
        }
        End::Done if session.failed_samples > 0 => Err(Error::sample(format!(
            "{} of {} samples failed",
            session.failed_samples, session.samples
        ))),
        End::Done => outputs,
    }
}

struct Session {
    sampling: bool,
    every: u64,
    count: Option<u64>,
    probes: Vec<Probe>,
    scope: Scope,
    trigger: Trigger,
    tracer: Tracer,
    /// Sample events whose thread has not reported its SIGSTOP yet, by tid.
    pending: HashMap<i32, Event>,
    samples: u64,
    failed_samples: u64,
    /// Of the failed samples, those of several arguments none of which could be measured.
    nothing_measured: u64,
    /// Per probe, for `--summary`.
    failures: Vec<Failures>,
    /// Samples the kernel side started (counted `sampled`) that this run let go unmeasured
    /// because it was ending, per probe: reported as dropped, so `sampled` is what was printed.
    cancelled: Vec<u64>,
    /// (tgid, probe, rip of the hit) → (index of the site hit, its load bias there).
    sites: HashMap<(i32, u32, u64), (usize, u64)>,
    /// `--mode jit`: walkers compiled for the target, and what each process carries of ours.
    in_target: Option<InTarget>,
    /// Decodes and prints samples off the sampling path.
    reporter: Reporter,
    /// Processes kept busy until the report backlog shrinks.
    deferred_busy: Vec<i32>,
    /// Resumes the targets if we die by SIGKILL (None with --count-only: nothing is frozen).
    guardian: Option<Guardian>,
    logs: Logs,
    /// When the probes were armed, and whether the no-hit hint was given.
    armed_at: Instant,
    hinted: bool,
    /// `-v`: per-sample timings on stderr.
    verbose: bool,
}

/// What failed of one probe's samples, for `--summary`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Failures {
    /// Samples that printed nothing (the walk, its report or the thread failed).
    pub samples: u64,
    /// Roots printed as failed (`{}` in JSON) beside measured ones; a sample that measured
    /// none of its roots counts in `samples` instead.
    pub roots: u64,
    /// The most bytes one sample had in unions that were not walked (opaque): a footprint
    /// that may be incomplete.
    pub unions: u64,
}

/// When a sample's thread was let go, and how long its walk took.
#[derive(Default)]
struct Timing {
    resumed_ns: u64,
    walk_us: u64,
    /// `--mode jit`: the walk alone, timed inside the target by the stub.
    in_target_ns: Option<u64>,
    /// `--mode jit`: when the pause's parts ended.
    phases: Option<Phases>,
}

/// SIGINT, SIGTERM, SIGHUP and SIGCHLD, blocked and read through a signalfd.
struct SignalSet {
    fd: SignalFd,
}

impl SignalSet {
    fn block() -> Result<Self> {
        let mut set = SigSet::empty();
        for s in [
            Signal::SIGINT,
            Signal::SIGTERM,
            Signal::SIGHUP,
            Signal::SIGCHLD,
        ] {
            set.add(s);
        }
        set.thread_block()
            .map_err(|e| Error::internal(format!("sigprocmask: {e}")))?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .map_err(|e| Error::internal(format!("signalfd: {e}")))?;
        Ok(Self { fd })
    }

    /// Reads every queued signal; true if one asks us to stop.
    fn take_termination(&self) -> bool {
        let mut stop = false;
        while let Ok(Some(info)) = self.fd.read_signal() {
            stop |= info.ssi_signo != Signal::SIGCHLD as u32;
        }
        stop
    }
}

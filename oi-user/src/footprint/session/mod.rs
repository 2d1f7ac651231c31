//! One run of oi-trace: resolve the probes, seize the targets, arm the trigger, then serve
//! events until the count, the duration, a signal or the target's exit ends it — and always
//! leave every target thread detached and running.

mod globals;
mod in_target;
mod logs;
mod reporter;

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
    inferior::{ProcessInfo, Stop, Tracer, guardian::Guardian, procfs, remote},
    interp::RemoteReader,
    privileges,
    probe::monotonic_ns,
};
use in_target::{Failure, InTarget, Phases};
use logs::{Logs, SampleRecord};
use reporter::{BACKLOG, Reporter, Written};

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

/// Reads the DWARF and plans the walk of every probe's arguments, before anything is armed:
/// a missing argument or missing debug info is bad input, found before the target is touched.
/// A copy of the function where a requested argument has no location is left out, with a
/// note (and a hint, should the probe get no hits); if that leaves none, it is the error.
fn prepare_measurers(args: &Args, probes: &mut [Probe]) -> Result<()> {
    let features = args.plan_features().map_err(Error::input)?;
    let cache = PlanCache::new(PlanCache::default_disk());
    // Shipped descriptions that did not fit: each said once, however many plans met it.
    let mut warned = std::collections::BTreeSet::new();
    for probe in probes {
        let mut kept = Vec::new();
        let mut first_error = None;
        for site in probe.sites.drain(..) {
            let at = site.copy_at();
            let built = cache.get_or_build(
                &site.binary,
                &site.symbol,
                at.as_ref(),
                &args.arg,
                &features,
                probe.is_return,
            );
            let built = built.and_then(|(measurer, source)| {
                match overwritten_vector_argument(&site, &measurer) {
                    Some(reason) => Err(MeasureError::Unavailable {
                        arg: reason.0,
                        function: site.symbol.demangled.clone(),
                        reason: reason.1,
                    }),
                    None => Ok((measurer, source)),
                }
            });
            match built {
                Ok((measurer, source)) => {
                    for w in &measurer.plan().warnings {
                        if warned.insert(w.clone()) {
                            eprintln!("oi-trace: warning: {w}");
                        }
                    }
                    probe.plans_cached += usize::from(source == Source::Cache);
                    probe.measurers.push(Arc::new(measurer));
                    kept.push(site);
                }
                Err(e @ MeasureError::Unavailable { .. }) if site.copy_at().is_some() => {
                    let MeasureError::Unavailable { arg, reason, .. } = &e else {
                        unreachable!("matched above")
                    };
                    let note = format!(
                        "{} is not probed: `{arg}` cannot be measured there: {reason}",
                        site.symbol.demangled
                    );
                    probe.notes.push(note.clone());
                    probe.hints.push(note);
                    first_error.get_or_insert(Error::input(e.to_string()));
                }
                Err(e) => {
                    let msg = format!("{}: {e}", site.symbol.demangled);
                    return Err(if e.is_bad_input() {
                        Error::input(msg)
                    } else {
                        Error::internal(msg)
                    });
                }
            }
        }
        if kept.is_empty()
            && let Some(e) = first_error
        {
            return Err(e);
        }
        probe.sites = kept;
    }
    Ok(())
}

/// An argument in an xmm register that the probed instruction itself overwrites (it runs
/// before the thread stops, see `code::xmm_written`): the argument and why it cannot be read.
fn overwritten_vector_argument(site: &Resolved, measurer: &Measurer) -> Option<(String, String)> {
    site.points
        .iter()
        .filter(|p| p.kind == PointKind::Entry)
        .find_map(|p| {
            let start = usize::try_from(p.file_offset).ok()?;
            let bytes = site.binary.bytes().get(start..)?;
            let bytes = &bytes[..bytes.len().min(15)];
            let (mask, insn) = code::xmm_written(bytes, p.address)?;
            let (arg, n) = measurer.arg_in_vector_registers(mask)?;
            Some((
                arg.to_string(),
                format!(
                    "it is in xmm{n}, which the probed instruction `{insn}` overwrites before \
                     the thread can be stopped (the eBPF side cannot read vector registers)"
                ),
            ))
        })
}

/// `shop::tally_a, shop::tally_b`: where the inlined copies among `sites` are.
fn inlined_places(sites: &[&Resolved]) -> String {
    let mut places: Vec<String> = sites
        .iter()
        .filter_map(|s| match &s.copy {
            resolve::Copy::Inlined { into: Some(f), .. } => Some(format!("in {f}")),
            _ => None,
        })
        .collect();
    places.dedup();
    places.join(", ")
}

fn resolve_probes(args: &Args, scope: &Scope) -> Result<Vec<Probe>> {
    let mut cache = BinaryCache::default();
    let specs = args
        .uprobe
        .iter()
        .map(|s| (s, false))
        .chain(args.uretprobe.iter().map(|s| (s, true)));
    let mut probes = Vec::new();
    for (symbol, is_return) in specs {
        let sites = match scope {
            Scope::Pid(info) => {
                let place = format!("pid {} ({})", info.pid, info.comm);
                let found = resolve::in_process(&mut cache, info.pid, symbol)?;
                if found.is_empty() {
                    return Err(resolve::not_found(&mut cache, info.pid, symbol, &place));
                }
                resolve::one_function(symbol, &place, found)?
            }
            Scope::Cgroup(cgroup) => resolve_in_cgroup(&mut cache, args, cgroup, symbol)?,
        };
        let mut sites = sites;
        let copies = sites.len();
        let mut notes = resolve::place_all(&mut sites, is_return)
            .map_err(|e| Error::input(format!("{symbol}: {e}")))?;
        // Why this probe might never fire: said once now, and again if it does not.
        let mut hints = resolve::unreachable_notes(&sites);
        let inlined: Vec<&Resolved> = sites
            .iter()
            .filter(|s| matches!(s.copy, resolve::Copy::Inlined { .. }))
            .collect();
        if !inlined.is_empty() && inlined.len() == sites.len() && !is_return {
            hints.push(format!(
                "{symbol} has no out-of-line copy: it is only inlined, at {} place(s) ({})",
                inlined.len(),
                inlined_places(&inlined)
            ));
        }
        notes.extend(hints.iter().cloned());
        let _ = copies;
        probes.push(Probe {
            symbol: symbol.clone(),
            is_return,
            sites,
            notes,
            hints,
            measurers: Vec::new(),
            plans_cached: 0,
            walkers_cached: 0,
        });
    }
    if probes.len() > oi_common::MAX_PROBES as usize {
        return Err(Error::input(format!(
            "at most {} probes at once",
            oi_common::MAX_PROBES
        )));
    }
    Ok(probes)
}

/// One site per distinct file that defines `symbol`, among the cgroup's processes and the
/// `--binary` files; each must define it exactly once.
fn resolve_in_cgroup(
    cache: &mut BinaryCache,
    args: &Args,
    cgroup: &Cgroup,
    symbol: &str,
) -> Result<Vec<Resolved>> {
    let mut sites: Vec<Resolved> = Vec::new();
    let mut add = |found: Vec<Resolved>, place: String| -> Result<()> {
        if found.is_empty() {
            return Ok(());
        }
        let copies = resolve::one_function(symbol, &place, found)?;
        if let Some(file) = copies.first().map(|c| c.file_id)
            && !sites.iter().any(|s| s.file_id == file)
        {
            sites.extend(copies);
        }
        Ok(())
    };
    let query = crate::debuginfo::symbols::Query::parse(symbol);
    for path in &args.binary {
        let found = resolve::in_file(cache, path, path, &query)?;
        if found.is_empty() {
            return Err(Error::input(format!(
                "symbol {symbol:?} not found in {}",
                path.display()
            )));
        }
        add(found, path.display().to_string())?;
    }
    for pid in cgroup.processes() {
        // Processes that exit or that we cannot read are not ours to trace.
        let Ok(found) = resolve::in_process(cache, pid, symbol) else {
            continue;
        };
        add(found, format!("pid {pid}"))?;
    }
    if sites.is_empty() {
        return Err(Error::input(format!(
            "symbol {symbol:?} not found in any process of cgroup {} (use --binary PATH to arm \
             it for processes that start later)",
            cgroup.path.display()
        )));
    }
    Ok(sites)
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

impl Session {
    /// Seizes the targets (when sampling), then configures and attaches every probe.
    fn arm(&mut self) -> Result<()> {
        let (filter, tgid, cgroup_id, cgroup_level) = match &self.scope {
            Scope::Pid(info) => (filter::PID, info.pid as u32, 0, 0),
            Scope::Cgroup(c) => (filter::CGROUP, 0, c.id, c.level),
        };
        if self.sampling {
            let initial: Vec<i32> = match &self.scope {
                Scope::Pid(info) => vec![info.pid],
                Scope::Cgroup(c) => c
                    .processes()
                    .into_iter()
                    .filter(|&pid| self.maps_a_site(pid))
                    .collect(),
            };
            for tgid in initial {
                self.seize(tgid)?;
            }
        }
        let config = ProbeConfig {
            every: self.every,
            cgroup_id,
            cgroup_level,
            tgid,
            filter,
            flags: if self.sampling { 0 } else { flags::COUNT_ONLY },
        };
        let pid = match &self.scope {
            Scope::Pid(info) => Some(info.pid as u32),
            Scope::Cgroup(_) => None,
        };
        for (index, probe) in self.probes.iter().enumerate() {
            for site in &probe.sites {
                for p in &site.points {
                    let point = AttachPoint {
                        path: site.host_path.clone(),
                        file_offset: p.file_offset,
                        flags: if p.kind.can_sample() {
                            0
                        } else {
                            point::NO_SAMPLE
                        },
                        pid,
                    };
                    self.trigger.attach(index as u32, config, &point)?;
                }
            }
        }
        let what = match &self.scope {
            Scope::Pid(info) => format!("pid {} ({})", info.pid, info.comm),
            Scope::Cgroup(c) => format!("cgroup {} (id {})", c.path.display(), c.id),
        };
        for note in self.probes.iter().flat_map(|p| &p.notes) {
            eprintln!("oi-trace: note: {note}");
        }
        let names: Vec<String> = self.probes.iter().map(describe_points).collect();
        eprintln!(
            "oi-trace: attached {} probe(s) to {what}: {}",
            self.probes.len(),
            names.join(", ")
        );
        Ok(())
    }

    fn maps_a_site(&self, pid: i32) -> bool {
        let Ok(files) = procfs::executable_files(pid) else {
            return false;
        };
        files
            .iter()
            .filter_map(|f| procfs::file_id(&f.host))
            .any(|id| {
                self.probes
                    .iter()
                    .flat_map(|p| &p.sites)
                    .any(|s| s.file_id == id)
            })
    }

    fn seize(&mut self, tgid: i32) -> Result<()> {
        if let Some(guardian) = &mut self.guardian {
            guardian.watch(tgid);
        }
        self.tracer.seize(tgid)?;
        self.trigger.mark_seized(tgid)
    }

    /// One line per probe that has had no hit since it was armed: what may keep it silent.
    fn hint_if_silent(&mut self) {
        self.hinted = true;
        let waited = self.armed_at.elapsed().as_secs_f64();
        for (i, probe) in self.probes.iter().enumerate() {
            if self.trigger.counters(i as u32).hits > 0 {
                continue;
            }
            let points: usize = probe.sites.iter().map(|s| s.points.len()).sum();
            let why = if probe.hints.is_empty() {
                format!(
                    "all {points} point(s) are armed; the code may not be running (check that \
                     the process reaches it)"
                )
            } else {
                probe.hints.join("; ")
            };
            eprintln!(
                "oi-trace: hint: {}: no hits in {waited:.0} s: {why}; probing a caller may see \
                 its work",
                probe.symbol
            );
        }
    }

    fn count_reached(&self) -> bool {
        self.count.is_some_and(|c| self.samples >= c)
    }

    /// The sample about to be taken in `tgid` is the last one `--count` allows: from here on
    /// no process may start another (each stays marked busy, so its Nth hits are dropped and
    /// no SIGSTOP of ours is sent after this one), and the run ends once it is printed.
    fn last_sample(&mut self, tgid: i32) -> bool {
        if self.count.is_none_or(|c| self.samples + 1 < c) {
            return false;
        }
        let processes: Vec<i32> = self.tracer.processes().collect();
        for other in processes {
            if other != tgid {
                self.trigger.hold_busy(other, false);
            }
        }
        true
    }

    /// The event loop: ring buffer, ptrace stops (SIGCHLD), our own signals, the deadline.
    fn serve(&mut self, signals: &SignalSet, deadline: Option<Instant>) -> Result<End> {
        self.armed_at = Instant::now();
        loop {
            if self.count_reached() {
                return Ok(End::Done);
            }
            if !self.hinted && self.armed_at.elapsed() >= HINT_AFTER {
                self.hint_if_silent();
            }
            let timeout = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        if !self.hinted {
                            self.hint_if_silent();
                        }
                        return Ok(End::Done);
                    }
                    left.min(Duration::from_millis(100))
                }
                None => Duration::from_millis(100),
            };
            let events_fd = self.trigger.events_fd();
            // SAFETY: the ring buffer's fd stays open for the life of `self.trigger`.
            let ring = unsafe { BorrowedFd::borrow_raw(events_fd) };
            let mut fds = [
                PollFd::new(signals.fd.as_fd(), PollFlags::POLLIN),
                PollFd::new(ring, PollFlags::POLLIN),
                PollFd::new(self.reporter.wake_fd(), PollFlags::POLLIN),
            ];
            let ms = u16::try_from(timeout.as_millis().max(1)).unwrap_or(u16::MAX);
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(Error::internal(format!("poll: {e}"))),
            }
            if signals.take_termination() {
                return Ok(End::Done);
            }
            self.collect_reports();
            self.drain_events();
            if let Some(end) = self.handle_stops()? {
                return Ok(end);
            }
            if let Scope::Pid(info) = &self.scope
                && !self.sampling
                && !procfs::is_alive(info.pid)
            {
                return Ok(End::TargetExited);
            }
        }
    }

    fn drain_events(&mut self) {
        while let Some(ev) = self.trigger.next_event() {
            match ev.kind {
                event::SAMPLE => {
                    self.pending.insert(ev.tid as i32, ev);
                }
                event::NEW_PROCESS if self.sampling => {
                    let tgid = ev.tgid as i32;
                    if !self.tracer.holds(tgid)
                        && let Err(e) = self.seize(tgid)
                    {
                        eprintln!("oi-trace: warning: new process {tgid} not traced: {e}");
                    }
                }
                _ => {}
            }
        }
    }

    fn handle_stops(&mut self) -> Result<Option<End>> {
        for stop in self.tracer.poll() {
            match stop {
                Stop::Signal {
                    tid,
                    tgid,
                    signal: Signal::SIGSTOP,
                } => {
                    if !self.pending.contains_key(&tid) {
                        // The event is always submitted before the signal is delivered.
                        self.drain_events();
                    }
                    match self.pending.remove(&tid) {
                        // A sample started before the count was reached, seen after: let
                        // its thread go unmeasured (our SIGSTOP suppressed).
                        Some(ev) if self.count_reached() => {
                            self.cancelled[ev.probe as usize] += 1;
                            self.tracer.resume(tid, None);
                        }
                        Some(ev) => self.sample(ev, tid, tgid)?,
                        // Somebody else's SIGSTOP: deliver it (the process stops, as it should).
                        None => self.tracer.resume(tid, Some(Signal::SIGSTOP)),
                    }
                }
                Stop::Signal { tid, signal, .. } => self.tracer.resume(tid, Some(signal)),
                Stop::ProcessExited { tgid } => {
                    self.forget_process(tgid);
                    if matches!(self.scope, Scope::Pid(_)) {
                        return Ok(Some(End::TargetExited));
                    }
                }
                Stop::Exec { tgid } => {
                    if let Some(end) = self.on_exec(tgid) {
                        return Ok(Some(end));
                    }
                }
            }
        }
        Ok(None)
    }

    /// `tgid` replaced its program: what we knew of the old one is void. With --pid that
    /// ends the run (the probe is gone with the old program).
    fn on_exec(&mut self, tgid: i32) -> Option<End> {
        // Our segments went with the old program: nothing to unmap at release.
        if let Some(in_target) = &mut self.in_target {
            in_target.forget(tgid);
        }
        self.sites.retain(|&(pid, _, _), _| pid != tgid);
        // The threads our SIGSTOPs were meant for are gone.
        self.pending.retain(|_, ev| ev.tgid as i32 != tgid);
        self.trigger.clear_busy(tgid);
        matches!(self.scope, Scope::Pid(_)).then(|| {
            let program = std::fs::read_link(format!("/proc/{tgid}/exe"))
                .map_or_else(|_| "another program".into(), |p| p.display().to_string());
            End::TargetExec(program)
        })
    }

    /// The sampled thread is frozen at the probe: walk the arguments, print the result, then
    /// let the thread go on with our SIGSTOP suppressed and allow the next sample.
    fn sample(&mut self, ev: Event, tid: i32, tgid: i32) -> Result<()> {
        let mut timing = Timing::default();
        let last = self.last_sample(tgid);
        let located = self
            .site_of(tgid, ev.probe, ev.regs.rip)
            .and_then(|(site, bias)| {
                let regs = self.registers_of(&ev, tid, site)?;
                Ok((site, bias, regs))
            });
        let result = match located {
            Ok((site, bias, regs)) => {
                self.walk(&ev, &regs, (tgid, tid), (site, bias), last, &mut timing)
            }
            Err(e) => {
                if last {
                    self.trigger.hold_busy(tgid, true);
                } else {
                    self.trigger.clear_busy(tgid);
                }
                self.tracer.resume(tid, None);
                timing.resumed_ns = monotonic_ns();
                Err(Failure::Sample(e))
            }
        };
        let walk_us = timing.walk_us;
        // From the hit (the kernel's clock) to the moment the thread runs again.
        let pause_us = timing.resumed_ns.saturating_sub(ev.time_ns) / 1000;
        if self.verbose && result.is_ok() {
            let in_target = timing.in_target_ns.map_or_else(
                || "unknown".to_string(),
                |ns| format!("{:.3} ms", ns as f64 / 1e6),
            );
            // Where the pause went: from the hit to the tracer holding the thread (the trigger's
            // stop and the tracer's wake-up), the walks with the ptrace stops around them, and
            // giving the thread back.
            let parts = timing.phases.map_or_else(String::new, |p| {
                let ms = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1e6;
                format!(
                    " (held after {:.3} ms, walked in {:.3} ms, resumed in {:.3} ms)",
                    ms(ev.time_ns, p.held_ns),
                    ms(p.held_ns, p.walked_ns),
                    ms(p.walked_ns, p.resumed_ns)
                )
            });
            // The hit's moment on CLOCK_MONOTONIC lets a target that times its own calls
            // (the bench's fixture) line a call up with its sample, part by part.
            eprintln!(
                "oi-trace: sample {} of pid {tgid}: walk in the target {in_target}, pause {:.3} ms, \
                 hit at {:.6} s{parts}",
                ev.hit,
                pause_us as f64 / 1e3,
                ev.time_ns as f64 / 1e9
            );
        }
        self.samples += 1;
        if result.is_err() {
            self.failures[ev.probe as usize].samples += 1;
        }
        match result {
            Ok(()) => {}
            Err(Failure::Sample(e)) => {
                self.failed_samples += 1;
                eprintln!("oi-trace: error: sample {} of pid {tgid}: {e}", ev.hit);
            }
            Err(Failure::Gone) => {
                self.failed_samples += 1;
                if !alive_after_exec(tgid) {
                    self.forget_process(tgid);
                    if matches!(self.scope, Scope::Pid(_)) {
                        return Err(Error::sample("target exited"));
                    }
                }
            }
            Err(Failure::Exec) => {
                self.failed_samples += 1;
                if let Some(End::TargetExec(program)) = self.on_exec(tgid) {
                    return Err(Error::sample(format!(
                        "target exited (it executed {program})"
                    )));
                }
            }
        }
        let probe = &self.probes[ev.probe as usize];
        self.logs.sample(&SampleRecord {
            probe: &probe.symbol,
            event: &ev,
            pause_us,
            walk_us,
            in_target_ns: timing.in_target_ns,
        })
    }

    /// Walks the probe's arguments in the stopped process, resumes the thread, and queues
    /// the report. Busy is cleared before the thread runs again (its next Nth hit must find
    /// the process free, or it would be dropped), unless reports are backed up or this is
    /// the `last` sample of the run (then the process stays busy for good).
    /// The registers of the hit: as the eBPF side captured them, plus the xmm registers when
    /// an argument (a float or a double) lives there. The eBPF side cannot read those, but the
    /// thread is stopped at the probe, so its FPU state still holds them.
    fn registers_of(&self, ev: &Event, tid: i32, site: usize) -> Result<EntryRegs> {
        let mut regs = ev.regs;
        if self.probes[ev.probe as usize].measurers[site].needs_vector_registers() {
            regs.xmm = remote::xmm_low_halves(tid).map_err(|e| {
                Error::sample(format!("reading the vector registers of thread {tid}: {e}"))
            })?;
        }
        Ok(regs)
    }

    fn walk(
        &mut self,
        ev: &Event,
        regs: &EntryRegs,
        (tgid, tid): (i32, i32),
        (site, bias): (usize, u64),
        last: bool,
        timing: &mut Timing,
    ) -> Result<(), Failure> {
        let measurer = self.probes[ev.probe as usize].measurers[site].clone();
        let started = Instant::now();
        let (trigger, reporter, deferred) =
            (&mut self.trigger, &self.reporter, &mut self.deferred_busy);
        let mut before_resume = || {
            if last {
                trigger.hold_busy(tgid, true);
            } else if reporter.pending() < BACKLOG {
                trigger.clear_busy(tgid);
            } else {
                deferred.push(tgid);
            }
        };
        let streams = match &mut self.in_target {
            Some(in_target) => {
                let probe = (ev.probe as usize, site);
                in_target.sample(
                    (tgid, tid),
                    probe,
                    &measurer,
                    regs,
                    bias,
                    &mut before_resume,
                )
            }
            None => {
                let mem = RemoteReader::new(tgid);
                let walked = measurer.walk_streams(regs, bias, &mem);
                before_resume();
                self.tracer.resume(tid, None);
                walked.map_err(|e| Failure::Sample(Error::sample(e.to_string())))
            }
        };
        timing.resumed_ns = monotonic_ns();
        timing.walk_us = started.elapsed().as_micros() as u64;
        timing.in_target_ns = self.in_target.as_ref().and_then(InTarget::last_walk_ns);
        if let Some(in_target) = &self.in_target {
            let phases = in_target.last_phases();
            // The thread ran again before a large output was copied: that copy is no pause.
            if phases.resumed_ns != 0 {
                timing.resumed_ns = phases.resumed_ns;
            }
            timing.phases = Some(phases);
        }
        let probe = (ev.probe as usize, &*self.probes[ev.probe as usize].symbol);
        self.reporter
            .submit((tgid, tid, ev.hit), probe, measurer, streams?);
        Ok(())
    }

    /// Takes note of the reports written meanwhile; lifts busy marks kept for the backlog.
    fn collect_reports(&mut self) {
        for written in self.reporter.written() {
            self.take_written(written);
        }
        if self.reporter.pending() < BACKLOG && !self.count_reached() {
            for tgid in self.deferred_busy.drain(..) {
                self.trigger.clear_busy(tgid);
            }
        }
    }

    /// Counts and says what a written report found: roots that could not be measured (a
    /// warning each: the sample's other roots were printed), or why nothing was printed.
    fn take_written(&mut self, written: Written) {
        let probe = Some(written.probe).filter(|&p| p < self.failures.len());
        let (hit, tgid) = (written.hit, written.tgid);
        if self.verbose {
            eprintln!(
                "oi-trace: sample {hit} of pid {tgid}: decoded and printed in {:.3} ms of CPU",
                written.cpu_ns as f64 / 1e6
            );
        }
        match written.result {
            Ok(failed) => {
                for root in &failed {
                    eprintln!(
                        "oi-trace: warning: sample {hit} of pid {tgid}: not measured (`{{}}` in \
                         its place), {root}"
                    );
                }
                if let Some(p) = probe {
                    self.failures[p].roots += failed.len() as u64;
                    let u = &mut self.failures[p].unions;
                    *u = (*u).max(written.unions);
                }
            }
            Err(e) => {
                self.failed_samples += 1;
                if e.nothing_measured {
                    self.nothing_measured += 1;
                }
                if let Some(p) = probe {
                    self.failures[p].samples += 1;
                }
                eprintln!("oi-trace: error: sample {hit} of pid {tgid}: {}", e.why);
            }
        }
    }

    fn forget_process(&mut self, tgid: i32) {
        self.tracer.forget_process(tgid);
        self.trigger.forget(tgid);
        if let Some(in_target) = &mut self.in_target {
            in_target.forget(tgid);
        }
        self.sites.retain(|&(pid, _, _), _| pid != tgid);
        self.pending.retain(|_, ev| ev.tgid as i32 != tgid);
    }

    /// Which of the probe's sites the hit at `rip` belongs to, and the load bias of its file
    /// in this process (cached per process and point).
    fn site_of(&mut self, tgid: i32, probe: u32, rip: u64) -> Result<(usize, u64)> {
        if let Some(&found) = self.sites.get(&(tgid, probe, rip)) {
            return Ok(found);
        }
        let sites = &self.probes[probe as usize].sites;
        // The mapping that holds the hit: its file, opened as the process maps it (a deleted
        // or chrooted binary too, see `procfs::reachable_path`).
        let holding = procfs::mappings(tgid)?
            .into_iter()
            .filter(|m| m.start <= rip && rip < m.end);
        for mapping in holding {
            let Some(id) =
                procfs::reachable_path(tgid, &mapping.path, Some((mapping.start, mapping.end)))
                    .ok()
                    .and_then(|p| procfs::file_id(&p))
            else {
                continue;
            };
            for (index, site) in sites.iter().enumerate().filter(|(_, s)| s.file_id == id) {
                let Some(bias) = site.binary.load_bias(mapping.start, mapping.offset) else {
                    continue;
                };
                // The kernel reports a uprobe hit at the probed instruction's address.
                if site
                    .points
                    .iter()
                    .any(|p| p.address.wrapping_add(bias) == rip)
                {
                    self.sites.insert((tgid, probe, rip), (index, bias));
                    return Ok((index, bias));
                }
            }
        }
        Err(Error::sample(format!(
            "pid {tgid} does not map the probed file any more"
        )))
    }

    /// Disarms the probes, swallows SIGSTOPs already on their way, detaches every thread.
    fn shutdown(&mut self) {
        self.trigger.disarm();
        for written in self.reporter.finish() {
            self.take_written(written);
        }
        self.drain_events();
        let processes: Vec<i32> = self.tracer.processes().collect();
        for tgid in processes {
            let busy = self.trigger.busy_thread(tgid);
            let pending: Vec<i32> = self.pending.keys().copied().collect();
            let is_ours = |tid| busy == Some(tid) || pending.contains(&tid);
            let mut held = None;
            let in_target = &mut self.in_target;
            let mut unmap = |tid| {
                if let Some(in_target) = in_target.as_mut() {
                    held = in_target.unmap(tgid, tid).map(|h| (tid, h));
                }
            };
            self.tracer.release_with(tgid, &is_ours, &mut unmap);
            if let Some(in_target) = self.in_target.as_mut()
                && in_target.holds(tgid)
                && procfs::state(tgid).is_some()
            {
                // No thread reached a quiet stop in time: say so rather than leave silently.
                eprintln!(
                    "oi-trace: warning: pid {tgid}: no thread stopped in time to unmap \
                     oi-trace's segments; they stay mapped (inert, never run again)"
                );
                in_target.forget(tgid);
            }
            // Signals that arrived while we unmapped, now that the thread is detached.
            if let Some((tid, mut signals)) = held {
                signals.redeliver(tgid, tid);
            }
            self.trigger.forget(tgid);
        }
        // Samples started that no walk will take: their SIGSTOPs were swallowed above.
        for ev in self.pending.values() {
            self.cancelled[ev.probe as usize] += 1;
        }
        self.pending.clear();
        if let Some(guardian) = &mut self.guardian {
            guardian.clean();
        }
    }

    fn print_summary(&mut self) -> Result<()> {
        let counters: Vec<_> = (0..self.probes.len())
            .map(|i| {
                let mut c = self.trigger.counters(i as u32);
                // A cancelled sample was an Nth hit that came while the run was ending.
                let cancelled = self.cancelled[i].min(c.sampled);
                c.sampled -= cancelled;
                c.dropped += cancelled;
                c
            })
            .collect();
        for ((probe, c), f) in self.probes.iter().zip(&counters).zip(&self.failures) {
            let mut line = summary_line(c);
            if f.unions > 0 {
                line += &format!(
                    "; up to {} per sample in unions not walked",
                    crate::report::tree::human(f.unions)
                );
            }
            eprintln!("oi-trace: {}: {line}", probe.symbol);
        }
        self.logs.summary(&self.probes, &counters, &self.failures)
    }
}

/// `H hits, S sampled, D dropped, F filtered` (and the unseen ones, when there are any).
fn summary_line(c: &ProbeCounters) -> String {
    let mut line = format!(
        "{} hits, {} sampled, {} dropped, {} filtered",
        c.hits, c.sampled, c.dropped, c.filtered
    );
    if c.unseen > 0 {
        line += &format!(
            ", {} unseen (returned through a tail call: no result to measure)",
            c.unseen
        );
    }
    line
}

/// `shop::f(long) [1 entry]`, `shop::g(long) [3 return points, 1 a tail call]`,
/// `shop::weigh [3 entries: 1 out of line, 2 inlined]`: what the `attached` line says of one
/// probe.
fn describe_points(probe: &Probe) -> String {
    let points: Vec<_> = probe.sites.iter().flat_map(|s| &s.points).collect();
    let n = points.len();
    let tails = points
        .iter()
        .filter(|p| p.kind == PointKind::TailCall)
        .count();
    let what = match (probe.is_return, n) {
        (false, 1) => "1 entry".to_string(),
        (false, n) => format!("{n} entries"),
        (true, 1) => "1 return point".to_string(),
        (true, n) => format!("{n} return points"),
    };
    let tails = match tails {
        0 => String::new(),
        1 if n == 1 => ", a tail call".to_string(),
        1 => ", 1 a tail call".to_string(),
        t => format!(", {t} of them tail calls"),
    };
    // Which copies: only when there is more than the function's own code.
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for site in &probe.sites {
        let kind = match &site.copy {
            resolve::Copy::OutOfLine => "out of line".to_string(),
            resolve::Copy::Clone(suffix) => format!("clone .{suffix}"),
            resolve::Copy::Inlined { .. } => "inlined".to_string(),
        };
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, count)) => *count += site.points.len(),
            None => kinds.push((kind, site.points.len())),
        }
    }
    let copies = if kinds.len() == 1 && kinds[0].0 == "out of line" {
        String::new()
    } else {
        let list: Vec<String> = kinds.iter().map(|(k, c)| format!("{c} {k}")).collect();
        format!(": {}", list.join(", "))
    };
    let name = probe
        .sites
        .iter()
        .find(|s| !matches!(s.copy, resolve::Copy::Inlined { .. }))
        .map_or_else(
            || crate::debuginfo::symbols::demangle(&probe.sites[0].function),
            |s| s.symbol.demangled.clone(),
        );
    format!("{name} [{what}{tails}{copies}]")
}

/// How long a probe may stay without hits before the hint (unless `--duration` ends first).
const HINT_AFTER: Duration = Duration::from_secs(10);

/// Whether `tgid` is alive, allowing for an execve in progress: while a non-leader thread
/// execs, the old leader is briefly a zombie before the exec'ing thread takes its pid.
fn alive_after_exec(tgid: i32) -> bool {
    for _ in 0..20 {
        if procfs::is_alive(tgid) {
            return true;
        }
        if procfs::threads(tgid).len() <= 1 {
            // No other thread could be taking the leader's place.
            return procfs::is_alive(tgid);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
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

//! `oi-trace allocs`: every allocation and free of a live process (or of every process of a
//! cgroup), by site, by C++ type and by class, with lifetimes and what is still live; no
//! LD_PRELOAD, no restart, nothing stopped.
//!
//! How: `hooks` finds every allocator entry point in every file the processes map and where
//! its probes go (every entry; a uretprobe on C allocation functions, which no exception
//! unwinds through; `ret` instructions and tail jumps only of an `operator new` that does not
//! take its block from a hooked C allocator; nothing more on frees); one eBPF program
//! (`oi-ebpf/src/bin/allocs.rs`) counts each request once, at the outermost allocator call (by
//! the stack pointer, frees by a per-thread pending free), keeps live blocks, stacks and per-stack counts and lifetime histograms
//! in bounded maps; user space attaches (multi-uprobe links where the kernel has them), waits
//! in the core's event loop, and at each report reads the maps, symbolizes the stacks with
//! inlined frames (`symbolize`), and names types and classes (`names`, `report`).
//!
//! Choices: `realloc` is a free of the old block and an allocation of the new one
//! (`realloc(NULL, n)` an allocation only, `realloc(p, 0)` a free only, a failed realloc
//! nothing); `bytes` are requested bytes, usable bytes are glibc's chunk sizes
//! (`malloc_usable_size`'s rule) when every `malloc` the processes map is glibc's, jemalloc's
//! size classes when a jemalloc replaces it, else the requested ones (JSON `usable_size`,
//! [`hooks::Blocks`]); a free of a block allocated before attaching (or
//! dropped, or not sampled) is an unknown free; with `--every N` every number is scaled by N;
//! with `--sample-bytes B` an allocation of n < B bytes is taken with probability n / B and
//! stands for B / n allocations and B bytes (usable bytes and lifetimes scaled alike).
//!
//! Files mapped after attaching (a `dlopen`ed plugin, a cgroup's newcomer): each sweep of
//! `Run::housekeeping` (1 s) re-reads the processes' mappings and hooks the allocator functions
//! of files not seen before ([`hooks::file_hooks`], the start's [`hooks::Blocks`] kept), one
//! stderr line per file; their links are detached with the others.
//!
//! Never stops, ptraces or writes to the target: only uprobes touch it, and they are removed
//! before the report is printed (on `--duration`, Ctrl-C, SIGTERM or the target's exit).

mod forked;
pub mod hooks;
pub mod in_target;
pub mod names;
pub mod pprof;
pub mod program;
pub mod report;
mod sampled;

use std::{
    collections::{HashMap, HashSet},
    io::Write as _,
    sync::Arc,
    time::{Duration, Instant},
};

use oi_common::allocs::{MAX_BUCKETS, MAX_THREAD_SLOTS};

use crate::{
    cli::allocs::{AllocsArgs, AllocsFormat, AllocsMechanism},
    debuginfo::{Binary, dwarf::with_debug_info},
    error::{Error, Result},
    event_loop::{End, EventLoop, Profiler},
    inferior::procfs,
    probe::monotonic_ns,
    probe::scope::{File, Scope, files_of},
    report::{
        flame::{Folded, Picture},
        tree::thousands,
    },
    symbolize::Symbolizer,
};
use program::{FileAttachment, Program, Settings};
use report::{Classes, Context, Report};

/// The default lifetime bounds: a log scale from 1 ms to 1 min.
const DEFAULT_BUCKETS_S: [f64; 6] = [0.001, 0.01, 0.1, 1.0, 10.0, 60.0];
/// How often processes' mappings are re-read.
const SWEEP: Duration = Duration::from_secs(1);

pub fn run(args: &AllocsArgs) -> Result<()> {
    let bucket_s = validate(args)?;
    let scope = Scope::resolve(&args.scope)?;
    profile(args, &scope, &bucket_s, None)
        .map(|_| ())
        .map_err(|e| scope.explain(e))
}

/// What a caller other than the command line does with a run's reports (`oi-trace agent`):
/// every report is cumulative since the probes were armed, handed over while the processes
/// still map their files, so that their stacks can be located.
pub trait Reports {
    /// The probes are armed and the loop runs.
    fn armed(&mut self) {}

    /// The report at an `--interval` tick (`last` false) or at the end of the run (`last`
    /// true; never when the target exited, whose files can no longer be read).
    fn report(&mut self, report: &Report, symbolizer: &mut Symbolizer, last: bool);

    /// Asked about every second: whether the run should end, and how (`End::TargetExited`: as
    /// if its target had exited, for a cgroup left without a process; `End::Finished`: with its
    /// last report).
    fn end(&mut self) -> Option<End> {
        None
    }
}

/// One run of the uprobe profiler with its reports handed to `reports` instead of printed
/// (nothing on stdout, no `--pprof` files; what did not fit is still said on stderr). Returns
/// why the run ended.
pub fn run_with(args: &AllocsArgs, reports: &mut dyn Reports) -> Result<End> {
    let bucket_s = validate(args)?;
    let scope = Scope::resolve(&args.scope)?;
    profile(args, &scope, &bucket_s, Some(reports)).map_err(|e| scope.explain(e))
}

/// The files the scope's processes execute and their allocator hooks. A process caught while
/// its dynamic loader is still mapping its libraries (nothing but the executable and the loader
/// mapped) maps no allocator yet: its files are read again, every 20 ms for at most 2 s.
fn allocator_files(scope: &Scope) -> Result<(Vec<File>, Vec<hooks::FileHooks>, hooks::Blocks)> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let files = files_of(&scope.processes)?;
        let (hooks, blocks) = hooks::hooks_of(&files);
        let is_loader = |f: &File| {
            f.target_path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ld-") && n.contains(".so"))
        };
        let loading = hooks.iter().all(|h| h.functions.is_empty())
            && files.len() <= 2
            && files.iter().any(is_loader);
        if !loading || Instant::now() >= deadline {
            return Ok((files, hooks, blocks));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn profile(
    args: &AllocsArgs,
    scope: &Scope,
    bucket_s: &[f64],
    reports: Option<&mut dyn Reports>,
) -> Result<End> {
    let (files, hooks, blocks) = allocator_files(scope)?;
    let functions: usize = hooks.iter().map(|h| h.functions.len()).sum();
    if functions == 0 {
        let names: Vec<String> = files
            .iter()
            .map(|f| f.target_path.display().to_string())
            .collect();
        return Err(Error::input(format!(
            "{} maps no allocator function (malloc, operator new, …) that can be hooked (its \
             code comes from: {})",
            scope.place,
            if names.is_empty() {
                "no file".to_string()
            } else {
                names.join(", ")
            }
        )));
    }
    if args.scope.verbose {
        for (file, h) in files.iter().zip(&hooks) {
            if !h.functions.is_empty() {
                let names: Vec<&str> = h.functions.iter().map(|f| f.name.as_str()).collect();
                eprintln!(
                    "oi-trace: hooking {} in {}",
                    names.join(", "),
                    file.target_path.display()
                );
            }
        }
    }
    for (file, h) in files.iter().zip(&hooks) {
        if !h.skipped.is_empty() {
            eprintln!(
                "oi-trace: not hooked in {}: {}",
                file.target_path.display(),
                h.skipped.join(", ")
            );
        }
    }
    if args.mechanism == AllocsMechanism::Inject && reports.is_none() {
        match in_target::profile(args, scope, &files, &hooks, blocks, bucket_s)? {
            in_target::Outcome::Done => return Ok(End::Finished),
            in_target::Outcome::Uprobes(why) => {
                eprintln!("oi-trace: --mechanism inject: {why}; counting with uprobes instead")
            }
        }
    }
    let settings = Settings {
        target_tgid: scope.pid.map(|p| p as u32),
        cgroup: scope.cgroup.as_ref().map(|c| (c.id, c.level)),
        every: args.every.unwrap_or(1),
        sample_bytes: args.sample_bytes.unwrap_or(0),
        bucket_ns: bucket_s.iter().map(|s| (s * 1e9).round() as u64).collect(),
        max_live: args.max_live,
        max_stacks: args.max_stacks,
        verbose: args.scope.verbose,
    };
    let mut program = Program::load(&settings)?;
    let logger = program.take_logger();
    for &pid in &scope.processes {
        program.unwinder.track(pid)?;
    }
    let attach_start = Instant::now();
    let mut attachments: Vec<FileAttachment> = Vec::new();
    let mut probes = 0;
    for (file, h) in files.iter().zip(&hooks) {
        if h.sites.is_empty() {
            continue;
        }
        match program.attach(
            &file.host_path,
            &h.sites,
            scope.pid.map(|p| p as u32),
            &mut |_| {},
        ) {
            Ok(a) => {
                probes += a.probes;
                attachments.push(a);
            }
            Err(e) => {
                for a in attachments {
                    program.detach(a);
                }
                return Err(Error::input(format!(
                    "{e} (in {})",
                    file.target_path.display()
                )));
            }
        }
    }
    // Counting starts with every probe in place (see `Program::arm`).
    if let Err(e) = program.arm(true) {
        for a in attachments {
            program.detach(a);
        }
        return Err(e);
    }
    // Libraries dlopened from now on are hooked before their code runs (see
    // `Run::record`).
    for file in files.iter().filter(|f| is_dynamic_linker(&f.host_path)) {
        if let Err(e) = program.attach_dynamic_linker(&file.host_path, scope.pid.map(|p| p as u32))
        {
            eprintln!("oi-trace: libraries loaded later are hooked within a second only: {e}");
        }
    }
    if scope.pid.is_some() {
        // One process, attached: what is left is reading its maps and files to name stacks,
        // and attaching the same probes to a library it dlopens later (as at start: a
        // multi-uprobe link takes CAP_BPF and CAP_PERFMON, a perf-event uprobe CAP_SYS_ADMIN).
        // A cgroup keeps everything.
        let mut keep = crate::privileges::AFTER_ARMING.to_vec();
        keep.extend_from_slice(crate::privileges::TO_LOAD);
        if program.mechanism() == crate::probe::profiler::Mechanism::PerfEvents {
            keep.push(crate::privileges::SYS_ADMIN);
        }
        crate::privileges::keep_only(&keep);
    }
    let armed = format!(
        "oi-trace: attached {} probe(s) to {} allocator function(s) in {} in {} ms ({}), armed \
         {} ms after start",
        thousands(probes as u64),
        thousands(functions as u64),
        scope.place,
        attach_start.elapsed().as_millis(),
        program.mechanism(),
        crate::uptime::elapsed().as_millis(),
    );
    let started = Instant::now();
    let mut state = Run {
        program: &mut program,
        args,
        scope,
        bucket_s,
        blocks,
        started,
        symbolizer: Symbolizer::new(),
        classes: DwarfClasses::new(&files),
        last_sweep: Instant::now(),
        tracked: scope.processes.iter().copied().collect(),
        armed,
        seen_files: files
            .iter()
            .filter_map(|f| procfs::file_id(&f.host_path))
            .collect(),
        attachments,
        reports,
    };
    let mut event_loop = EventLoop::new(args.scope.duration, args.scope.interval);
    if let Some(ring) = state.program.take_mapped_events() {
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
    let mut symbolizer = std::mem::take(&mut state.symbolizer);
    let mut classes = std::mem::replace(&mut state.classes, DwarfClasses::new(&[]));
    let attachments = std::mem::take(&mut state.attachments);
    let reports = state.reports.take();
    drop(state);
    // Symbolize while the processes still map their files, but after the probes are gone:
    // the target runs at full speed again first. Nothing handles a dlopen any more either.
    // Counting stops before any probe goes, so that the counts are those of one set of probes.
    let _ = program.arm(false);
    program.detach_dynamic_linkers();
    for a in attachments {
        program.detach(a);
    }
    let end = end?;
    if end == End::TargetExited && reports.is_none() {
        eprintln!("oi-trace: the target exited; the report holds the allocations made until then");
    }
    let report = build_report(
        &program,
        scope,
        bucket_s,
        blocks,
        args,
        elapsed,
        &mut symbolizer,
        &mut classes,
    );
    if let Some(reports) = reports {
        if end != End::TargetExited {
            reports.report(&report, &mut symbolizer, true);
        }
        summary(&report, args);
        return Ok(end);
    }
    print_report(&report, args, scope)?;
    write_pictures(&report, args, scope)?;
    pprof::write(&report, args, &scope.place, elapsed, &mut symbolizer)?;
    summary(&report, args);
    Ok(end)
}

/// `--folded` and `--flamegraph`: the sites' stacks weighted by their bytes.
fn write_pictures(report: &Report, args: &AllocsArgs, scope: &Scope) -> Result<()> {
    if args.folded.is_some() || args.flamegraph.is_some() {
        let mut folded = Folded::new();
        for site in &report.sites {
            let root_first: Vec<&str> = site.stack.iter().rev().map(String::as_str).collect();
            folded.add(&root_first, site.bytes);
        }
        let write_error = |what: &str, path: &std::path::Path, e: std::io::Error| {
            Error::internal(format!("writing {what} {}: {e}", path.display()))
        };
        if let Some(path) = &args.folded {
            folded
                .write(path)
                .map_err(|e| write_error("folded stacks to", path, e))?;
        }
        if let Some(path) = &args.flamegraph {
            let subtitle = format!(
                "{} allocations, {} bytes",
                thousands(report.totals.allocs),
                thousands(report.totals.bytes)
            );
            folded
                .write_svg(
                    path,
                    &Picture {
                        title: &format!("allocated bytes in {}", scope.place),
                        subtitle: Some(&subtitle),
                        unit: "bytes",
                        icicle: false,
                    },
                )
                .map_err(|e| write_error("a flame graph to", path, e))?;
        }
    }
    Ok(())
}

/// The lifetime bounds in seconds, checked.
fn validate(args: &AllocsArgs) -> Result<Vec<f64>> {
    let buckets = args
        .buckets
        .clone()
        .unwrap_or_else(|| DEFAULT_BUCKETS_S.to_vec());
    if buckets.is_empty() || buckets.len() > MAX_BUCKETS {
        return Err(Error::input(format!(
            "--buckets takes 1 to {MAX_BUCKETS} bounds, got {}",
            buckets.len()
        )));
    }
    for pair in buckets.windows(2) {
        if pair[1] <= pair[0] {
            return Err(Error::input(format!(
                "--buckets must ascend: {} then {}",
                pair[0], pair[1]
            )));
        }
    }
    if let Some(b) = buckets.iter().find(|b| !(b.is_finite() && **b > 0.0)) {
        return Err(Error::input(format!(
            "--buckets: {b} is not a positive number of seconds"
        )));
    }
    if let Some(b) = args.sample_bytes
        && !(1..1 << 31).contains(&b)
    {
        return Err(Error::input(format!(
            "--sample-bytes must be between 1 and {}, got {b}",
            (1u64 << 31) - 1
        )));
    }
    if args.mechanism == AllocsMechanism::Inject {
        in_target::validate(args)?;
    }
    if args.every == Some(0) {
        return Err(Error::input(
            "--every must be at least 1 (take every Nth allocation), got 0",
        ));
    }
    for (name, n) in [
        ("--max-live", args.max_live),
        ("--max-stacks", args.max_stacks),
    ] {
        if n == 0 || n > 1 << 24 {
            return Err(Error::input(format!(
                "{name} must be between 1 and {}, got {n}",
                1 << 24
            )));
        }
    }
    Ok(buckets)
}

/// Classes by DWARF: a qualifier is a class when some file's DWARF defines a class of that
/// name. Answers are cached; each report loads each file's DWARF once at most.
pub(super) struct DwarfClasses {
    binaries: Vec<Arc<Binary>>,
    known: HashMap<String, bool>,
}

impl DwarfClasses {
    pub(super) fn new(files: &[File]) -> Self {
        Self {
            binaries: files.iter().map(|f| f.binary.clone()).collect(),
            known: HashMap::new(),
        }
    }
}

impl Classes for DwarfClasses {
    fn classes(&mut self, qualifiers: &[String]) -> HashSet<String> {
        let missing: Vec<&String> = qualifiers
            .iter()
            .filter(|q| !self.known.contains_key(*q))
            .collect();
        if !missing.is_empty() {
            let mut found: HashSet<String> = HashSet::new();
            for binary in &self.binaries {
                let _ = with_debug_info(binary, |di| {
                    for q in &missing {
                        if !found.contains(*q) && matches!(di.find_definition(q), Ok(Some(_))) {
                            found.insert((*q).clone());
                        }
                    }
                });
            }
            for q in missing {
                self.known.insert(q.clone(), found.contains(q));
            }
        }
        qualifiers
            .iter()
            .filter(|q| self.known.get(*q) == Some(&true))
            .cloned()
            .collect()
    }
}

#[allow(clippy::too_many_arguments)]
fn build_report(
    program: &Program,
    scope: &Scope,
    bucket_s: &[f64],
    blocks: hooks::Blocks,
    args: &AllocsArgs,
    elapsed: Duration,
    symbolizer: &mut Symbolizer,
    classes: &mut DwarfClasses,
) -> Report {
    let snapshot = program.snapshot();
    let stack_of = |id: u64| {
        program.stack(id).map(|s| {
            let len = (s.len as usize).min(s.frames.len());
            (s.tgid, s.frames[..len].to_vec())
        })
    };
    report::build(
        &snapshot,
        &stack_of,
        symbolizer,
        classes,
        &Context {
            pid: scope.pid,
            elapsed_s: elapsed.as_secs_f64(),
            every: args.every.unwrap_or(1),
            sample_bytes: args.sample_bytes,
            bucket_s,
            blocks,
            unwind: program.unwinder.stats(),
            now_ns: monotonic_ns(),
        },
    )
}

fn print_report(report: &Report, args: &AllocsArgs, scope: &Scope) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let written = match args.format {
        AllocsFormat::Text => {
            out.write_all(report::text(report, &scope.place, args.top).as_bytes())
        }
        AllocsFormat::Json => serde_json::to_writer(&mut out, report)
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out)),
    };
    // A closed stdout (a pager that quit) is no failure of the profiler.
    let _ = written.and_then(|()| out.flush());
    Ok(())
}

/// What did not fit or could not be seen, on stderr.
fn summary(report: &Report, args: &AllocsArgs) {
    let c = &report.counters;
    let warn = |n: u64, what: &str| {
        if n > 0 {
            eprintln!("oi-trace: {} {what}", thousands(n));
        }
    };
    warn(
        report.totals.dropped,
        &format!(
            "allocation(s) not tracked: the live table was full (--max-live {}); their frees \
             count as unknown",
            args.max_live
        ),
    );
    warn(
        c.stacks_full + c.sites_full,
        &format!(
            "allocation(s) without a site: the stack table was full (--max-stacks {})",
            args.max_stacks
        ),
    );
    warn(
        c.threads_full,
        &format!(
            "allocator call(s) not tracked: their thread's slot held another thread's call \
             (pid_max is above the thread table's {MAX_THREAD_SLOTS} slots)"
        ),
    );
    warn(
        report.unwind.processes_untracked,
        "process(es) without unwind tables: the unwinder's process table was full; their \
         stacks follow frame pointers beyond the allocator's caller",
    );
    warn(
        c.unseen,
        "allocation(s) whose result no probe could see (a tail call out of the allocator)",
    );
    warn(
        c.abandoned,
        "allocator call(s) left without a return (an exception or longjmp)",
    );
    warn(
        c.returns_missed,
        "C allocator call(s) whose return the kernel did not report (its uretprobe did not \
         run: more than 64 pending returns on the thread, or none could be allocated); their \
         blocks are not counted",
    );
    warn(
        c.reused,
        "block(s) whose free was missed (their address was allocated again); counted freed then",
    );
}

/// The event loop's view of the run.
struct Run<'a, 'r> {
    program: &'a mut Program,
    args: &'a AllocsArgs,
    scope: &'a Scope,
    bucket_s: &'a [f64],
    blocks: hooks::Blocks,
    started: Instant,
    symbolizer: Symbolizer,
    classes: DwarfClasses,
    last_sweep: Instant,
    /// Processes the unwinder tracks.
    tracked: HashSet<i32>,
    /// The line that says the probes are armed, printed once the loop handles signals.
    armed: String,
    /// Files looked at for allocator functions, by (device, inode): those mapped at start and
    /// every one mapped since.
    seen_files: HashSet<(u64, u64)>,
    /// The probes of every hooked file, detached at the end.
    attachments: Vec<FileAttachment>,
    /// Where the reports go instead of stdout ([`run_with`]).
    reports: Option<&'r mut dyn Reports>,
}

impl Run<'_, '_> {
    /// Hooks the allocator functions of files `pid` mapped since they were last looked at (a
    /// library it dlopened, a cgroup's new process's executable), with the same program and
    /// the same kind of blocks as at start; one line on stderr per newly hooked file. A file
    /// that cannot be attached is said so once and left; one that cannot be read is left.
    fn hook_new_files(&mut self, pid: i32) {
        let Ok(mapped) = procfs::executable_files(pid) else {
            return;
        };
        for procfs::MappedFile { target, host } in mapped {
            let Some(id) = procfs::file_id(&host) else {
                continue;
            };
            if !self.seen_files.insert(id) {
                continue;
            }
            let Ok(binary) = Binary::open(&host) else {
                continue;
            };
            let h = hooks::file_hooks(&binary, self.blocks);
            if !h.skipped.is_empty() {
                eprintln!(
                    "oi-trace: not hooked in {}: {}",
                    target.display(),
                    h.skipped.join(", ")
                );
            }
            if is_dynamic_linker(&host) {
                // A cgroup's newcomer with a dynamic linker of its own (a container).
                if let Err(e) = self
                    .program
                    .attach_dynamic_linker(&host, self.scope.pid.map(|p| p as u32))
                {
                    eprintln!(
                        "oi-trace: libraries {} loads later are hooked within a second only: {e}",
                        target.display()
                    );
                }
            }
            let binary = Arc::new(binary);
            // Its classes name stacks too.
            self.classes.binaries.push(binary.clone());
            if h.sites.is_empty() {
                continue;
            }
            let pid = self.scope.pid.map(|p| p as u32);
            match self.program.attach(&host, &h.sites, pid, &mut |_| {}) {
                Ok(a) => {
                    self.attachments.push(a);
                    eprintln!(
                        "oi-trace: hooked {} allocator entry points in {} (loaded after \
                         attaching)",
                        h.functions.len(),
                        target.display()
                    );
                }
                Err(e) => eprintln!(
                    "oi-trace: cannot hook the allocator functions of {}, loaded after \
                     attaching: {e}",
                    target.display()
                ),
            }
        }
    }
}

/// Whether the file at `path` is a dynamic linker (`ld-linux-x86-64.so.2`, `ld-musl-….so.1`),
/// whose `_dl_debug_state` says that a dlopen mapped new files.
fn is_dynamic_linker(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("ld-linux") || n.starts_with("ld-musl"))
}

impl Profiler for Run<'_, '_> {
    fn armed(&mut self) {
        eprintln!("{}", self.armed);
        if let Some(reports) = self.reports.as_deref_mut() {
            reports.armed();
        }
    }

    /// A process changed its mappings (a dlopen mapped its files; its thread waits in the
    /// probe, before the files' constructors run): hook the new files, let the thread go, then
    /// load their unwind rows.
    fn record(&mut self, data: &[u8]) {
        let Some(mapped) = program::mapped_record(data) else {
            return;
        };
        let pid = mapped.tgid as i32;
        // The hooks make the counts exact, so the thread waits for them only; the unwind rows
        // (the slower part: ~250 ms for a first libstdc++) make the stacks whole and load
        // while it runs: its allocations meanwhile are counted, their stacks in the new files
        // follow frame pointers (or stop, counted as truncated).
        let started = Instant::now();
        self.hook_new_files(pid);
        self.program.mapped_handled(mapped.sequence);
        let hooked = started.elapsed();
        let _ = self.program.unwinder.track(pid);
        if self.args.scope.verbose {
            eprintln!(
                "oi-trace: mapping change {} of pid {pid}: hooked and let go in {} ms, unwind \
                 rows in {} ms more",
                mapped.sequence,
                hooked.as_millis(),
                (started.elapsed() - hooked).as_millis()
            );
        }
    }

    fn housekeeping(&mut self) -> Option<End> {
        if self.last_sweep.elapsed() < SWEEP {
            return None;
        }
        self.last_sweep = Instant::now();
        if let Some(end) = self.reports.as_deref_mut().and_then(|r| r.end()) {
            return Some(end);
        }
        let now: HashSet<i32> = match &self.scope.cgroup {
            Some(cgroup) => cgroup.processes().into_iter().collect(),
            None => self.scope.processes.iter().copied().collect(),
        };
        for pid in &now {
            // New processes, and new mappings (dlopen) of known ones: their allocator
            // functions, then their unwind tables (the slower part; a thread held in the
            // dynamic linker's probe meanwhile waits for the hooks most).
            self.hook_new_files(*pid);
            let _ = self.program.unwinder.track(*pid);
        }
        for gone in self.tracked.difference(&now).copied().collect::<Vec<_>>() {
            self.program.unwinder.forget(gone);
        }
        self.tracked = now;
        None
    }

    fn interval(&mut self) {
        let report = build_report(
            self.program,
            self.scope,
            self.bucket_s,
            self.blocks,
            self.args,
            self.started.elapsed(),
            &mut self.symbolizer,
            &mut self.classes,
        );
        match self.reports.as_deref_mut() {
            Some(reports) => reports.report(&report, &mut self.symbolizer, false),
            None => {
                let _ = print_report(&report, self.args, self.scope);
            }
        }
    }
}

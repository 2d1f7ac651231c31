//! `oi-trace allocs --mechanism inject`: the allocations of one process counted inside it, by
//! wrappers the in-target core (`inject`) patches glibc's C allocator functions to jump to,
//! instead of a uprobe trap per call.
//!
//! Which functions, and why ([`choose`]): one mechanism per library, so that the nesting rule
//! (one count per request, at the outermost hooked call) holds: the wrappers keep their depth
//! in the target, uprobes in the kernel, and a request seen by both would count twice. So
//! `inject` applies when every `malloc` the process maps is glibc's and every other file with
//! allocator functions is libstdc++, whose `operator new`/`delete` call `malloc`/`free` (and
//! `aligned_alloc`) through its PLT: libstdc++ is left unhooked, its requests are counted at
//! the C function (so the new/delete kinds and their mismatches are not checked), and no
//! `operator new`, which may throw, runs through a wrapper without unwind information.
//! Anything else (jemalloc or tcmalloc, whose C++ entry points do not go through a hooked C
//! function; an allocator of the program's own; `--cgroup`) stays whole on uprobes, and so
//! does the whole run when one of glibc's functions is refused (`relocate::Refusal`, said on
//! stderr).
//!
//! The run: seize the process, map a segment near libc with a data part laid out by
//! `oi_common::inject` (live table sized by `--max-live`), relocate each function's first
//! instructions and place its wrapper, patch them all with every thread stopped, let the
//! process go; the guardian holds the undo plan throughout. At the end (Ctrl-C, `--duration`,
//! SIGTERM): seize, unpatch, wait until no thread is inside a wrapper, unmap (docs/inject.md), then read the
//! counts from our own view of the data part. If the target exits, nothing is undone; if it
//! execs (our code part is gone from its maps), nothing of ours is left to undo either. A child
//! it forks is found within a second and unpatched too (`forked`), and counted in the report.
//!
//! The report has the exact totals, requested and usable bytes, frees, live blocks and the
//! lifetime histogram (`record::Snapshot`), and sites, types and classes estimated from the
//! allocations the wrappers sample (`--sample-bytes`, 512 KiB on average by default, or
//! `--every N`): drained from the ring every housekeeping tick and at the end, unwound and
//! named by `sampled`, and made into the uprobe report's sites by `report::build`, so that
//! the tables, `--folded`, `--flamegraph` and `--pprof` come from the same code.

use std::{
    io::Write as _,
    time::{Duration, Instant},
};

use object::{Object as _, ObjectSymbol as _, SymbolKind};
use oi_common::inject::{DataLayout, offset, usable};
use serde::Serialize;

use super::{
    DwarfClasses, forked,
    hooks::{self, Blocks, FileHooks, Hooked},
    report::{self, ClassView, Context, Report, SiteView, TypeView},
    sampled::{Sampled, SamplingStats},
};
use crate::{
    cli::allocs::{AllocsArgs, AllocsFormat},
    debuginfo::Binary,
    error::{Error, Result},
    event_loop::{End, EventLoop, Profiler},
    guardian::Guardian,
    inferior::{Tracer, procfs, remote},
    inject::{
        patch::{self, Injection, Site},
        record::{self, Sampling, Shape, Snapshot, samples},
        relocate::{self, MAX_RELOCATED, Prologue},
    },
    probe::{
        monotonic_ns,
        scope::{File, Scope},
    },
    report::tree::{human, thousands},
    symbolize::Symbolizer,
    unwind::UnwindStats,
};

mod inject_report;

use inject_report::print;
pub use inject_report::{InjectCounters, InjectReport, InjectTotals};

/// `--sample-bytes`'s default under `--mechanism inject` (tcmalloc's and Go's).
pub const DEFAULT_SAMPLE_BYTES: u64 = 512 << 10;
/// Sample records in the ring (16 MiB of the data part, touched as written): a second of
/// samples at 4,000 a second, drained every 100 ms.
const RING_ENTRIES: u64 = 4096;

/// How the wrappers sample: `--every N`, `--sample-bytes B`, else B = 512 KiB.
fn sampling_of(args: &AllocsArgs) -> (Sampling, u64) {
    match (args.every, args.sample_bytes) {
        (Some(n), _) => (Sampling::Calls, n),
        (None, Some(b)) => (Sampling::Bytes, b),
        (None, None) => (Sampling::Bytes, DEFAULT_SAMPLE_BYTES),
    }
}

/// The seed of the sampling intervals: `OI_TRACE_SAMPLE_SEED` (a number: runs that can be
/// repeated, for tests), else random.
fn sample_seed() -> u64 {
    std::env::var("OI_TRACE_SAMPLE_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| {
            let mut b = [0u8; 8];
            let _ = getrandom::fill(&mut b);
            u64::from_le_bytes(b)
        })
}

/// One function to patch.
struct Candidate {
    file: String,
    name: String,
    shape: Shape,
    prologue: Prologue,
}

/// What the choice leaves to each function: the report's `functions`.
#[derive(Debug, Clone, Serialize)]
pub struct FunctionMechanism {
    pub file: String,
    pub function: String,
    /// `"inject"`, or `"none"` (counted at the C function it calls).
    pub mechanism: &'static str,
}

/// How a `--mechanism inject` run went.
pub enum Outcome {
    /// Counted in the target; the report is printed.
    Done,
    /// Nothing was patched (or all was undone): the run goes on uprobes, for this reason.
    Uprobes(String),
}

/// Runs the profile in the target, or says why the run stays on uprobes.
pub fn profile(
    args: &AllocsArgs,
    scope: &Scope,
    files: &[File],
    file_hooks: &[FileHooks],
    blocks: Blocks,
    bucket_s: &[f64],
) -> Result<Outcome> {
    let Some(pid) = scope.pid else {
        return Ok(Outcome::Uprobes(
            "it patches one process (--pid), not a cgroup".into(),
        ));
    };
    let (candidates, mut functions) = match choose(pid, files, file_hooks, blocks) {
        Ok(c) => c,
        Err(why) => return Ok(Outcome::Uprobes(why)),
    };
    let Some(first) = candidates.first() else {
        return Ok(Outcome::Uprobes(
            "no glibc allocator function to patch".into(),
        ));
    };
    let span = patch::span_of(pid, first.prologue.entry)
        .ok_or_else(|| Error::sample(format!("pid {pid}: libc is no longer mapped")))?;
    // Forked before any thread or descriptor of ours exists but the files read.
    let mut guardian = Guardian::spawn_for_inject()
        .map_err(|e| Error::internal(format!("starting the guardian: {e}")))?;
    let sampling = sampling_of(args);
    let layout = layout_for(args.max_live);
    let code_len = (candidates.len() * (MAX_RELOCATED + record::wrapper::MAX_LEN)) as u64;
    let attach_start = Instant::now();
    let mut tracer = Tracer::default();
    tracer.seize(pid)?;
    let created = Injection::create(
        &mut tracer,
        pid,
        &[span],
        (code_len, layout.size()),
        &mut |u| guardian.inject(u),
    );
    let mut inj = match created {
        Ok(inj) => inj,
        Err(e) => {
            tracer.release(pid);
            return Ok(Outcome::Uprobes(format!("no segment near libc: {e}")));
        }
    };
    let placed = place(&mut inj, &candidates, &layout, bucket_s, sampling);
    let sites = match placed {
        Ok(sites) => sites,
        Err(why) => {
            let key = inj.undo_plan(&[]).key();
            let _ = inj.unpatch(&mut tracer);
            guardian.uninjected(key);
            tracer.release(pid);
            return Ok(Outcome::Uprobes(why));
        }
    };
    let results = inj.patch(&mut tracer, &sites, &mut |u| guardian.inject(u));
    let refused: Vec<String> = match &results {
        Ok(r) => r
            .iter()
            .zip(&candidates)
            .filter_map(|(r, c)| r.as_ref().err().map(|e| format!("{}: {e}", c.name)))
            .collect(),
        Err(e) => vec![e.to_string()],
    };
    if !refused.is_empty() {
        // One mechanism per library: what was patched goes back.
        let key = inj.undo_plan(&[]).key();
        inj.unpatch(&mut tracer)
            .map_err(|e| Error::internal(format!("undoing a partial patch: {e}")))?;
        guardian.uninjected(key);
        tracer.release(pid);
        return Ok(Outcome::Uprobes(format!(
            "not patched: {}",
            refused.join("; ")
        )));
    }
    tracer.release(pid);
    let attach_ms = attach_start.elapsed().as_millis();
    // What is left: seizing the process again to unpatch (and reading its maps).
    crate::privileges::keep_only(crate::privileges::AFTER_ARMING);
    let patched: Vec<&str> = candidates.iter().map(|c| c.name.as_str()).collect();
    let armed = format!(
        "oi-trace: attached in the target: patched {} allocator function(s) of {} in {} in {} \
         ms ({}); armed {} ms after start",
        patched.len(),
        first.file,
        scope.place,
        attach_ms,
        patched.join(", "),
        crate::uptime::elapsed().as_millis(),
    );
    let started = Instant::now();
    let mut watch = Watch {
        inj: &inj,
        args,
        scope,
        bucket_s,
        functions: &functions,
        started,
        last_check: Instant::now(),
        exec: false,
        armed,
        forked: Vec::new(),
        sampled: Sampled::new(pid, sampling.0.mode(), sampling.1, args.max_stacks as usize),
        symbolizer: Symbolizer::new(),
        classes: DwarfClasses::new(files),
    };
    let end = EventLoop::new(args.scope.duration, args.scope.interval)
        .watch_process(pid)
        .run(&mut watch);
    let exec = watch.exec;
    let mut children = std::mem::take(&mut watch.forked);
    let Watch {
        mut sampled,
        mut symbolizer,
        mut classes,
        ..
    } = watch;
    let elapsed = started.elapsed();
    let key = inj.undo_plan(&[]).key();
    let gone = matches!(end, Ok(End::TargetExited)) || exec || procfs::state(pid).is_none();
    let bytes = if gone {
        // Nothing of ours is left in the process: its code and maps went with the exit or exec.
        let bytes = inj.segment_ref().data().to_vec();
        drop(inj);
        guardian.uninjected(key);
        bytes
    } else {
        // A child forked since the last look: restored before the parent.
        let found = forked::restore_children(&inj.undo_plan(&[]), &children);
        say_forked(pid, &found);
        children.extend(found);
        match tracer.seize(pid) {
            Ok(()) => {
                let (undone, bytes) = inj.unpatch_then_read(&mut tracer, <[u8]>::to_vec);
                tracer.release(pid);
                match undone {
                    Ok(_) => guardian.uninjected(key),
                    // The guardian keeps the plan and tries once more when we exit.
                    Err(e) => eprintln!("oi-trace: unpatching pid {pid}: {e}"),
                }
                bytes
            }
            Err(e) => {
                // Gone meanwhile, or traced by someone else: the guardian keeps the plan and
                // undoes what is left once we exit.
                eprintln!("oi-trace: cannot seize pid {pid} to unpatch it: {e}");
                inj.segment_ref().data().to_vec()
            }
        }
    };
    let end = end?;
    if end == End::TargetExited {
        eprintln!("oi-trace: the target exited; the report holds the allocations made until then");
    }
    if exec {
        eprintln!(
            "oi-trace: the target executed a new program; the report holds the allocations made \
             until then"
        );
    }
    let snapshot = Snapshot::read(&bytes).map_err(|e| Error::internal(e.to_string()))?;
    // The last samples: no wrapper runs any more (or the process is gone), every record is
    // complete.
    sampled.drain(&bytes, &mut symbolizer);
    functions.sort_by(|a, b| (&a.file, &a.function).cmp(&(&b.file, &b.function)));
    let sites = sites_report(
        &sampled,
        &snapshot,
        &mut symbolizer,
        &mut classes,
        bucket_s,
        elapsed,
    );
    let report = InjectReport::new(
        &snapshot,
        pid,
        elapsed,
        bucket_s,
        functions,
        &children,
        Some((&sites, sampled.stats(&snapshot))),
    );
    print(&report, args, scope);
    let args = effective_args(args, &sampled);
    super::write_pictures(&sites, &args, scope)?;
    super::pprof::write(&sites, &args, &scope.place, elapsed, &mut symbolizer)?;
    let s = &report.sampling;
    if let Some(s) = s
        && s.dropped + s.bad > 0
    {
        eprintln!(
            "oi-trace: {} sampled allocation(s) lost: the sample ring was full ({} records) or \
             held records that could not be right ({}); sites count the others",
            thousands(s.dropped + s.bad),
            RING_ENTRIES,
            thousands(s.bad)
        );
    }
    Ok(Outcome::Done)
}

/// `args` as the outputs of the uprobe path read them: the sampling this run used.
fn effective_args(args: &AllocsArgs, sampled: &Sampled) -> AllocsArgs {
    let mut args = args.clone();
    args.sample_bytes = sampled.sample_bytes();
    args.every = (sampled.every() > 1).then_some(sampled.every());
    args
}

/// The sampled sites, types and classes as the uprobe path's report has them.
fn sites_report(
    sampled: &Sampled,
    snapshot: &Snapshot,
    symbolizer: &mut Symbolizer,
    classes: &mut DwarfClasses,
    bucket_s: &[f64],
    elapsed: Duration,
) -> Report {
    let now_ns = monotonic_ns();
    let kernel = sampled.kernel_view(snapshot, record::clock::rdtsc(), now_ns);
    report::build(
        &kernel,
        &|id| sampled.stack(id),
        symbolizer,
        classes,
        &Context {
            pid: Some(sampled.pid()),
            elapsed_s: elapsed.as_secs_f64(),
            every: sampled.every(),
            sample_bytes: sampled.sample_bytes(),
            bucket_s,
            blocks: Blocks::Glibc,
            unwind: UnwindStats::default(),
            now_ns,
        },
    )
}

/// One stderr line per child found carrying the hooks (and restored).
fn say_forked(pid: i32, children: &[i32]) {
    for child in children {
        eprintln!(
            "oi-trace: pid {pid} forked pid {child}, which ran the patched code: unpatched it;              its allocations until then are in the counts (counters.forked)"
        );
    }
}

/// The live table: twice `--max-live` entries (a power of two), so that probing stays short.
fn layout_for(max_live: u32) -> DataLayout {
    let table = (u64::from(max_live) * 2)
        .next_power_of_two()
        .clamp(1024, oi_common::inject::MAX_TABLE_SLOTS);
    let layout = DataLayout::new(DataLayout::DEFAULT.slots, table).unwrap_or(DataLayout::DEFAULT);
    layout.with_ring(RING_ENTRIES).unwrap_or(layout)
}

/// The functions to patch (glibc's C allocator functions, analysed in the target's memory),
/// and every function's mechanism; or why the run stays on uprobes (see the module's docs).
fn choose(
    pid: i32,
    files: &[File],
    file_hooks: &[FileHooks],
    blocks: Blocks,
) -> Result<(Vec<Candidate>, Vec<FunctionMechanism>), String> {
    if blocks != Blocks::Glibc {
        return Err(format!(
            "the process allocates with {} (its C++ entry points do not go through a hooked C \
             function)",
            if blocks == Blocks::Jemalloc {
                "jemalloc"
            } else {
                "an allocator other than glibc's"
            }
        ));
    }
    let mut candidates = Vec::new();
    let mut functions = Vec::new();
    let mut refused = Vec::new();
    for (file, h) in files.iter().zip(file_hooks) {
        if h.functions.is_empty() {
            continue;
        }
        let name = file
            .target_path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        if name.starts_with("libstdc++") && h.functions.iter().all(|f| is_cxx(&f.name)) {
            functions.extend(h.functions.iter().map(|f| FunctionMechanism {
                file: name.clone(),
                function: f.name.clone(),
                mechanism: "none",
            }));
            continue;
        }
        let shared_glibc = hooks::is_glibc(&file.binary)
            && name.starts_with("libc.so")
            && h.functions.iter().all(|f| !is_cxx(&f.name));
        if !shared_glibc {
            return Err(format!(
                "{} defines allocator functions of its own ({})",
                file.target_path.display(),
                h.functions
                    .iter()
                    .map(|f| f.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let bias = load_bias(pid, file).ok_or_else(|| format!("{name} is not mapped in {pid}"))?;
        for f in &h.functions {
            match candidate(pid, &file.binary, f, bias) {
                Ok(prologue) => {
                    let Some(shape) = Shape::of(f.function, hooks::align_source(&f.name)) else {
                        refused.push(format!("{}: no wrapper shape", f.name));
                        continue;
                    };
                    candidates.push(Candidate {
                        file: name.clone(),
                        name: f.name.clone(),
                        shape,
                        prologue,
                    });
                    functions.push(FunctionMechanism {
                        file: name.clone(),
                        function: f.name.clone(),
                        mechanism: "inject",
                    });
                }
                Err(why) => refused.push(format!("{}: {why}", f.name)),
            }
        }
    }
    if !refused.is_empty() {
        return Err(format!("not patched: {}", refused.join("; ")));
    }
    Ok((candidates, functions))
}

/// `operator new`/`delete` (any variant).
fn is_cxx(name: &str) -> bool {
    name.starts_with("_Z")
}

/// The load bias of `file` in `pid` (its lowest mapping).
fn load_bias(pid: i32, file: &File) -> Option<u64> {
    let maps = procfs::mappings(pid).ok()?;
    let m = maps
        .iter()
        .filter(|m| m.path == file.target_path)
        .min_by_key(|m| m.start)?;
    file.binary.load_bias(m.start, m.offset)
}

/// The prologue of `f` as the process has it in memory (its symbol's size of bytes).
fn candidate(pid: i32, binary: &Binary, f: &Hooked, bias: u64) -> Result<Prologue, String> {
    let obj = binary.object().map_err(|e| e.to_string())?;
    let size = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        .filter(|s| s.address() == f.address && s.kind() == SymbolKind::Text)
        .map(|s| s.size())
        .max()
        .ok_or("no symbol size")?;
    // A function is a few KiB at most; a symbol claiming more is not read whole.
    let size = size.min(1 << 16) as usize;
    let entry = f.address.wrapping_add(bias);
    let mut body = vec![0u8; size];
    remote::read_memory(pid, entry, &mut body).map_err(|e| e.to_string())?;
    relocate::analyse(entry, &body).map_err(|e| e.to_string())
}

/// Writes the data part's header, each relocated prologue and its wrapper into the segment.
fn place(
    inj: &mut Injection,
    candidates: &[Candidate],
    layout: &DataLayout,
    bucket_s: &[f64],
    (sampling, period): (Sampling, u64),
) -> Result<Vec<Site>, String> {
    let bucket_ns: Vec<u64> = bucket_s.iter().map(|s| (s * 1e9).round() as u64).collect();
    let mut header = layout.header(record::clock::ns_per_tick_q32(), usable::GLIBC, &bucket_ns);
    let pid = inj.pid();
    let seg = inj.segment();
    if sampling != Sampling::Off {
        let main_stack_end = procfs::main_stack_end(pid).unwrap_or(0);
        header = layout
            .sampled(header, sampling.mode(), period, main_stack_end)
            .ok_or("the data part has no sample ring")?;
        let draws = samples::draws_bytes(&samples::draws(sampling.mode(), period, sample_seed()));
        let at = layout.draws_offset() as usize;
        seg.data_mut()
            .get_mut(at..at + draws.len())
            .ok_or("the data part has no room for the sampling draws")?
            .copy_from_slice(&draws);
    }
    seg.data_mut()[..header.to_bytes().len()].copy_from_slice(&header.to_bytes());
    let data = seg.data_addr();
    let mut sites = Vec::with_capacity(candidates.len());
    for c in candidates {
        let at = seg.code_at(MAX_RELOCATED).map_err(|e| e.to_string())?;
        let relocated =
            relocate::relocate(&c.prologue, at).map_err(|e| format!("{}: {e}", c.name))?;
        seg.write(at, &relocated.code).map_err(|e| e.to_string())?;
        let wrapper = seg
            .code_at(record::wrapper::MAX_LEN)
            .map_err(|e| e.to_string())?;
        let code =
            record::wrapper(c.shape, sampling, wrapper, at, data).map_err(|e| e.to_string())?;
        seg.write(wrapper, &code).map_err(|e| e.to_string())?;
        sites.push(Site { relocated, wrapper });
    }
    // Each thread slot's depth says whether its thread is inside a wrapper.
    inj.set_in_flight_words(
        (layout.slots_offset() + offset::DEPTH) as usize,
        layout.slots,
        oi_common::inject::SLOT_SIZE,
    );
    Ok(sites)
}

/// The event loop's view of a run in the target.
struct Watch<'a> {
    inj: &'a Injection,
    args: &'a AllocsArgs,
    scope: &'a Scope,
    bucket_s: &'a [f64],
    functions: &'a [FunctionMechanism],
    started: Instant,
    last_check: Instant,
    /// The process executed a new program: our code part is gone from its maps.
    exec: bool,
    armed: String,
    /// Forked children found carrying the hooks, and restored.
    forked: Vec<i32>,
    sampled: Sampled,
    symbolizer: Symbolizer,
    classes: DwarfClasses,
}

impl Profiler for Watch<'_> {
    fn armed(&mut self) {
        eprintln!("{}", self.armed);
    }

    fn housekeeping(&mut self) -> Option<End> {
        self.sampled
            .drain(self.inj.segment_ref().data(), &mut self.symbolizer);
        if self.last_check.elapsed() < Duration::from_secs(1) {
            return None;
        }
        self.last_check = Instant::now();
        let pid = self.inj.pid();
        let code = self.inj.segment_ref().code();
        if procfs::state(pid).is_some() && !patch::still_ours(pid, &code) {
            self.exec = true;
            return Some(End::Finished);
        }
        let found = forked::restore_children(&self.inj.undo_plan(&[]), &self.forked);
        say_forked(pid, &found);
        self.forked.extend(found);
        None
    }

    fn interval(&mut self) {
        let bytes = self.inj.segment_ref().data().to_vec();
        self.sampled.drain(&bytes, &mut self.symbolizer);
        match Snapshot::read(&bytes) {
            Ok(snapshot) => {
                let sites = sites_report(
                    &self.sampled,
                    &snapshot,
                    &mut self.symbolizer,
                    &mut self.classes,
                    self.bucket_s,
                    self.started.elapsed(),
                );
                let report = InjectReport::new(
                    &snapshot,
                    self.inj.pid(),
                    self.started.elapsed(),
                    self.bucket_s,
                    self.functions.to_vec(),
                    &self.forked,
                    Some((&sites, self.sampled.stats(&snapshot))),
                );
                print(&report, self.args, self.scope);
            }
            Err(e) => eprintln!("oi-trace: {e}"),
        }
    }
}

/// The options `--mechanism inject` cannot honour yet: one line, exit 2.
pub fn validate(args: &AllocsArgs) -> Result<()> {
    let unsupported = [
        (args.scope.cgroup.is_some(), "--cgroup"),
        (args.pprof_lifetimes.is_some(), "--pprof-lifetimes"),
    ];
    if let Some((_, option)) = unsupported.iter().find(|(given, _)| *given) {
        return Err(Error::input(format!(
            "--mechanism inject counts the allocations of one process and keeps no lifetimes \
             per site: {option} needs --mechanism uprobes"
        )));
    }
    Ok(())
}

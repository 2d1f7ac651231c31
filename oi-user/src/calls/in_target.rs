//! `oi-trace calls --mechanism inject`: the calls beneath the entry timed inside the process,
//! by stubs the in-target core (`inject`) patches each selected function's entry to jump to,
//! instead of two uprobe traps per call.
//!
//! Which functions: those the uprobe path would instrument (`Target`), each analysed in the
//! target's memory (`relocate::analyse`); a function whose first instructions cannot be moved
//! is left untimed and listed on stderr with the reason (and its calls do not appear in the
//! tree: their callees show under its caller). The entry function must be patchable. Where the
//! process maps the C++ unwinder, `_Unwind_RaiseException`, `_Unwind_Resume_or_Rethrow` and
//! `_Unwind_ForcedUnwind` are patched too, to put the thread's hooked return addresses back
//! before an exception unwinds, and `__cxa_begin_catch`, to close the frames it unwound and
//! hook the live ones again (`spans::stubs::Unwinding`); if any of them cannot be patched, the
//! run is refused: an exception through a hooked frame would end the program.
//!
//! The run: a segment near each file with functions to patch (the one with the entry
//! function holds the data part and the exit stub; the others reach them by absolute
//! address), every stub placed, then the patches, the entry function's file last, so that a
//! window never opens before every hook is in place. The guardian holds every undo plan. The
//! event loop drains the rings every housekeeping tick into `spans::nodes`. At the end
//! (`--count`, `--duration`, Ctrl-C, the target's exit), all segments are unpatched as one
//! (`patch::unpatch_together`: bytes, hooked return addresses, then the segments once no
//! thread is inside), the rings drained a last time, and the tree printed by the same code as
//! the uprobe path's.

use std::time::{Duration, Instant};

use oi_common::{
    calls::{counter, global},
    inject::spans::SpansLayout,
};

use super::report::{JsonInject, JsonUntimed};
use super::{Outcome, finish, program, target::Target};
use crate::{
    cli::calls::CallsArgs,
    debuginfo::find_function,
    error::{Error, Result},
    event_loop::{End, EventLoop, Profiler},
    guardian::Guardian,
    inferior::{Tracer, procfs, remote},
    inject::{
        patch::{self, Injection, Site},
        record::clock::ns_per_tick_q32,
        relocate::{self, MAX_RELOCATED, Prologue},
        spans::{
            nodes::Nodes,
            reader::{self, View},
            stubs::{self, ENTRY_MAX, EXIT_MAX, Place, UNWIND_MAX, Unwinding},
            undo::Returns,
        },
    },
    probe::scope::Scope,
    report::tree::thousands,
};

/// The runtime's functions that see an exception's unwinding begin or end.
const UNWINDING: [(&str, Unwinding); 4] = [
    ("_Unwind_RaiseException", Unwinding::Raise),
    ("_Unwind_Resume_or_Rethrow", Unwinding::Raise),
    ("_Unwind_ForcedUnwind", Unwinding::Raise),
    ("__cxa_begin_catch", Unwinding::Catch),
];

/// What a patched entry leads to.
#[derive(Debug, Clone, Copy)]
enum Hook {
    /// A timed function: its id, and whether it is the entry function.
    Call {
        id: u32,
        window: bool,
    },
    Unwind(Unwinding),
}

/// One function to patch.
struct Candidate {
    file: usize,
    name: String,
    hook: Hook,
    prologue: Prologue,
}

/// Runs the profile in the target.
pub(super) fn profile(args: &CallsArgs, scope: &Scope, target: &Target) -> Result<()> {
    let pid = scope.pid.ok_or_else(|| {
        Error::input("--mechanism inject patches one process: give --pid, not --cgroup")
    })?;
    // Forked before any thread or descriptor of ours exists but the files read.
    let mut guardian = Guardian::spawn_for_inject()
        .map_err(|e| Error::internal(format!("starting the guardian: {e}")))?;
    let (candidates, refused) = choose(pid, target)?;
    if !refused.is_empty() {
        eprintln!(
            "oi-trace: {} function(s) left untimed (their first instructions cannot be moved; \
             their callees show under their caller):",
            refused.len()
        );
        for (name, why) in &refused {
            eprintln!("oi-trace:   {name}: {why}");
        }
    }
    let layout = SpansLayout::DEFAULT;
    let primary = candidates
        .iter()
        .find(|c| matches!(c.hook, Hook::Call { window: true, .. }))
        .map(|c| c.file)
        .ok_or_else(|| Error::internal("no entry function among the candidates"))?;
    // Files in patching order: the entry function's last.
    let mut files: Vec<usize> = candidates.iter().map(|c| c.file).collect();
    files.sort_unstable();
    files.dedup();
    files.retain(|&f| f != primary);
    files.push(primary);

    let attach_start = Instant::now();
    let mut tracer = Tracer::default();
    tracer.seize(pid)?;
    let mut injections: Vec<(usize, Injection)> = Vec::new();
    let made = make_segments(
        &mut tracer,
        pid,
        &candidates,
        &files,
        primary,
        layout,
        &mut guardian,
        &mut injections,
    );
    let placed = made.and_then(|place| {
        let sites = place_all(&mut injections, &candidates, place)?;
        Ok((place, sites))
    });
    let (place, sites) = match placed {
        Ok(p) => p,
        Err(e) => {
            give_up(&mut tracer, pid, &injections, &mut guardian);
            return Err(e);
        }
    };
    let primary_index = injections.len() - 1;
    injections[primary_index].1.set_returns(Returns {
        data: place.data,
        slots: layout.slots,
        exit: place.exit,
    });
    let mut untimed: Vec<Refused> = Vec::new();
    for (i, (_, inj)) in injections.iter_mut().enumerate() {
        let of: Vec<&(usize, Site)> = sites.iter().filter(|(j, _)| *j == i).collect();
        let to_patch: Vec<Site> = of.iter().map(|(_, s)| s.clone()).collect();
        let results = match inj.patch(&mut tracer, &to_patch, &mut |u| guardian.inject(u)) {
            Ok(r) => r,
            Err(e) => {
                give_up(&mut tracer, pid, &injections, &mut guardian);
                return Err(Error::sample(format!("patching pid {pid}: {e}")));
            }
        };
        for (result, site) in results.iter().zip(&to_patch) {
            let Err(why) = result else { continue };
            let c = candidates
                .iter()
                .find(|c| c.prologue.entry == site.entry())
                .expect("a site of a candidate");
            match c.hook {
                Hook::Call { window: false, .. } => untimed.push((c.name.clone(), why.to_string())),
                _ => {
                    give_up(&mut tracer, pid, &injections, &mut guardian);
                    return Err(Error::sample(format!(
                        "pid {pid}: {} could not be patched ({why}); nothing is left patched",
                        c.name
                    )));
                }
            }
        }
    }
    tracer.release(pid);
    for (name, why) in &untimed {
        eprintln!("oi-trace: left untimed: {name}: {why}");
    }
    let attach_ms = attach_start.elapsed().as_millis();
    // What is left: seizing the process again to unpatch it, and reading its maps.
    crate::privileges::keep_only(crate::privileges::AFTER_ARMING);
    let timed = candidates
        .iter()
        .filter(|c| matches!(c.hook, Hook::Call { .. }))
        .count()
        - untimed.len();
    let armed = format!(
        "oi-trace: attached in the target: patched {} function(s) beneath {} in {} ({} left \
         untimed) in {} ms; armed {} ms after start",
        thousands(timed as u64),
        target.entry_name,
        scope.place,
        refused.len() + untimed.len(),
        attach_ms,
        crate::uptime::elapsed().as_millis(),
    );

    // Our view of the data part; the injection (and with it the mapping) lives to the end.
    let view = {
        let data = injections[primary_index].1.segment().data_mut();
        // SAFETY: our own shared read-write mapping of the data part, page aligned, which the
        // injection keeps mapped until it is dropped at the end of this function.
        unsafe { View::new(data.as_mut_ptr(), data.len()) }
    };
    let started = Instant::now();
    let mut watch = Watch {
        view,
        layout,
        nodes: Nodes::new(ns_per_tick_q32(), args.max_nodes, args.depth, args.count),
        code: injections[primary_index].1.segment_ref().code(),
        pid,
        args,
        scope,
        target,
        started,
        last_check: Instant::now(),
        exec: false,
        armed,
        bad: 0,
    };
    let end = EventLoop::new(args.scope.duration, args.scope.interval)
        .watch_process(pid)
        .run(&mut watch);
    let elapsed = started.elapsed();
    let gone = matches!(end, Ok(End::TargetExited)) || watch.exec || procfs::state(pid).is_none();
    if !gone {
        match tracer.seize(pid) {
            Ok(()) => {
                let all: Vec<&Injection> = injections.iter().map(|(_, i)| i).collect();
                match patch::unpatch_together(&mut tracer, &all) {
                    Ok(_) => forget(&injections, &mut guardian),
                    // The guardian keeps the plans and tries once more when we exit.
                    Err(e) => eprintln!("oi-trace: unpatching pid {pid}: {e}"),
                }
                tracer.release(pid);
            }
            Err(e) => eprintln!("oi-trace: cannot seize pid {pid} to unpatch it: {e}"),
        }
    } else {
        forget(&injections, &mut guardian);
    }
    // The last events: every thread is out of the stubs, or the process is gone.
    watch.drain();
    let end = end?;
    if end == End::TargetExited {
        eprintln!("oi-trace: the target exited; the tree holds the calls made until then");
    }
    if watch.exec {
        eprintln!(
            "oi-trace: the target executed a new program; the tree holds the calls made until \
             then"
        );
    }
    let totals = reader::totals(view, layout);
    let no_slot = view.load(oi_common::inject::offset::NO_SLOT);
    let outcome = Outcome {
        snapshot: watch.snapshot(),
        elapsed,
        cost: None,
        still_inside: watch.nodes.open_windows(),
        traced_lost: 0,
        exited_inside: 0,
        inject: None,
    };
    let c = watch.nodes.counters;
    let bad = watch.bad + c.bad;
    drop(watch);
    let untimed_list = refused
        .iter()
        .map(|(name, why)| JsonUntimed {
            name: name.clone(),
            reason: why.clone(),
        })
        .chain(untimed.iter().map(|(name, why)| JsonUntimed {
            name: name.clone(),
            reason: why.clone(),
        }))
        .collect();
    let outcome = Outcome {
        inject: Some(JsonInject {
            patched: timed as u64,
            untimed: untimed_list,
            dropped: totals.dropped,
            shadow_full: totals.shadow_full,
            interrupted: totals.interrupted,
            resynced: totals.resynced,
            orphan_returns: totals.orphan_returns,
            no_slot,
        }),
        ..outcome
    };
    finish(args, scope, target, &|_| [0; _], &outcome, &[])?;
    let warn = |n: u64, what: &str| {
        if n > 0 {
            eprintln!("oi-trace: {} {what}", thousands(n));
        }
    };
    warn(
        totals.dropped,
        "call(s) not timed: a thread's event ring was full (oi-trace reads it every 100 ms)",
    );
    warn(
        totals.shadow_full,
        "call(s) not timed: more open calls than a thread's shadow stack holds",
    );
    warn(
        totals.interrupted,
        "call(s) of a signal handler not timed: the handler interrupted a stub",
    );
    warn(no_slot, "call(s) not timed: no free thread slot");
    warn(
        totals.resynced,
        "open call(s) dropped with their return still hooked (a stack switch or a longjmp); \
         their real return addresses were put back",
    );
    warn(bad, "event(s) refused as malformed");
    drop(injections);
    Ok(())
}

/// The candidates (every function to time, and the unwinder's functions), and the functions
/// refused with the reason. The entry function refused is an error.
/// A function left untimed: its name and why.
type Refused = (String, String);

fn choose(pid: i32, target: &Target) -> Result<(Vec<Candidate>, Vec<Refused>)> {
    let mut candidates = Vec::new();
    let mut refused = Vec::new();
    let unwinding = |name: &str| UNWINDING.iter().any(|(n, _)| *n == name);
    for (id, f) in target.functions.iter().enumerate() {
        if f.name.ends_with("[not instrumented]") || unwinding(&f.symbol.mangled) {
            continue;
        }
        let file = &target.files[f.file];
        let analysed = file
            .load_bias(pid)
            .ok_or_else(|| format!("{} is not mapped", file.target_path.display()))
            .and_then(|bias| prologue(pid, f.symbol.address.wrapping_add(bias), f.symbol.size));
        match analysed {
            Ok(prologue) => candidates.push(Candidate {
                file: f.file,
                name: f.name.clone(),
                hook: Hook::Call {
                    id: id as u32,
                    window: f.is_entry,
                },
                prologue,
            }),
            Err(why) if f.is_entry => {
                return Err(Error::input(format!(
                    "--mechanism inject: the entry function {} cannot be patched: {why}",
                    f.symbol.demangled
                )));
            }
            Err(why) => refused.push((f.symbol.demangled.clone(), why)),
        }
    }
    for (index, file) in target.files.iter().enumerate() {
        for (name, what) in UNWINDING {
            let Ok(found) = find_function(&file.binary, name) else {
                continue;
            };
            for s in found.into_iter().filter(|s| s.mangled == name) {
                let prologue = file
                    .load_bias(pid)
                    .ok_or_else(|| format!("{} is not mapped", file.target_path.display()))
                    .and_then(|bias| prologue(pid, s.address.wrapping_add(bias), s.size))
                    .map_err(|why| {
                        Error::sample(format!(
                            "--mechanism inject: {name} of {} cannot be patched ({why}), and an \
                             exception through a hooked call would end the program",
                            file.target_path.display()
                        ))
                    })?;
                candidates.push(Candidate {
                    file: index,
                    name: name.to_string(),
                    hook: Hook::Unwind(what),
                    prologue,
                });
            }
        }
    }
    Ok((candidates, refused))
}

/// The function at `entry` of `size` bytes, as the process has it, analysed for patching.
fn prologue(pid: i32, entry: u64, size: u64) -> Result<Prologue, String> {
    // A function is a few KiB at most; a symbol claiming more is not read whole.
    let mut body = vec![0u8; size.min(1 << 16) as usize];
    remote::read_memory(pid, entry, &mut body).map_err(|e| e.to_string())?;
    relocate::analyse(entry, &body).map_err(|e| e.to_string())
}

/// One segment per file in `files` (the primary's, last, with the data part), pushed onto
/// `injections` as they are made; where the stubs find the data part and the exit stub.
#[allow(clippy::too_many_arguments)]
fn make_segments(
    tracer: &mut Tracer,
    pid: i32,
    candidates: &[Candidate],
    files: &[usize],
    primary: usize,
    layout: SpansLayout,
    guardian: &mut Guardian,
    injections: &mut Vec<(usize, Injection)>,
) -> Result<Place> {
    // The primary first: every stub needs its addresses; it is patched last all the same.
    let mut order: Vec<usize> = vec![primary];
    order.extend(files.iter().copied().filter(|&f| f != primary));
    let mut made: Vec<(usize, Injection)> = Vec::new();
    let mut result = Ok(());
    for &file in &order {
        let of: Vec<&Candidate> = candidates.iter().filter(|c| c.file == file).collect();
        let stubs: usize = of
            .iter()
            .map(|c| {
                MAX_RELOCATED
                    + match c.hook {
                        Hook::Call { .. } => ENTRY_MAX,
                        Hook::Unwind(_) => UNWIND_MAX,
                    }
            })
            .sum();
        let (code_len, data_len) = if file == primary {
            ((EXIT_MAX + stubs) as u64, layout.size())
        } else {
            (stubs as u64, 1)
        };
        let Some(span) = patch::span_of(pid, of[0].prologue.entry) else {
            result = Err(Error::sample(format!(
                "pid {pid}: a file to patch is no longer mapped"
            )));
            break;
        };
        match Injection::create(tracer, pid, &[span], (code_len, data_len), &mut |u| {
            guardian.inject(u)
        }) {
            Ok(inj) => made.push((file, inj)),
            Err(e) => {
                result = Err(Error::sample(format!("pid {pid}: no segment for it: {e}")));
                break;
            }
        }
    }
    // Patching order: the primary last.
    if !made.is_empty() {
        let first = made.remove(0);
        made.push(first);
    }
    injections.extend(made);
    result?;
    let primary_inj = &mut injections.last_mut().expect("the primary").1;
    let seg = primary_inj.segment();
    let data = seg.data_addr();
    seg.data_mut()[..oi_common::inject::HEADER_SIZE as usize]
        .copy_from_slice(&layout.header(ns_per_tick_q32()).to_bytes());
    let exit = seg
        .code_at(EXIT_MAX)
        .map_err(|e| Error::internal(e.to_string()))?;
    let place = Place { data, layout, exit };
    let code = stubs::exit_stub(place)?;
    seg.write(exit, &code)
        .map_err(|e| Error::internal(e.to_string()))?;
    Ok(place)
}

/// Relocates every candidate's prologue into its file's segment and writes its stub; the
/// sites by injection index.
fn place_all(
    injections: &mut [(usize, Injection)],
    candidates: &[Candidate],
    place: Place,
) -> Result<Vec<(usize, Site)>> {
    let mut sites = Vec::new();
    for c in candidates {
        let i = injections
            .iter()
            .position(|(f, _)| *f == c.file)
            .expect("a segment per file");
        let seg = injections[i].1.segment();
        let internal = |e: crate::inject::segment::SegmentError| Error::internal(e.to_string());
        let at = seg.code_at(MAX_RELOCATED).map_err(internal)?;
        let relocated = relocate::relocate(&c.prologue, at)
            .map_err(|why| Error::sample(format!("{}: {why}", c.name)))?;
        seg.write(at, &relocated.code).map_err(internal)?;
        let len = match c.hook {
            Hook::Call { .. } => ENTRY_MAX,
            Hook::Unwind(_) => UNWIND_MAX,
        };
        let stub = seg.code_at(len).map_err(internal)?;
        let code = match c.hook {
            Hook::Call { id, window } => stubs::entry_stub(place, stub, id, window, at)?,
            Hook::Unwind(what) => stubs::unwind_stub(place, stub, what, at)?,
        };
        seg.write(stub, &code).map_err(internal)?;
        sites.push((
            i,
            Site {
                relocated,
                wrapper: stub,
            },
        ));
    }
    Ok(sites)
}

/// Undoes whatever was made or patched (a failed start), and tells the guardian.
fn give_up(
    tracer: &mut Tracer,
    pid: i32,
    injections: &[(usize, Injection)],
    guardian: &mut Guardian,
) {
    let all: Vec<&Injection> = injections.iter().map(|(_, i)| i).collect();
    if patch::unpatch_together(tracer, &all).is_ok() {
        forget(injections, guardian);
    }
    tracer.release(pid);
}

fn forget(injections: &[(usize, Injection)], guardian: &mut Guardian) {
    for (_, inj) in injections {
        guardian.uninjected(inj.undo_plan(&[]).key());
    }
}

/// The event loop's view of a run in the target.
struct Watch<'a> {
    view: View,
    layout: SpansLayout,
    nodes: Nodes,
    code: crate::inject::segment::Part,
    pid: i32,
    args: &'a CallsArgs,
    scope: &'a Scope,
    target: &'a Target,
    started: Instant,
    last_check: Instant,
    /// The process executed a new program: our code part is gone from its maps.
    exec: bool,
    armed: String,
    bad: u64,
}

impl Watch<'_> {
    fn drain(&mut self) {
        let nodes = &mut self.nodes;
        let d = reader::drain(self.view, self.layout, &mut |thread, e| {
            nodes.event(thread, e)
        });
        self.bad += d.bad;
    }

    /// The nodes and counters as the uprobe path's maps give them.
    fn snapshot(&self) -> program::Snapshot {
        let c = self.nodes.counters;
        let mut counters = [0; counter::COUNT as usize];
        counters[counter::HITS_INSIDE as usize] = self.nodes.events();
        counters[counter::ABANDONED as usize] = c.abandoned;
        counters[counter::UNMATCHED as usize] = c.unmatched;
        counters[counter::NODES_FULL as usize] = c.nodes_full;
        counters[counter::DEEPER as usize] = c.deeper;
        counters[counter::WINDOWS_SKIPPED as usize] = c.windows_skipped;
        let mut globals = [0; global::COUNT as usize];
        globals[global::WINDOWS_CLOSED as usize] = c.windows_closed;
        program::Snapshot {
            nodes: self.nodes.nodes(),
            counters,
            globals,
        }
    }
}

impl Profiler for Watch<'_> {
    fn armed(&mut self) {
        eprintln!("{}", self.armed);
    }

    fn housekeeping(&mut self) -> Option<End> {
        self.drain();
        if self.last_check.elapsed() >= Duration::from_secs(1) {
            self.last_check = Instant::now();
            if procfs::state(self.pid).is_some() && !patch::still_ours(self.pid, &self.code) {
                self.exec = true;
                return Some(End::Finished);
            }
        }
        let count = self.args.count?;
        (self.nodes.counters.windows_closed >= count).then_some(End::Finished)
    }

    fn interval(&mut self) {
        self.drain();
        let snapshot = self.snapshot();
        super::print_interval(
            self.target,
            self.scope,
            self.args,
            &snapshot,
            self.started.elapsed().as_secs_f64(),
        );
    }
}

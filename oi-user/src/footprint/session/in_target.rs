//! `--mode jit`: samples walked by compiled code running inside the target, on the frozen
//! thread, through `inferior::hijack`. Segments are mapped into a process at its first sample
//! and unmapped when oi-trace lets it go.
//!
//! A site of several roots has, besides its walker of all roots, one walker per root. A sample
//! runs the walker of all; only if that run faults, times out or finds a corrupt object does
//! it run each root's walker in turn, on the same still-frozen thread (restored after every
//! run, as after any fault), so that one bad argument costs only its own result (`{}` in the
//! report). Never leaves the thread anywhere but where it stopped, with its registers back.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use nix::errno::Errno;
use oi_common::EntryRegs;

use super::Probe;
use crate::probe::monotonic_ns;
use crate::{
    error::{Error, Result},
    footprint::audit::{Audit, Injection},
    footprint::measure::{Located, Measurer, RootStream},
    inferior::{
        bootstrap::Bootstrap,
        hijack::{CallEnd, Held, ReadBack, Segments, TscClock},
        remote::{self, RemoteError},
    },
    interp::RemoteReader,
    jit::{self, CompiledWalker, STATUS_FULL, WalkFrame, cache::WalkerCache},
};

/// Outputs up to this size are copied out before the sampled thread resumes.
const EAGER_COPY: u64 = 1 << 20;
/// A walk that returned: where its output is, how many bytes, and the first of them.
type Walked = (u64, u64, Vec<u8>);

/// The walkers of one probe site: of all its roots at once, and (with several roots) of each
/// root alone.
struct Site {
    all: usize,
    each: Vec<usize>,
}

/// How one run of a walker ended, when it did not return a result.
enum RunError {
    /// The walk itself failed (fault, corrupt object, timeout, stack): the thread was given
    /// back intact and another walk may follow.
    Walk(String),
    /// Anything else ends the sample.
    Other(Failure),
}

impl From<RemoteError> for RunError {
    fn from(e: RemoteError) -> Self {
        Self::Other(e.into())
    }
}

/// What one process carries of ours.
struct Mapped {
    seg: Segments,
    bootstrap: Bootstrap,
    /// Last generation tag used in the visited-set table.
    generation: u64,
    /// How long each walker's last walk took, from its start to the tracer seeing its end:
    /// when to look for the next one's end.
    paces: HashMap<usize, Duration>,
}

pub struct InTarget {
    timeout: Duration,
    /// Every (probe, site) walker, flat, in the order they are laid out in the code segment.
    walkers: Vec<Arc<CompiledWalker>>,
    /// probe → site → its walkers, as indices into `walkers`.
    index: Vec<Vec<Site>>,
    processes: HashMap<i32, Mapped>,
    /// Every mapping of our code is recorded here, once the thread it was made through runs
    /// again.
    audit: Audit,
    pending_audit: Option<PendingAudit>,
    /// Where each process's first remote syscalls go, found before capabilities are dropped
    /// (see [`Self::find_bootstrap`]).
    bootstraps: HashMap<i32, Bootstrap>,
    /// The probes' names, for the audit line.
    probe_names: Vec<String>,
    /// Converts the walk times the stub records.
    clock: TscClock,
    /// Time stamp counter ticks of the last sample's walks that returned a result (the
    /// walk alone, in the target, without the ptrace stops around it).
    walk_ticks: u64,
    /// The last sample's moments (CLOCK_MONOTONIC): see [`Phases`].
    phases: Phases,
}

/// When the parts of a sample's pause ended (CLOCK_MONOTONIC ns, 0 when not reached), so that
/// `oi-trace -v` can say where a pause went besides the walk: the thread held (after the
/// trigger's stop reached the tracer), its walks done, and the thread let run (read just before
/// PTRACE_CONT). The copy of a large output comes after `resumed` and is no part of the pause.
#[derive(Debug, Clone, Copy, Default)]
pub struct Phases {
    pub held_ns: u64,
    pub walked_ns: u64,
    pub resumed_ns: u64,
}

/// A mapping made during the sample in progress, to be audited when it ends.
struct PendingAudit {
    tgid: i32,
    code_digest: [u8; 32],
    base: u64,
    code_len: u64,
    total_len: u64,
}

/// How a sample in the target went wrong.
pub enum Failure {
    /// The sample failed; the thread was given back intact.
    Sample(Error),
    /// The thread (or its process) vanished during the sample.
    Gone,
    /// The process executed a new program during the sample.
    Exec,
}

impl From<RemoteError> for Failure {
    fn from(e: RemoteError) -> Self {
        match e {
            RemoteError::Gone(_) => Self::Gone,
            RemoteError::Exec(_) => Self::Exec,
            e => Self::Sample(Error::sample(e.to_string())),
        }
    }
}

/// What the walk of a sample gave.
enum Walk {
    /// The walker of all roots returned: where its output is (copied after the thread runs
    /// again when it is large).
    All(Walked),
    /// Each root walked alone after the walk of all failed: its stream or why it has none.
    Each(Vec<RootStream>),
}

/// Runs `walker` on `frame` until it returns (growing the output as it asks), faults, times
/// out or reports a corrupt object. `names`: the roots it walks, for messages. Adds the
/// time stamp counter's ticks of the walk that returned to `ticks`.
fn run(
    held: &mut Held,
    mapped: &mut Mapped,
    walker: usize,
    frame: &mut WalkFrame,
    names: &str,
    timeout: Duration,
    ticks: &mut u64,
) -> Result<Walked, RunError> {
    loop {
        (frame.out, frame.out_len) = (mapped.seg.output, mapped.seg.output_len);
        frame.generation = mapped.generation;
        let entry = mapped.seg.walkers[walker];
        let expect = mapped.paces.get(&walker).copied().unwrap_or_default();
        let started = Instant::now();
        let back = match held.call(&mapped.seg, entry, frame, timeout, expect)? {
            CallEnd::Returned(back) => {
                mapped.paces.insert(walker, started.elapsed());
                back
            }
            CallEnd::Faulted { signal, addr, .. } => {
                // The walk may have used a generation per root: skip past all of them.
                mapped.generation += frame.nargs;
                return Err(RunError::Walk(format!(
                    "walk of {names} faulted at {addr:#x} ({signal}): a corrupt or freed object"
                )));
            }
            CallEnd::TimedOut => {
                mapped.generation += frame.nargs;
                return Err(RunError::Walk(format!(
                    "walk of {names} did not finish within {timeout:?} (--walk-timeout)"
                )));
            }
        };
        let ReadBack {
            frame: done,
            prefix,
            ticks: walk_ticks,
        } = *back;
        mapped.generation = done.generation;
        if done.status == STATUS_FULL {
            mapped.seg.grow_output(held, done.out_used)?;
            continue;
        }
        jit::check_status(&done).map_err(|e| RunError::Walk(format!("walk of {names}: {e}")))?;
        *ticks += walk_ticks;
        return Ok((mapped.seg.output, done.out_used, prefix));
    }
}

impl InTarget {
    /// Compiles (or finds in the cache) the walker of every probe site.
    pub fn prepare(probes: &mut [Probe], timeout: Duration, audit: Audit) -> Result<Self> {
        let probe_names = probes.iter().map(|p| p.symbol.clone()).collect();
        let cache = WalkerCache::new(WalkerCache::default_disk());
        let mut walkers = Vec::new();
        let mut index = Vec::new();
        for probe in probes {
            let mut sites = Vec::new();
            for m in &probe.measurers {
                let mut compile = |roots: &[usize]| {
                    let (w, found) = cache.get_or_compile(m.plan(), roots).map_err(|e| {
                        Error::internal(format!("compiling the walker of {}: {e}", probe.symbol))
                    })?;
                    walkers.push(w);
                    Ok::<_, Error>((walkers.len() - 1, found))
                };
                let roots = m.roots();
                let (all, found) = compile(&roots)?;
                probe.walkers_cached += usize::from(found);
                // Of several roots, each also alone: after a fault the sample re-walks them
                // one by one, so that one bad argument costs only its own result.
                let mut each = Vec::new();
                if roots.len() > 1 {
                    for &root in &roots {
                        each.push(compile(&[root])?.0);
                    }
                }
                sites.push(Site { all, each });
            }
            index.push(sites);
        }
        Ok(Self {
            timeout,
            walkers,
            index,
            processes: HashMap::new(),
            audit,
            pending_audit: None,
            bootstraps: HashMap::new(),
            probe_names,
            clock: TscClock::new(),
            walk_ticks: 0,
            phases: Phases::default(),
        })
    }

    /// Walks the arguments of one sample inside the frozen thread `tid`, calls
    /// `before_resume`, gives the thread back, and returns the per-argument streams (decoded
    /// by the caller, with the target already running again).
    pub fn sample(
        &mut self,
        (tgid, tid): (i32, i32),
        (probe, site): (usize, usize),
        measurer: &Measurer,
        regs: &EntryRegs,
        bias: u64,
        before_resume: &mut dyn FnMut(),
    ) -> Result<Vec<RootStream>, Failure> {
        let bootstrap = self
            .processes
            .get(&tgid)
            .map(|m| m.bootstrap)
            .or_else(|| self.bootstraps.get(&tgid).copied());
        self.phases = Phases {
            held_ns: monotonic_ns(),
            ..Phases::default()
        };
        let mut held = Held::begin(tgid, tid, bootstrap)?;
        self.walk_ticks = 0;
        let result = self.walk(&mut held, (probe, site), measurer, regs, bias);
        self.phases.walked_ns = monotonic_ns();
        let result = match result {
            Err(Failure::Gone) => return Err(Failure::Gone),
            Err(Failure::Exec) => return Err(Failure::Exec),
            other => other,
        };
        // Small outputs are copied while the thread waits (a target that exits right after the
        // call keeps its sample); large ones after it runs again (the buffer is ours alone),
        // so the pause is the walk, not the copy. The first bytes came with the frame.
        let read = |(output, out_used, mut bytes): Walked| -> Result<Vec<u8>, Failure> {
            let have = bytes.len().min(out_used as usize);
            bytes.resize(out_used as usize, 0);
            if have < bytes.len()
                && let Err(e) = remote::read_memory(tgid, output + have as u64, &mut bytes[have..])
            {
                // Large outputs are copied once the thread runs again: a target that exits
                // right after the sampled call takes them with it.
                if matches!(
                    e,
                    RemoteError::Memory {
                        errno: Errno::ESRCH,
                        ..
                    }
                ) {
                    return Err(Failure::Sample(Error::sample(format!(
                        "the target exited before the sample's output ({} KiB) was copied",
                        out_used / 1024
                    ))));
                }
                return Err(e.into());
            }
            Ok(bytes)
        };
        let (result, early) = match result {
            Ok(Walk::All(walked)) if walked.1 <= EAGER_COPY => (Ok(None), Some(read(walked))),
            Ok(Walk::All(walked)) => (Ok(Some(walked)), None),
            // Walked one by one (and copied) while the thread was held.
            Ok(Walk::Each(streams)) => {
                before_resume();
                let ended = held.end();
                self.flush_audit();
                self.phases.resumed_ns = ended?;
                return Ok(streams);
            }
            Err(e) => (Err(e), None),
        };
        before_resume();
        let ended = held.end();
        self.flush_audit();
        self.phases.resumed_ns = ended?;
        let bytes = match (early, result?) {
            (Some(bytes), _) => bytes?,
            (None, Some(walked)) => read(walked)?,
            (None, None) => unreachable!("a walk read late was kept"),
        };
        jit::split_streams(&bytes, measurer.roots().len())
            .map(|streams| streams.into_iter().map(Ok).collect())
            .map_err(|e| Failure::Sample(Error::sample(e.to_string())))
    }

    /// Walks every root with the site's walker of all roots; if that walk fails and there
    /// are several roots, walks each alone (see [`Walk::Each`]).
    fn walk(
        &mut self,
        held: &mut Held,
        (probe, site): (usize, usize),
        measurer: &Measurer,
        regs: &EntryRegs,
        bias: u64,
    ) -> Result<Walk, Failure> {
        let tgid = held.tgid;
        if !self.processes.contains_key(&tgid) {
            let code: Vec<(&[u8], u64)> = self
                .walkers
                .iter()
                .map(|w| (w.code.as_slice(), w.entry))
                .collect();
            // A run killed while reserving its region left a note of it: remove that first.
            held.remove_pending();
            let seg = Segments::create(held, &code)?;
            // Recorded once the thread runs again (see `flush_audit`): nothing slow happens
            // while it is held.
            self.pending_audit = Some(PendingAudit {
                tgid,
                code_digest: seg.code_digest,
                base: seg.base,
                code_len: seg.code_len,
                total_len: seg.total_len(),
            });
            // Segments a killed oi-trace left (no thread inside) go, through our new stub.
            for old in Segments::leftovers(tgid, held.tid) {
                if old.base != seg.base {
                    let _ = old.destroy(held);
                }
            }
            let bootstrap = held.bootstrap();
            self.processes.insert(
                tgid,
                Mapped {
                    seg,
                    bootstrap,
                    generation: 0,
                    paces: HashMap::new(),
                },
            );
        }
        let Some(mapped) = self.processes.get_mut(&tgid) else {
            return Err(Failure::Gone);
        };
        let names = measurer.arg_names().join(",");
        let located = measurer
            .locate(regs, bias, &RemoteReader::new(tgid))
            .map_err(|e| Failure::Sample(Error::sample(e.to_string())))?;
        let mut frame = WalkFrame {
            nargs: located.len() as u64,
            bias,
            ..WalkFrame::default()
        };
        frame.set_heaps_of(measurer.plan(), tgid);
        let (mut objects, objects_len) = mapped.seg.register_objects();
        let objects_end = objects + objects_len;
        for (i, place) in located.iter().enumerate() {
            frame.args[i] = match place {
                Located::Memory(addr) => *addr,
                Located::Registers(bytes) => {
                    // The walker reads memory: give it a copy of the registers' contents.
                    if objects + bytes.len() as u64 > objects_end {
                        return Err(Failure::Sample(Error::sample(
                            "arguments passed in registers are too large",
                        )));
                    }
                    remote::write_memory(tgid, objects, bytes)?;
                    frame.unseeded |= 1 << i;
                    let at = objects;
                    objects += (bytes.len() as u64).div_ceil(16) * 16;
                    at
                }
                Located::Unavailable => {
                    return Err(Failure::Sample(Error::sample(format!(
                        "{names}: not available at this probe"
                    ))));
                }
            };
        }
        let (scratch, scratch_len) = mapped.seg.scratch();
        (frame.scratch, frame.scratch_len) = (scratch, scratch_len);
        frame.stack_len = mapped.seg.stack_budget();
        let site = &self.index[probe][site];
        let ticks = &mut self.walk_ticks;
        match run(
            held,
            mapped,
            site.all,
            &mut frame,
            &names,
            self.timeout,
            ticks,
        ) {
            Ok(walked) => return Ok(Walk::All(walked)),
            Err(RunError::Other(f)) => return Err(f),
            Err(RunError::Walk(why)) if site.each.is_empty() => {
                return Err(Failure::Sample(Error::sample(why)));
            }
            // Each root is walked again below, this one too (it may be another's fault).
            Err(RunError::Walk(_)) => {}
        }
        // One root spoiled the walk of all: walk each alone, still holding the thread (each
        // run overwrites the output, so each is copied out before the next).
        let whole = frame;
        let mut streams = Vec::with_capacity(site.each.len());
        for (i, &walker) in site.each.iter().enumerate() {
            let mut frame = WalkFrame {
                nargs: 1,
                unseeded: (whole.unseeded >> i) & 1,
                ..whole
            };
            frame.args = [0; jit::MAX_ROOTS];
            frame.args[0] = whole.args[i];
            let name = measurer.arg_names()[i];
            match run(held, mapped, walker, &mut frame, name, self.timeout, ticks) {
                Ok((output, used, mut bytes)) => {
                    let have = bytes.len().min(used as usize);
                    bytes.resize(used as usize, 0);
                    if have < bytes.len() {
                        remote::read_memory(tgid, output + have as u64, &mut bytes[have..])?;
                    }
                    let stream = jit::split_streams(&bytes, 1)
                        .map_err(|e| Failure::Sample(Error::sample(e.to_string())))?;
                    streams.push(Ok(stream.into_iter().next().unwrap_or_default()));
                }
                Err(RunError::Walk(why)) => {
                    streams.push(Err(why));
                }
                Err(RunError::Other(f)) => return Err(f),
            }
        }
        Ok(Walk::Each(streams))
    }

    /// How long the last sample's walks took inside the target, from the stub's call of the
    /// walker to its return (the ones that gave a result; with a grown output, the last
    /// run). None when no walk returned or the counter's rate is not known yet.
    pub fn last_walk_ns(&self) -> Option<u64> {
        (self.walk_ticks > 0)
            .then(|| self.clock.ns(self.walk_ticks))
            .flatten()
    }

    /// The last sample's moments (see [`Phases`]).
    pub fn last_phases(&self) -> Phases {
        self.phases
    }

    /// Finds, now, where the first remote syscalls into `tgid` will go: a restoring stub in the
    /// unused tail of one of its code mappings. Finding that tail reads
    /// `/proc/PID/map_files`, which takes CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE): call it
    /// before they are dropped. Without it the first sample would borrow one of the target's
    /// own `syscall` instructions, whose window a SIGKILL of oi-trace can hit (the thread then
    /// runs on from inside that code with our registers).
    pub fn find_bootstrap(&mut self, tgid: i32) {
        if let Ok(b) = Bootstrap::find(tgid) {
            self.bootstraps.insert(tgid, b);
        }
    }

    /// Writes the audit line of a mapping made during the sample that just ended: after the
    /// thread runs again, so that nothing slow (syslog, an fsync'ed file) lengthens its pause.
    fn flush_audit(&mut self) {
        if let Some(p) = self.pending_audit.take() {
            self.audit.record(&Injection {
                tgid: p.tgid,
                probes: &self.probe_names,
                code_digest: &p.code_digest,
                base: p.base,
                code_len: p.code_len,
                total_len: p.total_len,
            });
        }
    }

    /// Unmaps our segments from `tgid` using its thread `tid`, which is in a quiet
    /// ptrace-stop and stays stopped; returns the signals to deliver once it is detached.
    pub fn unmap(&mut self, tgid: i32, tid: i32) -> Option<remote::HeldSignals> {
        let mapped = self.processes.remove(&tgid)?;
        let warn = |e: &dyn std::fmt::Display| {
            eprintln!(
                "oi-trace: warning: pid {tgid}: could not unmap oi-trace's segments at {:#x} \
                 ({} KiB, inert): {e}",
                mapped.seg.base,
                mapped.seg.total_len() / 1024
            );
        };
        let mut held = match Held::begin(tgid, tid, Some(mapped.bootstrap)) {
            Ok(held) => held,
            Err(RemoteError::Gone(_)) => return None,
            Err(e) => {
                warn(&e);
                return None;
            }
        };
        if let Err(e) = mapped.seg.destroy(&mut held) {
            warn(&e);
        }
        held.restore().ok()
    }

    /// Whether our segments are still mapped in `tgid` (nobody could unmap them yet).
    pub fn holds(&self, tgid: i32) -> bool {
        self.processes.contains_key(&tgid)
    }

    pub fn forget(&mut self, tgid: i32) {
        self.processes.remove(&tgid);
    }
}

//! A profiler's eBPF object from user space, the steps `calls` and `allocs` share: load it
//! (and ready it for multi-uprobe links where the kernel has them), take its maps, arm it,
//! attach one of its programs to file offsets (a link per batch, or one perf event per
//! offset), detach, sum its per-CPU counters, and raise the process limits loading needs.
//! Knows no program's maps or settings beyond the `ARMED` switch every profiler has: a tool's
//! `program.rs` does.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, Map, MapData, MapError, PerCpuArray},
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope},
    },
};

use crate::{
    error::{Error, Result},
    event_loop::StderrLog,
    kernel_features::KernelFeatures,
    privileges,
    probe::{
        multi::{MultiLink, MultiProgram},
        not_permitted::NotPermitted,
        scope::File,
    },
};

/// Offsets per multi-uprobe link: small enough that progress shows on large programs, large
/// enough that the number of links stays small.
const MULTI_BATCH: usize = 2048;

/// A profiler's eBPF object, loaded: the programs and the maps not yet taken, how its uprobes
/// attach on this kernel, its `ARMED` switch, and its aya-log logger under `-v`.
pub struct Loaded {
    pub ebpf: Ebpf,
    pub mechanism: Mechanism,
    pub multi: Option<MultiProgram>,
    logger: Option<aya_log::EbpfLogger<StderrLog>>,
    /// The program's `ARMED` switch: it counts nothing until set.
    armed: Array<MapData, u64>,
}

/// The error of eBPF map `what`.
pub fn map_error(what: &'static str) -> impl Fn(MapError) -> Error {
    move |e| Error::internal(format!("eBPF map {what}: {e}"))
}

/// Loads `object` with `loader`, the one load step of every eBPF object: a refusal for want
/// of privileges says which capabilities load; any other failure names `what` (e.g. "the
/// call-tree eBPF program").
pub fn load_object(loader: &mut EbpfLoader<'_>, object: &[u8], what: &str) -> Result<Ebpf> {
    loader.load(object).map_err(|e| {
        if NotPermitted::among_causes(&e, NotPermitted::LOADING).is_some() {
            Error::input(privileges::refusal(
                "loading eBPF programs",
                privileges::TO_LOAD,
            ))
        } else {
            Error::internal(format!("loading {what}: {e}"))
        }
    })
}

/// The uprobe program `name` of `ebpf`.
pub fn uprobe_mut<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut UProbe> {
    ebpf.program_mut(name)
        .ok_or_else(|| Error::internal(format!("eBPF program {name} missing")))?
        .try_into()
        .map_err(|e| Error::internal(format!("eBPF program {name}: {e}")))
}

/// Loads the uprobe program `name` of `ebpf` into the kernel (for perf-event uprobes).
pub fn load_uprobe(ebpf: &mut Ebpf, name: &str) -> Result<()> {
    uprobe_mut(ebpf, name)?
        .load()
        .map_err(|e| Error::internal(format!("the kernel refused eBPF program {name}: {e}")))
}

/// Raises the process limits ([`raise_limits`]), loads `object` (the profiler's program
/// `program`, named `what` in errors) with `loader`, then readies the program for
/// multi-uprobe links where the kernel has them, else for one perf event per probe, and takes
/// its `ARMED` switch. The logger is taken before anything else reads the log's ring buffer.
/// The one load step of `calls` and `allocs`.
pub fn load_profiler(
    loader: &mut EbpfLoader<'_>,
    object: &[u8],
    program: &str,
    what: &str,
    verbose: bool,
) -> Result<Loaded> {
    raise_limits();
    let mut ebpf = load_object(loader, object, &format!("the {what} eBPF program"))?;
    let (mechanism, multi) = if KernelFeatures::get().uprobe_multi_link {
        let multi = MultiProgram::load(object, &ebpf, program)
            .map_err(|e| Error::internal(e.to_string()))?;
        (Mechanism::MultiLink, Some(multi))
    } else {
        load_uprobe(&mut ebpf, program)?;
        (Mechanism::PerfEvents, None)
    };
    let logger = if verbose {
        Some(
            aya_log::EbpfLogger::init_with_logger(&mut ebpf, StderrLog)
                .map_err(|e| Error::internal(format!("reading the eBPF log: {e}")))?,
        )
    } else {
        None
    };
    // Under -v, or for the bench (`OI_TRACE_VERIFIER_STATS`, which keeps the program as a run
    // without -v loads it: -v adds the log's code paths).
    if verbose || std::env::var_os("OI_TRACE_VERIFIER_STATS").is_some() {
        let verified = match &multi {
            Some(multi) => multi.verified_instructions(),
            None => uprobe_mut(&mut ebpf, program)?
                .info()
                .ok()
                .and_then(|info| info.verified_instruction_count()),
        };
        if let Some(n) = verified {
            eprintln!(
                "oi-trace: the kernel verified the {what} eBPF program in {} instructions \
                 (its limit: 1,000,000)",
                crate::report::tree::thousands(u64::from(n))
            );
        }
    }
    let armed = take_map(&mut ebpf, "ARMED")?;
    Ok(Loaded {
        ebpf,
        mechanism,
        multi,
        logger,
        armed,
    })
}

/// Takes map `name` out of `ebpf`, as the kind of map `T`.
pub fn take_map<T: TryFrom<Map, Error = MapError>>(
    ebpf: &mut Ebpf,
    name: &'static str,
) -> Result<T> {
    let map = ebpf
        .take_map(name)
        .ok_or_else(|| Error::internal(format!("eBPF map {name} missing")))?;
    T::try_from(map).map_err(map_error(name))
}

/// How probes are attached on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    MultiLink,
    PerfEvents,
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::MultiLink => "multi-uprobe links",
            Self::PerfEvents => "one perf event per probe",
        })
    }
}

/// Probes attached together; detached when dropped (multi links) or by [`Loaded::detach`].
#[derive(Default)]
pub struct Attachment {
    multi: Vec<MultiLink>,
    perf: Vec<UProbeLinkId>,
    pub probes: usize,
}

impl Loaded {
    /// Takes the program's map `name`, as the kind of map `T` (each map is taken once).
    pub fn take_map<T: TryFrom<Map, Error = MapError>>(&mut self, name: &'static str) -> Result<T> {
        take_map(&mut self.ebpf, name)
    }

    /// Takes map `name` as it is (for a [`super::mapped::MappedArray`]).
    pub fn take_raw_map(&mut self, name: &'static str) -> Result<Map> {
        self.ebpf
            .take_map(name)
            .ok_or_else(|| Error::internal(format!("eBPF map {name} missing")))
    }

    /// The reader of the program's log (`-v`), for the event loop.
    pub fn take_logger(&mut self) -> Option<aya_log::EbpfLogger<StderrLog>> {
        self.logger.take()
    }

    /// Starts (`true`) or stops counting. A profiler arms once every probe found at start is
    /// attached and disarms before any is detached, so that no call is seen with only some of
    /// its probes in place.
    pub fn arm(&mut self, on: bool) -> Result<()> {
        self.armed
            .set(0, u64::from(on), 0)
            .map_err(map_error("ARMED"))
    }

    /// Attaches the uprobe program `name` to `sites` (file offset, cookie) of the file `path`
    /// (only in process `pid`, if given), as uretprobes when `returns`: one multi-uprobe link
    /// per batch where the kernel has them (with the return flag for `returns`), one perf
    /// event per site elsewhere (where `name` must then be a uretprobe program for
    /// `returns`); `progress(attached so far)` now and then.
    pub fn attach(
        &mut self,
        name: &str,
        path: &Path,
        sites: &[(u64, u64)],
        pid: Option<u32>,
        returns: bool,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Attachment> {
        let mut attachment = Attachment::default();
        match self.multi.as_ref() {
            Some(multi) => {
                for batch in sites.chunks(MULTI_BATCH) {
                    let offsets: Vec<u64> = batch.iter().map(|s| s.0).collect();
                    let cookies: Vec<u64> = batch.iter().map(|s| s.1).collect();
                    let link = multi
                        .attach_as(path, &offsets, &cookies, pid, returns)
                        .map_err(|e| attach_error(&e, path))?;
                    attachment.probes += link.probes;
                    attachment.multi.push(link);
                    progress(attachment.probes);
                }
            }
            None => {
                let program = uprobe_mut(&mut self.ebpf, name)?;
                let scope = uprobe_scope(pid);
                let mut last = Instant::now();
                for &(file_offset, cookie) in sites {
                    let link = program
                        .attach(
                            UProbeAttachPoint {
                                location: UProbeAttachLocation::AbsoluteOffset(file_offset),
                                cookie: Some(cookie),
                            },
                            path,
                            scope,
                        )
                        .map_err(|e| attach_error(&e, path))?;
                    attachment.perf.push(link);
                    attachment.probes += 1;
                    if last.elapsed() > Duration::from_millis(500) {
                        progress(attachment.probes);
                        last = Instant::now();
                    }
                }
                progress(attachment.probes);
            }
        }
        Ok(attachment)
    }

    /// Detaches what [`attach`](Self::attach) attached with program `name`.
    pub fn detach(&mut self, name: &str, attachment: Attachment) {
        drop(attachment.multi);
        if attachment.perf.is_empty() {
            return;
        }
        if let Some(program) = self
            .ebpf
            .program_mut(name)
            .and_then(|p| <&mut UProbe>::try_from(p).ok())
        {
            for link in attachment.perf {
                let _ = program.detach(link);
            }
        }
    }
}

/// A uprobe's scope: process `pid` only, if given, else every process mapping the file.
pub fn uprobe_scope(pid: Option<u32>) -> UProbeScope {
    match pid.and_then(std::num::NonZeroU32::new) {
        Some(pid) => UProbeScope::OneProcess(pid),
        None => UProbeScope::AllProcesses,
    }
}

fn attach_error(e: &(dyn std::error::Error + 'static), path: &Path) -> Error {
    if NotPermitted::among_causes(e, NotPermitted::ATTACHING).is_some() {
        return Error::input(format!(
            "the kernel refused uprobes on {} (permission denied): run oi-trace as root",
            path.display()
        ));
    }
    Error::internal(format!("attaching probes to {}: {e}", path.display()))
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; lifting it is harmless elsewhere.
pub fn raise_memlock_limit() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we pass and nothing else.
    unsafe {
        libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited);
    }
}

/// [`raise_memlock_limit`], and the number of open files: one perf event per probe needs a
/// descriptor each. Raised as far as the hard limits (and `fs.nr_open`) allow.
pub fn raise_limits() {
    raise_memlock_limit();
    let nr_open: libc::rlim_t = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 20);
    let files = libc::rlimit {
        rlim_cur: nr_open,
        rlim_max: nr_open,
    };
    // SAFETY: as above; a refusal (no CAP_SYS_RESOURCE) leaves the limit as it was.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &files) } != 0 {
        let mut current = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct we pass.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut current) == 0 {
                current.rlim_cur = current.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &current);
            }
        }
    }
}

/// A snapshot of a per-CPU counter array: each slot of `out` the sum of that counter over the
/// CPUs (a program adds on the CPU it runs on); a counter that cannot be read is 0.
pub fn sum_counters(map: &PerCpuArray<MapData, u64>, out: &mut [u64]) {
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = map
            .get(&(i as u32), 0)
            .map(|per_cpu| per_cpu.iter().sum())
            .unwrap_or(0);
    }
}

/// Attaches the probes of every file that has some (the `i`th of `sites` for `files[i]`), in order, with
/// `attach`; on the first failure detaches, with `detach`, what was attached before and
/// returns the error, naming the file as the target names it. All or nothing: no file is
/// left probed when another could not be.
pub fn attach_every_file<'a, P, S: 'a, A>(
    program: &mut P,
    files: &[File],
    sites: impl IntoIterator<Item = &'a [S]>,
    mut attach: impl FnMut(&mut P, &File, &[S]) -> Result<A>,
    mut detach: impl FnMut(&mut P, A),
) -> Result<Vec<A>> {
    let mut attachments = Vec::new();
    for (file, sites) in files.iter().zip(sites) {
        if sites.is_empty() {
            continue;
        }
        match attach(program, file, sites) {
            Ok(a) => attachments.push(a),
            Err(e) => {
                for a in attachments {
                    detach(program, a);
                }
                return Err(Error::input(format!(
                    "{e} (in {})",
                    file.target_path.display()
                )));
            }
        }
    }
    Ok(attachments)
}

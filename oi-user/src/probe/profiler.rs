//! A profiler's eBPF object from user space, the steps `calls` and `allocs` share: load it
//! (and ready it for multi-uprobe links where the kernel has them), attach one of its programs
//! to file offsets (a link per batch, or one perf event per offset), detach, sum its per-CPU
//! counters, and raise the process limits loading needs. Knows no program's maps or settings:
//! a tool's `program.rs` does.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{MapData, PerCpuArray},
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope},
    },
};

use crate::{
    error::{Error, Result},
    event_loop::StderrLog,
    kernel_features::KernelFeatures,
    probe::multi::{MultiLink, MultiProgram},
};

/// Offsets per multi-uprobe link: small enough that progress shows on large programs, large
/// enough that the number of links stays small.
const MULTI_BATCH: usize = 2048;

/// A profiler's eBPF object, loaded: the programs and maps, how its uprobes attach on this
/// kernel, and its aya-log logger under `-v`.
pub struct Loaded {
    pub ebpf: Ebpf,
    pub mechanism: Mechanism,
    pub multi: Option<MultiProgram>,
    pub logger: Option<aya_log::EbpfLogger<StderrLog>>,
}

/// Loads `object` (the profiler's program `program`, named `what` in errors) with `loader`,
/// then readies the program for multi-uprobe links where the kernel has them, else for one
/// perf event per probe. The logger is taken before anything else reads the log's ring
/// buffer. The one load step of `calls` and `allocs`.
pub fn load_profiler(
    loader: &mut EbpfLoader<'_>,
    object: &[u8],
    program: &str,
    what: &str,
    verbose: bool,
) -> Result<Loaded> {
    let mut ebpf = loader.load(object).map_err(|e| {
        let msg = e.to_string();
        if msg.contains("Operation not permitted") || msg.contains("EPERM") {
            Error::input(crate::privileges::refusal(
                "loading eBPF programs",
                crate::privileges::TO_LOAD,
            ))
        } else {
            Error::internal(format!("loading the {what} eBPF program: {e}"))
        }
    })?;
    let (mechanism, multi) = if KernelFeatures::get().uprobe_multi_link {
        let multi = MultiProgram::load(object, &ebpf, program)
            .map_err(|e| Error::internal(e.to_string()))?;
        (Mechanism::MultiLink, Some(multi))
    } else {
        let uprobe: &mut UProbe = ebpf
            .program_mut(program)
            .ok_or_else(|| Error::internal(format!("eBPF program {program} missing")))?
            .try_into()
            .map_err(|e| Error::internal(format!("eBPF program {program}: {e}")))?;
        uprobe.load().map_err(|e| {
            Error::internal(format!("the kernel refused eBPF program {program}: {e}"))
        })?;
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
    Ok(Loaded {
        ebpf,
        mechanism,
        multi,
        logger,
    })
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

/// Probes attached together; detached when dropped (multi links) or by [`detach_program`].
#[derive(Default)]
pub struct Attachment {
    multi: Vec<MultiLink>,
    perf: Vec<UProbeLinkId>,
    pub probes: usize,
}

/// Attaches the uprobe program `name` of `ebpf` to `sites` (file offset, cookie) of the file
/// `path` (only in process `pid`, if given): one multi-uprobe link per batch where the kernel
/// has them (`multi`), one perf event per site elsewhere; `progress(attached so far)` now and
/// then. Shared by the profilers.
pub fn attach_program(
    ebpf: &mut Ebpf,
    name: &str,
    multi: Option<&MultiProgram>,
    path: &Path,
    sites: &[(u64, u64)],
    pid: Option<u32>,
    progress: &mut dyn FnMut(usize),
) -> Result<Attachment> {
    attach_program_as(ebpf, name, multi, path, sites, pid, false, progress)
}

/// [`attach_program`], as uretprobes when `returns` (a multi-uprobe link with the return flag;
/// elsewhere `name` must be a uretprobe program).
#[allow(clippy::too_many_arguments)]
pub fn attach_program_as(
    ebpf: &mut Ebpf,
    name: &str,
    multi: Option<&MultiProgram>,
    path: &Path,
    sites: &[(u64, u64)],
    pid: Option<u32>,
    returns: bool,
    progress: &mut dyn FnMut(usize),
) -> Result<Attachment> {
    let mut attachment = Attachment::default();
    match multi {
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
            let program: &mut UProbe = ebpf
                .program_mut(name)
                .and_then(|p| p.try_into().ok())
                .ok_or_else(|| Error::internal(format!("eBPF program {name} missing")))?;
            let scope = match pid.and_then(std::num::NonZeroU32::new) {
                Some(pid) => UProbeScope::OneProcess(pid),
                None => UProbeScope::AllProcesses,
            };
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

/// Detaches what [`attach_program`] attached.
pub fn detach_program(ebpf: &mut Ebpf, name: &str, attachment: Attachment) {
    drop(attachment.multi);
    if attachment.perf.is_empty() {
        return;
    }
    if let Some(program) = ebpf
        .program_mut(name)
        .and_then(|p| <&mut UProbe>::try_from(p).ok())
    {
        for link in attachment.perf {
            let _ = program.detach(link);
        }
    }
}

fn attach_error(e: &(dyn std::error::Error + 'static), path: &Path) -> Error {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cause {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && matches!(io.raw_os_error(), Some(libc::EACCES | libc::EPERM))
        {
            return Error::input(format!(
                "the kernel refused uprobes on {} (permission denied): run oi-trace as root",
                path.display()
            ));
        }
        cause = err.source();
    }
    Error::internal(format!("attaching probes to {}: {e}", path.display()))
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; one perf event per probe needs a
/// descriptor each. Raised as far as the hard limits (and `fs.nr_open`) allow.
pub fn raise_limits() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we pass and nothing else.
    unsafe {
        libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited);
    }
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

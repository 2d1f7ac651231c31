//! The eBPF trigger from user space: load the embedded `oi-ebpf` object, configure and attach
//! probes, read events and counters, and keep the kernel's view of seized and busy processes.
//!
//! Never freezes anything itself; it only tells the kernel side which processes may be frozen.

pub mod multi;

use std::os::fd::{AsRawFd as _, RawFd};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData, RingBuf},
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope},
    },
};
use oi_common::{Event, ProbeConfig, ProbeCounters};

use crate::error::{Error, Result};

const ENTRY_PROGRAM: &str = "oi_entry";
const RETURN_PROGRAM: &str = "oi_return";

/// Where one probe goes: a function at `file_offset` in the file `path`.
#[derive(Debug, Clone)]
pub struct AttachPoint {
    /// Path reachable from our mount namespace (e.g. through `/proc/PID/root`).
    pub path: std::path::PathBuf,
    pub file_offset: u64,
    pub is_return: bool,
    /// Only this process (kernel-side filter), or every process mapping the file.
    pub pid: Option<u32>,
}

pub struct Trigger {
    ebpf: Ebpf,
    config: Array<MapData, ProbeConfig>,
    counters: Array<MapData, ProbeCounters>,
    seized: HashMap<MapData, u32, u8>,
    busy: HashMap<MapData, u32, u32>,
    announced: HashMap<MapData, u32, u8>,
    events: RingBuf<MapData>,
    links: Vec<(&'static str, UProbeLinkId)>,
}

fn map_err(what: &str) -> impl Fn(aya::maps::MapError) -> Error + '_ {
    move |e| Error::internal(format!("eBPF map {what}: {e}"))
}

impl Trigger {
    /// Loads the programs and maps into the kernel; nothing is attached yet.
    pub fn load() -> Result<Self> {
        raise_memlock_limit();
        // The programs read no kernel structures, so they need no BTF relocations: `.btf(None)`
        // spares a second parse of the kernel's BTF (`Ebpf::load` would do two, ~50 ms each).
        let mut ebpf = EbpfLoader::new()
            .btf(None)
            .load(aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/oi-ebpf")))
            .map_err(|e| {
                let msg = e.to_string();
                if msg.contains("Operation not permitted") || msg.contains("EPERM") {
                    Error::input(
                        "not permitted to load eBPF programs: run as root (CAP_BPF and CAP_PERFMON are missing)",
                    )
                } else {
                    Error::internal(format!("loading the eBPF programs: {e}"))
                }
            })?;
        for name in [ENTRY_PROGRAM, RETURN_PROGRAM] {
            let program: &mut UProbe = ebpf
                .program_mut(name)
                .ok_or_else(|| Error::internal(format!("eBPF program {name} missing")))?
                .try_into()
                .map_err(|e| Error::internal(format!("eBPF program {name}: {e}")))?;
            program.load().map_err(|e| {
                Error::internal(format!("the kernel refused eBPF program {name}: {e}"))
            })?;
        }
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| Error::internal(format!("eBPF map {name} missing")))
        };
        let config = Array::try_from(take("CONFIG")?).map_err(map_err("CONFIG"))?;
        let counters = Array::try_from(take("COUNTERS")?).map_err(map_err("COUNTERS"))?;
        let seized = HashMap::try_from(take("SEIZED")?).map_err(map_err("SEIZED"))?;
        let busy = HashMap::try_from(take("BUSY")?).map_err(map_err("BUSY"))?;
        let announced = HashMap::try_from(take("ANNOUNCED")?).map_err(map_err("ANNOUNCED"))?;
        let events = RingBuf::try_from(take("EVENTS")?).map_err(map_err("EVENTS"))?;
        Ok(Self {
            ebpf,
            config,
            counters,
            seized,
            busy,
            announced,
            events,
            links: Vec::new(),
        })
    }

    /// Configures probe `index` and attaches it; the config is in place before the first hit.
    pub fn attach(&mut self, index: u32, config: ProbeConfig, point: &AttachPoint) -> Result<()> {
        self.config
            .set(index, config, 0)
            .map_err(map_err("CONFIG"))?;
        let name = if point.is_return {
            RETURN_PROGRAM
        } else {
            ENTRY_PROGRAM
        };
        let program: &mut UProbe = self
            .ebpf
            .program_mut(name)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| Error::internal(format!("eBPF program {name} missing")))?;
        let scope = match point.pid.and_then(std::num::NonZeroU32::new) {
            Some(pid) => UProbeScope::OneProcess(pid),
            None => UProbeScope::AllProcesses,
        };
        let link = program
            .attach(
                UProbeAttachPoint {
                    location: UProbeAttachLocation::AbsoluteOffset(point.file_offset),
                    cookie: Some(index.into()),
                },
                &point.path,
                scope,
            )
            .map_err(|e| {
                if refused_for_privileges(&e) {
                    return Error::input(format!(
                        "the kernel refused the uprobe on {} (permission denied): run \
                         oi-trace as root (this kernel may want CAP_SYS_ADMIN for uprobes)",
                        point.path.display()
                    ));
                }
                Error::internal(format!(
                    "attaching a uprobe to {} at offset {:#x}: {e}",
                    point.path.display(),
                    point.file_offset
                ))
            })?;
        self.links.push((name, link));
        Ok(())
    }

    /// Detaches every probe; counters and pending events stay readable.
    pub fn disarm(&mut self) {
        for (name, link) in self.links.drain(..) {
            if let Some(program) = self
                .ebpf
                .program_mut(name)
                .and_then(|p| <&mut UProbe>::try_from(p).ok())
            {
                let _ = program.detach(link);
            }
        }
    }

    pub fn counters(&self, index: u32) -> ProbeCounters {
        self.counters.get(&index, 0).unwrap_or_default()
    }

    /// Allows the kernel side to freeze threads of `tgid`.
    pub fn mark_seized(&mut self, tgid: i32) -> Result<()> {
        self.seized
            .insert(tgid as u32, 1, 0)
            .map_err(map_err("SEIZED"))
    }

    pub fn forget(&mut self, tgid: i32) {
        let _ = self.seized.remove(&(tgid as u32));
        let _ = self.busy.remove(&(tgid as u32));
        let _ = self.announced.remove(&(tgid as u32));
    }

    /// Ends a sample: the next Nth hit of `tgid` may freeze a thread again.
    pub fn clear_busy(&mut self, tgid: i32) {
        let _ = self.busy.remove(&(tgid as u32));
    }

    /// The thread the kernel side has frozen (or is freezing) in `tgid`, if any.
    pub fn busy_thread(&self, tgid: i32) -> Option<i32> {
        self.busy.get(&(tgid as u32), 0).ok().map(|t| t as i32)
    }

    /// The next event in the ring buffer, if one is ready.
    pub fn next_event(&mut self) -> Option<Event> {
        let item = self.events.next()?;
        (item.len() >= size_of::<Event>())
            // SAFETY: the kernel side writes exactly an `Event` (repr(C), every bit pattern
            // valid); read_unaligned because ring-buffer records are only 8-byte aligned.
            .then(|| unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<Event>()) })
    }

    /// Readable when events are waiting; for poll(2).
    pub fn events_fd(&self) -> RawFd {
        self.events.as_raw_fd()
    }
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; lifting it is harmless elsewhere.
fn raise_memlock_limit() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we pass and nothing else.
    unsafe {
        libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited);
    }
}

/// Whether an error, or one of its causes, is the kernel's EACCES / EPERM.
fn refused_for_privileges(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cause {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && matches!(io.raw_os_error(), Some(libc::EACCES | libc::EPERM))
        {
            return true;
        }
        cause = err.source();
    }
    false
}

//! The eBPF trigger from user space: load the embedded `footprint` object
//! (`oi-ebpf/src/bin/footprint.rs`), configure and attach probes, read events and counters,
//! and keep the kernel's view of seized and busy processes.
//!
//! Every point is a plain uprobe, return probes included (on the function's return
//! instructions, see `debuginfo::code`): never a uretprobe, whose trampoline address in the
//! stack makes the C++ unwinder call `std::terminate` when an exception passes through.
//!
//! A point is attached as a perf-event uprobe (the path every kernel has). Where the kernel
//! refuses that for want of `CAP_SYS_ADMIN` (a user with only `CAP_BPF` and `CAP_PERFMON`, see
//! `crate::privileges`), it goes through a multi-uprobe link instead (`crate::probe::multi`), which those two
//! suffice for.
//!
//! Never freezes anything itself; it only tells the kernel side which processes may be frozen.

use std::os::fd::{AsRawFd as _, RawFd};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData, RingBuf},
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId},
    },
};
use oi_common::{Event, ProbeConfig, ProbeCounters, point};

use crate::{
    error::{Error, Result},
    kernel_features::KernelFeatures,
    privileges,
    probe::{
        multi::{MultiLink, MultiProgram},
        not_permitted::NotPermitted,
        profiler::{
            load_object, load_uprobe, map_error, raise_memlock_limit, take_map, uprobe_mut,
            uprobe_scope,
        },
    },
};

const ENTRY_PROGRAM: &str = "oi_entry";
/// The eBPF object, loaded by aya and (for multi-uprobe links) by `multi`.
const OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/footprint"));

/// Where one point of a probe goes: the instruction at `file_offset` in the file `path`.
#[derive(Debug, Clone)]
pub struct AttachPoint {
    /// Path reachable from our mount namespace (e.g. through `/proc/PID/root`).
    pub path: std::path::PathBuf,
    pub file_offset: u64,
    /// `oi_common::point` flags (e.g. count only, at a return through a tail call).
    pub flags: u32,
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
    links: Vec<UProbeLinkId>,
    /// The same program, loaded for multi-uprobe links (when the kernel has them): where a
    /// perf-event uprobe is refused for privileges, points are attached through it.
    multi: Option<MultiProgram>,
    multi_links: Vec<MultiLink>,
}

impl Trigger {
    /// Loads the programs and maps into the kernel; nothing is attached yet.
    pub fn load() -> Result<Self> {
        raise_memlock_limit();
        // The programs read no kernel structures, so they need no BTF relocations: `.btf(None)`
        // spares a second parse of the kernel's BTF (`Ebpf::load` would do two, ~50 ms each).
        let mut ebpf = load_object(EbpfLoader::new().btf(None), OBJECT, "the eBPF programs")?;
        let name = ENTRY_PROGRAM;
        load_uprobe(&mut ebpf, name)?;
        // Loaded before the maps are taken out of `ebpf` (it shares them). A kernel that
        // refuses it leaves perf-event uprobes, which need no second copy.
        let multi = KernelFeatures::get()
            .uprobe_multi_link
            .then(|| MultiProgram::load(OBJECT, &ebpf, name).ok())
            .flatten();
        let config = take_map(&mut ebpf, "CONFIG")?;
        let counters = take_map(&mut ebpf, "COUNTERS")?;
        let seized = take_map(&mut ebpf, "SEIZED")?;
        let busy = take_map(&mut ebpf, "BUSY")?;
        let announced = take_map(&mut ebpf, "ANNOUNCED")?;
        let events = take_map(&mut ebpf, "EVENTS")?;
        Ok(Self {
            ebpf,
            config,
            counters,
            seized,
            busy,
            announced,
            events,
            links: Vec::new(),
            multi,
            multi_links: Vec::new(),
        })
    }

    /// Configures probe `index` and attaches one point of it; the config is in place before
    /// the first hit.
    pub fn attach(&mut self, index: u32, config: ProbeConfig, point: &AttachPoint) -> Result<()> {
        self.config
            .set(index, config, 0)
            .map_err(map_error("CONFIG"))?;
        let program = uprobe_mut(&mut self.ebpf, ENTRY_PROGRAM)?;
        let scope = uprobe_scope(point.pid);
        let cookie = point::cookie(index, point.flags);
        let attached = program.attach(
            UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(point.file_offset),
                cookie: Some(cookie),
            },
            &point.path,
            scope,
        );
        let refused = match attached {
            Ok(link) => {
                self.links.push(link);
                return Ok(());
            }
            Err(e) if NotPermitted::among_causes(&e, NotPermitted::ATTACHING).is_some() => e,
            Err(e) => {
                return Err(Error::internal(format!(
                    "attaching a uprobe to {} at offset {:#x}: {e}",
                    point.path.display(),
                    point.file_offset
                )));
            }
        };
        // Perf-event uprobes take CAP_SYS_ADMIN; a multi-uprobe link only CAP_BPF and
        // CAP_PERFMON.
        let via_link = self
            .multi
            .as_ref()
            .map(|multi| multi.attach(&point.path, &[point.file_offset], &[cookie], point.pid));
        match via_link {
            Some(Ok(link)) => {
                self.multi_links.push(link);
                Ok(())
            }
            Some(Err(e)) if NotPermitted::among_causes(&e, NotPermitted::ATTACHING).is_none() => {
                Err(Error::internal(e.to_string()))
            }
            _ => Err(Error::input(format!(
                "the kernel refused the uprobe on {} ({refused}): {}",
                point.path.display(),
                privileges::refusal(
                    "a uprobe",
                    if self.multi.is_some() {
                        &[privileges::BPF, privileges::PERFMON]
                    } else {
                        &[privileges::SYS_ADMIN]
                    }
                )
            ))),
        }
    }

    /// Detaches every probe; counters and pending events stay readable.
    ///
    /// Each uprobe the kernel removes waits for an RCU grace period (about 150 ms here), so
    /// a function with many points (inlined in many places) is detached from several
    /// threads at once, whose waits overlap.
    pub fn disarm(&mut self) {
        // One link holds all its points: dropping it detaches them in one go.
        self.multi_links.clear();
        let Some(program) = self
            .ebpf
            .program_mut(ENTRY_PROGRAM)
            .and_then(|p| <&mut UProbe>::try_from(p).ok())
        else {
            return;
        };
        let links: Vec<_> = self
            .links
            .drain(..)
            .filter_map(|id| program.take_link(id).ok())
            .collect();
        const THREADS: usize = 16;
        let per_thread = links.len().div_ceil(THREADS).max(1);
        let mut links = links.into_iter();
        std::thread::scope(|scope| {
            loop {
                let chunk: Vec<_> = links.by_ref().take(per_thread).collect();
                if chunk.is_empty() {
                    break;
                }
                // Dropping a link detaches its uprobe.
                if std::thread::Builder::new()
                    .spawn_scoped(scope, move || drop(chunk))
                    .is_err()
                {
                    // No thread to spare: the chunk was dropped here, in turn.
                }
            }
        });
    }

    pub fn counters(&self, index: u32) -> ProbeCounters {
        self.counters.get(&index, 0).unwrap_or_default()
    }

    /// Allows the kernel side to freeze threads of `tgid`.
    pub fn mark_seized(&mut self, tgid: i32) -> Result<()> {
        self.seized
            .insert(tgid as u32, 1, 0)
            .map_err(map_error("SEIZED"))
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

    /// Keeps `tgid` busy for good (the run is ending): its Nth hits are dropped from now on,
    /// none freezes a thread. `own_sample`: `tgid` is the process whose sample ends now; its
    /// mark is replaced (the thread it names is about to run), not kept.
    pub fn hold_busy(&mut self, tgid: i32, own_sample: bool) {
        // BPF_ANY overwrites; BPF_NOEXIST keeps the thread of a sample already in flight.
        let flags = if own_sample { 0 } else { 1 };
        let _ = self.busy.insert(tgid as u32, 0, flags);
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

//! The allocation program from user space: load `oi-ebpf/src/bin/allocs.rs` with this run's
//! settings, attach it to the hooks of each file (through the probe layer,
//! `probe::profiler`: multi-uprobe links where the kernel has them, the uretprobes as a second link with the
//! return flag, or as perf events of the program's uretprobe twin elsewhere), and read what its
//! maps hold.
//!
//! What the maps mean is `oi_common::allocs`. Never writes a map the program relies on while
//! probes fire (a thread that exits leaves its slot in `THREADS`, which reads as empty to the
//! next thread of that slot).

use std::{
    path::Path,
    sync::atomic::{AtomicU64, Ordering},
};

use aya::{
    EbpfLoader,
    maps::{Array, HashMap, MapData, PerCpuArray, RingBuf},
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId},
    },
};
use oi_common::allocs::{
    Block, LiveSlot, MAPPED_HOLD_NS, MAX_BUCKETS, MAX_THREAD_SLOTS, Mapped, R_STATE_OFFSET,
    SiteStats, Stack, cookie, counter, mapped,
};

use super::hooks::Site;
use crate::{
    error::{Error, Result},
    event_loop::StderrLog,
    probe::{
        mapped::MappedArray,
        profiler::{
            Attachment, Loaded, Mechanism, load_profiler, load_uprobe, sum_counters, uprobe_mut,
            uprobe_scope,
        },
    },
    unwind::Unwinder,
};

const PROGRAM: &str = "oi_allocs";
/// The same program as a uretprobe, for one perf event per probe.
const RETURN_PROGRAM: &str = "oi_allocs_return";
/// The probe on the dynamic linker's `_dl_debug_state` (a dlopen's files are mapped).
const MAPPED_PROGRAM: &str = "oi_allocs_mapped";
/// The function the dynamic linker calls after each change of the mapped objects (the
/// `r_brk` of `struct r_debug`, where debuggers break).
const DL_DEBUG_STATE: &str = "_dl_debug_state";
const OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/allocs"));

/// What the program is told at load time.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The traced process (pid mode); `None` in cgroup mode.
    pub target_tgid: Option<u32>,
    /// cgroup mode: (id, level).
    pub cgroup: Option<(u64, u32)>,
    /// `--every`.
    pub every: u64,
    /// `--sample-bytes` (0: off).
    pub sample_bytes: u64,
    /// Lifetime bounds in ns (at most `MAX_BUCKETS`).
    pub bucket_ns: Vec<u64>,
    pub max_live: u32,
    pub max_stacks: u32,
    /// Log the program's decisions (aya-log) (`-v`).
    pub verbose: bool,
}

/// One read of the program's maps.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// Stack id → its site's aggregates.
    pub sites: Vec<(u64, SiteStats)>,
    /// Live blocks: (address, block).
    pub live: Vec<(u64, Block)>,
    /// Sums over the CPUs, indexed by `counter::*`.
    pub counters: [u64; counter::COUNT as usize],
}

/// The probes of one file: entries (and `ret` instructions), and uretprobes.
pub struct FileAttachment {
    entries: Attachment,
    returns: Option<Attachment>,
    pub probes: usize,
}

pub struct Program {
    /// The object: programs, how they attach, the `ARMED` switch.
    loaded: Loaded,
    sites: PerCpuArray<MapData, SiteStats>,
    stacks: HashMap<MapData, u64, Stack>,
    live: HashMap<MapData, u64, Block>,
    /// The live table's array half (see [`LiveSlot`]).
    live_slots: MappedArray<LiveSlot>,
    counters: PerCpuArray<MapData, u64>,
    mapped: Array<MapData, u64>,
    mapped_events: Option<RingBuf<MapData>>,
    /// The probes on dynamic linkers' `_dl_debug_state`.
    dl_links: Vec<UProbeLinkId>,
    pub unwinder: Unwinder,
}

/// One site's counts: the sum of its CPUs' values (the program adds on the CPU it runs on).
fn sum_cpus<'a>(per_cpu: impl Iterator<Item = &'a SiteStats>) -> SiteStats {
    let mut total = SiteStats::default();
    for s in per_cpu {
        total += s;
    }
    total
}

/// How long the `_dl_debug_state` probe may hold a thread: [`MAPPED_HOLD_NS`], except on a
/// machine with one CPU, where the held thread would spin on the CPU oi-trace needs (the
/// kernel does not preempt a running eBPF program) and every dlopen would wait out the whole
/// bound for nothing: there it is 0, and the probe only wakes oi-trace, which hooks the new
/// files once it runs (a library's first allocations may then be missed).
fn mapped_hold_ns() -> u64 {
    match aya::util::online_cpus() {
        Ok(cpus) if cpus.len() < 2 => 0,
        _ => MAPPED_HOLD_NS,
    }
}

/// The attach cookie of the `_dl_debug_state` probe in the dynamic linker at `path`: the
/// distance from that function to `_r_debug.r_state` (both in the same file, so the distance
/// holds wherever the file is mapped); `None` where either symbol is missing (a linker without
/// `_r_debug`: every call then holds).
fn r_state_cookie(path: &Path) -> Option<u64> {
    use object::{Object as _, ObjectSymbol as _};
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let address = |name: &str| {
        file.dynamic_symbols()
            .chain(file.symbols())
            .find(|s| s.name() == Ok(name) && s.address() != 0)
            .map(|s| s.address())
    };
    let r_debug = address("_r_debug")?;
    let function = address(DL_DEBUG_STATE)?;
    let to_state = (r_debug + R_STATE_OFFSET).wrapping_sub(function);
    (to_state != 0).then_some(to_state)
}

/// A [`Mapped`] record of the ring buffer.
pub fn mapped_record(data: &[u8]) -> Option<Mapped> {
    (data.len() >= std::mem::size_of::<Mapped>())
        // SAFETY: `Mapped` is plain integers; the length was checked; an unaligned read.
        .then(|| unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<Mapped>()) })
}

impl Program {
    /// Loads the program and its maps; nothing is attached yet.
    pub fn load(settings: &Settings) -> Result<Self> {
        let target = settings.target_tgid.unwrap_or(0);
        let (cgroup_id, cgroup_level) = settings.cgroup.unwrap_or((0, 0));
        let mut bucket_ns = [0u64; MAX_BUCKETS];
        for (slot, ns) in bucket_ns.iter_mut().zip(&settings.bucket_ns) {
            *slot = *ns;
        }
        let bounds = settings.bucket_ns.len().min(MAX_BUCKETS) as u32;
        let log_level: u8 = if settings.verbose { 0xff } else { 0 };
        let hold_ns = mapped_hold_ns();
        let pid_max = pid_max();
        let thread_slots = thread_slots(pid_max);
        let thread_mask = thread_slots - 1;
        let shared_slots = u32::from(u64::from(thread_slots) < pid_max);
        let max_site = settings.max_stacks.max(1);
        let live_slots = live_slots(settings.max_live);
        let live_mask = live_slots - 1;
        let mut loader = EbpfLoader::new();
        // The program reads no kernel structure, so it needs no BTF relocations (see `footprint::trigger`).
        loader
            .btf(None)
            .override_global("TARGET_TGID", &target, true)
            .override_global("CGROUP_ID", &cgroup_id, true)
            .override_global("CGROUP_LEVEL", &cgroup_level, true)
            .override_global("EVERY", &settings.every, true)
            .override_global("SAMPLE_BYTES", &settings.sample_bytes, true)
            .override_global("BUCKET_NS", &bucket_ns, true)
            .override_global("BOUNDS", &bounds, true)
            .override_global("HOLD_NS", &hold_ns, true)
            .override_global("THREAD_MASK", &thread_mask, true)
            .override_global("SHARED_SLOTS", &shared_slots, true)
            .override_global("MAX_SITE", &max_site, true)
            .override_global("AYA_LOG_LEVEL", &log_level, true)
            .map_max_entries("THREADS", thread_slots)
            .override_global("LIVE_MASK", &live_mask, true)
            .map_max_entries("LIVE_SLOTS", live_slots)
            .map_max_entries("LIVE", (settings.max_live - live_slots).max(1))
            .map_max_entries("STACKS", settings.max_stacks.max(1))
            // Index 0 and one per stack.
            .map_max_entries("SITES", settings.max_stacks.max(1) + 1)
            .map_max_entries("SITE_STACKS", settings.max_stacks.max(1) + 1);
        // The unwinder's row array is declared with one entry (every object carries it).
        crate::unwind::size_maps(&mut loader);
        let mut loaded =
            load_profiler(&mut loader, OBJECT, PROGRAM, "allocation", settings.verbose)?;
        if loaded.mechanism == Mechanism::PerfEvents {
            load_uprobe(&mut loaded.ebpf, RETURN_PROGRAM)?;
        }
        load_uprobe(&mut loaded.ebpf, MAPPED_PROGRAM)?;
        let unwinder = Unwinder::new(&mut loaded.ebpf)?;
        Ok(Self {
            sites: loaded.take_map("SITES")?,
            stacks: loaded.take_map("STACKS")?,
            live: loaded.take_map("LIVE")?,
            live_slots: MappedArray::new(loaded.take_raw_map("LIVE_SLOTS")?, "LIVE_SLOTS")?,
            counters: loaded.take_map("COUNTERS")?,
            mapped: loaded.take_map("MAPPED")?,
            mapped_events: Some(loaded.take_map("MAPPED_EVENTS")?),
            dl_links: Vec::new(),
            unwinder,
            loaded,
        })
    }

    /// The reader of the program's log (`-v`), for the event loop.
    pub fn take_logger(&mut self) -> Option<aya_log::EbpfLogger<StderrLog>> {
        self.loaded.take_logger()
    }

    pub fn mechanism(&self) -> Mechanism {
        self.loaded.mechanism
    }

    /// The ring buffer of mapping changes ([`Mapped`] records), for the event loop.
    pub fn take_mapped_events(&mut self) -> Option<RingBuf<MapData>> {
        self.mapped_events.take()
    }

    /// Probes `_dl_debug_state` of the dynamic linker at `path` (in process `pid` only, if
    /// given): from then on, a thread that has mapped new objects waits in the probe until
    /// [`mapped_handled`](Self::mapped_handled) (or [`mapped_hold_ns`]). The cookie lets the
    /// probe read `_r_debug.r_state`, so that only the call after the mapping holds.
    pub fn attach_dynamic_linker(&mut self, path: &Path, pid: Option<u32>) -> Result<()> {
        let cookie = r_state_cookie(path);
        let program = uprobe_mut(&mut self.loaded.ebpf, MAPPED_PROGRAM)?;
        let scope = uprobe_scope(pid);
        let link = program
            .attach(
                UProbeAttachPoint {
                    location: UProbeAttachLocation::Symbol(DL_DEBUG_STATE),
                    cookie,
                },
                path,
                scope,
            )
            .map_err(|e| {
                Error::internal(format!(
                    "probing {DL_DEBUG_STATE} in {}: {e}",
                    path.display()
                ))
            })?;
        self.dl_links.push(link);
        Ok(())
    }

    /// Starts (`true`) or stops counting (see [`Loaded::arm`]); the probes of a file mapped
    /// later are attached while armed.
    pub fn arm(&mut self, on: bool) -> Result<()> {
        self.loaded.arm(on)
    }

    /// Lets go of every thread waiting for mapping change `sequence` and those before it.
    pub fn mapped_handled(&mut self, sequence: u64) {
        let _ = self.mapped.set(mapped::HANDLED, sequence, 0);
    }

    /// Removes the `_dl_debug_state` probes and lets every waiting thread go: nothing
    /// handles mapping changes any more.
    pub fn detach_dynamic_linkers(&mut self) {
        if let Some(program) = self
            .loaded
            .ebpf
            .program_mut(MAPPED_PROGRAM)
            .and_then(|p| <&mut UProbe>::try_from(p).ok())
        {
            for link in self.dl_links.drain(..) {
                let _ = program.detach(link);
            }
        }
        self.mapped_handled(u64::MAX);
    }

    /// Attaches the program to `sites` of the file `path` (only in process `pid`, if given):
    /// the uretprobes apart from the rest.
    pub fn attach(
        &mut self,
        path: &Path,
        sites: &[Site],
        pid: Option<u32>,
        progress: &mut dyn FnMut(usize),
    ) -> Result<FileAttachment> {
        let (returns, others): (Vec<&Site>, Vec<&Site>) = sites
            .iter()
            .partition(|s| cookie::kind(s.cookie) == cookie::UPROBE_RETURN);
        let pairs = |s: &[&Site]| -> Vec<(u64, u64)> {
            s.iter().map(|s| (s.file_offset, s.cookie)).collect()
        };
        // The uretprobes first: a call entered while its file has entry probes but no
        // uretprobes yet would stay open (see the program's `ARMED`, which covers the files
        // found at start; a file mapped later is attached while armed).
        let name = self.return_program();
        let returns = if returns.is_empty() {
            None
        } else {
            Some(
                self.loaded
                    .attach(name, path, &pairs(&returns), pid, true, progress)?,
            )
        };
        let entries = match self
            .loaded
            .attach(PROGRAM, path, &pairs(&others), pid, false, progress)
        {
            Ok(a) => a,
            Err(e) => {
                if let Some(returns) = returns {
                    self.loaded.detach(name, returns);
                }
                return Err(e);
            }
        };
        Ok(FileAttachment {
            probes: entries.probes + returns.as_ref().map_or(0, |a| a.probes),
            entries,
            returns,
        })
    }

    pub fn detach(&mut self, attachment: FileAttachment) {
        // Entries first: a call entered after its return probe is gone is abandoned, never
        // closed by a stray return.
        self.loaded.detach(PROGRAM, attachment.entries);
        if let Some(returns) = attachment.returns {
            let name = self.return_program();
            self.loaded.detach(name, returns);
        }
    }

    /// The program the uretprobes run: the one program with the return flag on a
    /// multi-uprobe link, its uretprobe twin as perf events.
    fn return_program(&self) -> &'static str {
        match self.loaded.mechanism {
            Mechanism::MultiLink => PROGRAM,
            Mechanism::PerfEvents => RETURN_PROGRAM,
        }
    }

    /// Reads every site, every live block and the counters.
    /// The live block in slot `index`, read from the mapped array while the kernel may write
    /// it: its address is 0 when free and odd while its CPU writes it, and is read again after
    /// the block, which counts only if the address did not change meanwhile.
    fn live_slot(&self, index: u32) -> Option<(u64, Block)> {
        let slot = self.live_slots.element(index)?;
        // SAFETY: an element of the mapped array, valid while `self` lives; the address is its
        // first 8 bytes, 8-byte aligned, and written by the kernel with atomic operations.
        let addr = || unsafe { (*slot.cast::<AtomicU64>()).load(Ordering::Acquire) };
        let before = addr();
        if before == 0 || before & 1 != 0 {
            return None;
        }
        // SAFETY: as above; a plain copy of integers, checked by the address read again.
        let copy = unsafe { std::ptr::read_volatile(slot) };
        std::sync::atomic::fence(Ordering::Acquire);
        (addr() == before).then_some((before, copy.block))
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::default();
        sum_counters(&self.counters, &mut snapshot.counters);
        // Each stored stack's site, and index 0 (id 0: allocations without a stored stack); a
        // site with nothing counted (its allocation failed) is left out.
        let site_of = |index: u32| {
            self.sites
                .get(&index, 0)
                .ok()
                .map(|per_cpu| sum_cpus(per_cpu.iter()))
                .filter(|stats| *stats != SiteStats::default())
        };
        snapshot.sites = self
            .stacks
            .iter()
            .flatten()
            .map(|(id, stack)| (id, stack.site))
            .chain([(0, 0)])
            .filter_map(|(id, index)| site_of(index).map(|stats| (id, stats)))
            .collect();
        let in_slots = (0..self.live_slots.capacity()).filter_map(|i| self.live_slot(i));
        snapshot.live = self.live.iter().flatten().chain(in_slots).collect();
        snapshot
    }

    /// The stack of id `id`, if stored.
    pub fn stack(&self, id: u64) -> Option<Stack> {
        self.stacks.get(&id, 0).ok()
    }
}

/// How many thread slots the program gets: one per thread id (`pid_max`, rounded up to a power
/// of two) up to `MAX_THREAD_SLOTS`; beyond that, thread ids share slots modulo their count
/// (`SHARED_SLOTS`: a call that finds its slot held by another thread's call is counted as
/// `THREADS_FULL`).
fn thread_slots(pid_max: u64) -> u32 {
    let max = pid_max.clamp(2, u64::from(MAX_THREAD_SLOTS)) as u32;
    max.next_power_of_two().min(MAX_THREAD_SLOTS)
}

/// The kernel's `pid_max` (thread ids are below it); the largest it can be when unreadable.
fn pid_max() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(1 << 22)
}

/// The slots of the live table's array half (`LIVE_SLOTS`): the largest power of two at
/// most half of `--max-live` (at least 1); `LIVE` holds the rest.
fn live_slots(max_live: u32) -> u32 {
    let half = (max_live / 2).max(1);
    1 << (31 - half.leading_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The array half takes at most half of `--max-live`, a power of two, so that the two
    /// halves together never hold more than `--max-live` blocks.
    #[test]
    fn live_slots_are_a_power_of_two_within_half_of_max_live() {
        for (max_live, slots) in [
            (2, 1),
            (3, 1),
            (4, 2),
            (1000, 256),
            (1024, 512),
            (262_144, 131_072),
        ] {
            assert_eq!(live_slots(max_live), slots, "--max-live {max_live}");
            assert!(slots + (max_live - slots).max(1) <= max_live);
        }
        assert_eq!(live_slots(1), 1);
    }

    /// The verifier accepts the program with every option on.
    #[test]
    fn the_kernel_accepts_the_program() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: needs root");
            return;
        }
        let settings = Settings {
            target_tgid: Some(1),
            every: 3,
            sample_bytes: 4096,
            bucket_ns: vec![1_000_000, 1_000_000_000],
            max_live: 1024,
            max_stacks: 1024,
            verbose: true,
            ..Settings::default()
        };
        let program = Program::load(&settings).expect("load");
        let snapshot = program.snapshot();
        assert!(snapshot.sites.is_empty());
        assert_eq!(snapshot.counters, [0; counter::COUNT as usize]);
    }
}

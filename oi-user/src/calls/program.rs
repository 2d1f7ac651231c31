//! The call-tree program from user space: load `oi-ebpf/src/bin/calls.rs` with this run's
//! settings, attach it to lists of sites (one multi-uprobe link per batch of a file where the
//! kernel has them, one perf event per site elsewhere), and read what its maps hold.
//!
//! What the maps mean is `oi_common::calls`; what the tree made of them means is `tree.rs`.
//! Never writes a map the program relies on while probes fire, except [`Program::reset`]
//! (between calibration and the real run, with nothing attached), the `ARMED` switch
//! ([`Program::arm`]) and the removal of shadow stacks of threads that no longer exist.

use std::path::Path;

use aya::{
    EbpfLoader,
    maps::{Array, HashMap, MapData, PerCpuArray, RingBuf},
};
use oi_common::calls::{
    HISTOGRAM_BUCKETS, MAX_DEPTH, NodeKey, NodeStats, ThreadState, counter, global,
};

use super::sites::Site;
pub use crate::probe::profiler::{Attachment, Loaded, Mechanism};
use crate::{
    error::{Error, Result},
    event_loop::StderrLog,
    probe::profiler::{load_profiler, map_error, sum_counters},
};

const PROGRAM: &str = "oi_calls";
const OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/calls"));
/// What the program is told at load time.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The traced process (pid mode); `None` in cgroup mode.
    pub target_tgid: Option<u32>,
    /// cgroup mode: (id, level).
    pub cgroup: Option<(u64, u32)>,
    /// Deepest level timed below the entry (`--depth`), capped at `MAX_DEPTH - 1`.
    pub depth: Option<u32>,
    pub max_nodes: u32,
    /// `--count`.
    pub window_limit: Option<u64>,
    /// Windows sent call by call (`--chrome`).
    pub traced_windows: u64,
    /// Number of function ids when histograms are on.
    pub histogram_functions: Option<u32>,
    /// Log the program's decisions (aya-log) (`-v`); otherwise the verifier removes the logging.
    pub verbose: bool,
}

/// One read of the program's maps.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// (parent, function) → node id, with the node's aggregates.
    pub nodes: Vec<(NodeKey, u32, NodeStats)>,
    /// Sums over the CPUs, indexed by `counter::*`.
    pub counters: [u64; counter::COUNT as usize],
    /// Indexed by `global::*`.
    pub globals: [u64; global::COUNT as usize],
}

pub struct Program {
    /// The object: programs, how they attach, the `ARMED` switch.
    loaded: Loaded,
    nodes: HashMap<MapData, NodeKey, u32>,
    stats: Array<MapData, NodeStats>,
    counters: PerCpuArray<MapData, u64>,
    globals: Array<MapData, u64>,
    threads: HashMap<MapData, u64, ThreadState>,
    histogram: Array<MapData, u64>,
    records: Option<RingBuf<MapData>>,
    max_nodes: u32,
}

impl Program {
    /// Loads the program and its maps; nothing is attached yet.
    pub fn load(settings: &Settings) -> Result<Self> {
        let self_tgid = std::process::id();
        let target = settings.target_tgid.unwrap_or(0);
        let (cgroup_id, cgroup_level) = settings.cgroup.unwrap_or((0, 0));
        let max_frames = settings
            .depth
            .map_or(MAX_DEPTH, |d| d.saturating_add(1).min(MAX_DEPTH));
        let window_limit = settings.window_limit.unwrap_or(0);
        let histograms = u32::from(settings.histogram_functions.is_some());
        let histogram_entries = settings
            .histogram_functions
            .map_or(1, |n| n.max(1).saturating_mul(HISTOGRAM_BUCKETS));
        let max_nodes = settings.max_nodes.max(1);
        let log_level: u8 = if settings.verbose { 0xff } else { 0 };
        let mut loader = EbpfLoader::new();
        // The program reads no kernel structure, so it needs no BTF relocations (see `footprint::trigger`).
        loader
            .btf(None)
            .override_global("TARGET_TGID", &target, true)
            .override_global("SELF_TGID", &self_tgid, true)
            .override_global("CGROUP_ID", &cgroup_id, true)
            .override_global("CGROUP_LEVEL", &cgroup_level, true)
            .override_global("MAX_FRAMES", &max_frames, true)
            .override_global("MAX_NODES", &max_nodes, true)
            .override_global("WINDOW_LIMIT", &window_limit, true)
            .override_global("TRACED_WINDOWS", &settings.traced_windows, true)
            .override_global("HISTOGRAMS", &histograms, true)
            .override_global("AYA_LOG_LEVEL", &log_level, true)
            .map_max_entries("NODES", max_nodes)
            .map_max_entries("STATS", max_nodes)
            .map_max_entries("HISTOGRAM", histogram_entries);
        let mut loaded =
            load_profiler(&mut loader, OBJECT, PROGRAM, "call-tree", settings.verbose)?;
        Ok(Self {
            nodes: loaded.take_map("NODES")?,
            stats: loaded.take_map("STATS")?,
            counters: loaded.take_map("COUNTERS")?,
            globals: loaded.take_map("GLOBALS")?,
            threads: loaded.take_map("THREADS")?,
            histogram: loaded.take_map("HISTOGRAM")?,
            records: Some(loaded.take_map("RECORDS")?),
            loaded,
            max_nodes,
        })
    }

    /// The reader of the program's log (`-v`), for the event loop.
    pub fn take_logger(&mut self) -> Option<aya_log::EbpfLogger<StderrLog>> {
        self.loaded.take_logger()
    }

    pub fn mechanism(&self) -> Mechanism {
        self.loaded.mechanism
    }

    /// The ring buffer of `--chrome` records and `--count` completions, for the event loop.
    pub fn take_records(&mut self) -> Option<RingBuf<MapData>> {
        self.records.take()
    }

    /// Attaches the program to `sites` of the file `path` (only in process `pid`, if given),
    /// calling `progress(attached so far)` now and then.
    pub fn attach(
        &mut self,
        path: &Path,
        sites: &[Site],
        pid: Option<u32>,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Attachment> {
        let pairs: Vec<(u64, u64)> = sites.iter().map(|s| (s.file_offset, s.cookie)).collect();
        self.loaded
            .attach(PROGRAM, path, &pairs, pid, false, progress)
    }

    /// Starts (`true`) or stops counting the target's calls: no window sees only some of its
    /// probes (see the program's `ARMED` and [`Loaded::arm`]).
    pub fn arm(&mut self, on: bool) -> Result<()> {
        self.loaded.arm(on)
    }

    /// Detaches what `attachment` attached.
    pub fn detach(&mut self, attachment: Attachment) {
        self.loaded.detach(PROGRAM, attachment);
    }

    /// Reads every node with its aggregates, the counters and the globals.
    pub fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::default();
        sum_counters(&self.counters, &mut snapshot.counters);
        snapshot.globals = self.snapshot_globals();
        for (key, id) in self.nodes.iter().flatten() {
            if id >= self.max_nodes {
                continue;
            }
            let stats = self.stats.get(&id, 0).unwrap_or_default();
            snapshot.nodes.push((key, id, stats));
        }
        snapshot
    }

    /// The globals alone (cheap: three lookups), indexed by `global::*`.
    pub fn snapshot_globals(&self) -> [u64; global::COUNT as usize] {
        let mut globals = [0; global::COUNT as usize];
        for (i, slot) in globals.iter_mut().enumerate() {
            *slot = self.globals.get(&(i as u32), 0).unwrap_or(0);
        }
        globals
    }

    /// Calls per histogram bucket of function `id` (all zeros when histograms are off).
    pub fn histogram(&self, id: u32) -> [u64; HISTOGRAM_BUCKETS as usize] {
        let mut buckets = [0; HISTOGRAM_BUCKETS as usize];
        for (b, slot) in buckets.iter_mut().enumerate() {
            *slot = self
                .histogram
                .get(&(id * HISTOGRAM_BUCKETS + b as u32), 0)
                .unwrap_or(0);
        }
        buckets
    }

    /// The threads that have a shadow stack now (inside a window), as pid_tgid.
    pub fn threads_inside(&self) -> Vec<u64> {
        self.threads.keys().flatten().collect()
    }

    /// Forgets the shadow stack of a thread that exited inside a window.
    pub fn forget_thread(&mut self, pid_tgid: u64) {
        let _ = self.threads.remove(&pid_tgid);
    }

    /// Empties every table (after the calibration, before the real run; nothing attached).
    pub fn reset(&mut self) -> Result<()> {
        let keys: Vec<NodeKey> = self.nodes.keys().flatten().collect();
        for key in keys {
            let _ = self.nodes.remove(&key);
        }
        // Node ids are handed out in order, so only those below the next one were ever
        // written: zeroing those alone spares one system call per node of the table (65,536
        // by default, about 0.3 s of start-up).
        let used = self
            .globals
            .get(&global::NEXT_NODE, 0)
            .map_err(map_error("GLOBALS"))?
            .min(u64::from(self.max_nodes)) as u32;
        let zero = NodeStats::default();
        for id in 0..used {
            self.stats.set(id, zero, 0).map_err(map_error("STATS"))?;
        }
        for i in 0..global::COUNT {
            self.globals.set(i, 0, 0).map_err(map_error("GLOBALS"))?;
        }
        let cpus = aya::util::nr_cpus()
            .map_err(|(_, e)| Error::internal(format!("counting CPUs: {e}")))?;
        for i in 0..counter::COUNT {
            let zeros = aya::maps::PerCpuValues::try_from(vec![0u64; cpus])
                .map_err(|e| Error::internal(format!("eBPF map COUNTERS: {e}")))?;
            self.counters
                .set(i, zeros, 0)
                .map_err(map_error("COUNTERS"))?;
        }
        for key in self.threads_inside() {
            self.forget_thread(key);
        }
        for i in 0..self.histogram_len() {
            let _ = self.histogram.set(i, 0, 0);
        }
        Ok(())
    }

    fn histogram_len(&self) -> u32 {
        self.histogram.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verifier accepts the program with the deepest stack and every option on.
    #[test]
    fn the_kernel_accepts_the_program() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: needs root");
            return;
        }
        let settings = Settings {
            target_tgid: Some(1),
            max_nodes: 1024,
            window_limit: Some(10),
            traced_windows: 2,
            histogram_functions: Some(16),
            verbose: true,
            ..Settings::default()
        };
        let program = Program::load(&settings).expect("load");
        let snapshot = program.snapshot();
        assert!(snapshot.nodes.is_empty());
        assert_eq!(snapshot.counters, [0; counter::COUNT as usize]);
    }
}

//! The sites of `--mechanism inject`: the allocations the wrappers sampled in the target
//! (`inject::record::sample`), drained from the data part's ring, unwound in user space with
//! the kernel unwinder's rows (`unwind::local`), and turned into what the uprobe path's kernel
//! maps hold (`program::Snapshot`: per-stack `SiteStats` with their estimates, live blocks),
//! so that `report::build` makes sites, types and classes, and every output, with the same
//! code.
//!
//! Weights: a sample stands for `record::samples::weight` allocations and bytes (1/p with
//! p = 1 − exp(−n/B) by bytes; N with `--every N`). Live: a sampled block still in the live
//! table (marked, and matched by address and tsc) is live, any other sampled block was freed;
//! so a site's frees and live blocks are estimates too. Lifetimes per site are not kept (the
//! exact histogram over all blocks is the report's `lifetimes`).
//!
//! Bounded: at most [`MAX_SAMPLED_BLOCKS`] sampled blocks remembered for the live match
//! (further samples count in their site but are taken as freed, and are counted), at most
//! `--max-stacks` distinct stacks (further samples are counted without a site).

use std::collections::HashMap;

use oi_common::{
    allocs::{Block, SiteStats, WEIGHT_ONE, counter},
    inject::sample_mode,
};

use super::program::Snapshot as KernelSnapshot;
use crate::{
    inject::record::{Drain, Sample, Snapshot, samples::weight},
    symbolize::Symbolizer,
    unwind::local::LocalTables,
};

/// Sampled blocks remembered to tell live from freed.
pub const MAX_SAMPLED_BLOCKS: usize = 1 << 20;

/// What sampling did (JSON `sampling`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SamplingStats {
    /// `"bytes"` (a sample per `mean_bytes` on average) or `"every"` (every `every`th).
    pub mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    /// Samples the wrappers took, read from the ring, lost (the ring was full, or a record
    /// was rewritten while read), or not believed.
    pub taken: u64,
    pub read: u64,
    pub dropped: u64,
    pub bad: u64,
    /// Samples whose stack did not reach its end (the copy's window, an unfollowable frame).
    pub truncated_stacks: u64,
    /// Samples without a site: the stack table was full (`--max-stacks`).
    pub without_site: u64,
    /// Samples whose block was not remembered for the live match: taken as freed.
    pub not_remembered: u64,
}

/// The samples of one run, aggregated per stack.
pub struct Sampled {
    pid: i32,
    mode: u64,
    period: u64,
    drain: Drain,
    tables: LocalTables,
    max_stacks: usize,
    /// Frames (0, then return addresses: the shape of the kernel's stacks) → id, and back.
    ids: HashMap<Vec<u64>, u64>,
    stacks: Vec<Vec<u64>>,
    /// Per stack id − 1: the samples' raw counts and estimates.
    sites: Vec<SiteStats>,
    /// (address, tsc) of a sampled block → (stack id, weight × WEIGHT_ONE, bytes estimate).
    blocks: HashMap<(u64, u64), (u64, u64, u64)>,
    stats: SamplingStats,
}

impl Sampled {
    pub fn new(pid: i32, mode: u64, period: u64, max_stacks: usize) -> Self {
        let mut tables = LocalTables::default();
        tables.track(pid);
        let stats = SamplingStats {
            mode: if mode == sample_mode::CALLS {
                "every"
            } else {
                "bytes"
            },
            mean_bytes: (mode == sample_mode::BYTES).then_some(period),
            every: (mode == sample_mode::CALLS).then_some(period),
            ..SamplingStats::default()
        };
        Self {
            pid,
            mode,
            period,
            drain: Drain::default(),
            tables,
            max_stacks,
            ids: HashMap::new(),
            stacks: Vec::new(),
            sites: Vec::new(),
            blocks: HashMap::new(),
            stats,
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// `--every N`: N; by bytes: none (the estimates carry the weights).
    pub fn every(&self) -> u64 {
        if self.mode == sample_mode::CALLS {
            self.period
        } else {
            1
        }
    }

    /// `--sample-bytes`'s mean when sampling by bytes.
    pub fn sample_bytes(&self) -> Option<u64> {
        (self.mode == sample_mode::BYTES).then_some(self.period)
    }

    /// Reads the samples written since the last call from `data` (the data part, live or a
    /// copy), unwinds and aggregates them, and names their frames while the process still
    /// maps its files. Also re-reads the process's mappings (a `dlopen`).
    pub fn drain(&mut self, data: &[u8], symbolizer: &mut Symbolizer) {
        let mut samples = Vec::new();
        if self.drain.read(data, &mut samples).is_err() {
            return;
        }
        if samples.is_empty() {
            return;
        }
        self.tables.track(self.pid);
        let mut new_addrs = Vec::new();
        for s in &samples {
            if let Some(addrs) = self.add(s) {
                new_addrs.extend(addrs);
            }
        }
        if !new_addrs.is_empty() {
            // Return addresses name the call before them; cached by the symbolizer.
            let lookups: Vec<u64> = new_addrs.iter().map(|a| a.saturating_sub(1)).collect();
            let _ = symbolizer.frames(self.pid as u32, &lookups);
        }
    }

    /// Adds one sample; returns the frames of a stack seen for the first time.
    fn add(&mut self, s: &Sample) -> Option<Vec<u64>> {
        self.stats.read += 1;
        let walked = self.tables.walk(s.pc, s.sp, s.bp, &s.stack);
        if !walked.ended {
            self.stats.truncated_stacks += 1;
        }
        let mut frames = Vec::with_capacity(walked.frames.len() + 1);
        // The allocator's entry, which the report leaves out.
        frames.push(0);
        frames.extend(&walked.frames);
        let mut new = None;
        let id = match self.ids.get(&frames) {
            Some(&id) => Some(id),
            None if self.stacks.len() < self.max_stacks => {
                let id = self.stacks.len() as u64 + 1;
                self.ids.insert(frames.clone(), id);
                new = Some(walked.frames);
                self.stacks.push(frames);
                self.sites.push(SiteStats::default());
                Some(id)
            }
            None => None,
        };
        let Some(id) = id else {
            self.stats.without_site += 1;
            return None;
        };
        let (n, bytes) = weight(self.mode, self.period, s.size);
        let w = (n * WEIGHT_ONE as f64).round() as u64;
        let site = &mut self.sites[id as usize - 1];
        site.allocs += 1;
        site.bytes += s.size;
        site.usable_bytes += s.usable;
        site.est_allocs += w;
        site.est_bytes += bytes.round() as u64;
        if self.blocks.len() < MAX_SAMPLED_BLOCKS {
            self.blocks
                .insert((s.addr, s.tsc), (id, w, bytes.round() as u64));
        } else {
            self.stats.not_remembered += 1;
        }
        new
    }

    /// The samples as the uprobe path's kernel maps would hold them, against the live blocks
    /// of `snapshot` (taken now: `now_tsc`, `now_ns`): per stack, its raw and estimated
    /// allocations, and frees of those no longer live. Also the stack of each id.
    pub fn kernel_view(&self, snapshot: &Snapshot, now_tsc: u64, now_ns: u64) -> KernelSnapshot {
        let mut sites = self.sites.clone();
        // Every remembered block starts freed; those still live are taken back.
        for &(id, w, bytes) in self.blocks.values() {
            let s = &mut sites[id as usize - 1];
            s.frees += 1;
            s.est_frees += w;
            s.est_freed_bytes += bytes;
        }
        let mut live = Vec::new();
        let mut live_of: HashMap<u64, (u64, u64)> = HashMap::new();
        for b in snapshot.live.iter().filter(|b| b.sampled) {
            let Some(&(id, w, bytes)) = self.blocks.get(&(b.addr, b.tsc)) else {
                continue;
            };
            let s = &mut sites[id as usize - 1];
            s.frees -= 1;
            s.est_frees -= w;
            s.est_freed_bytes -= bytes;
            let e = live_of.entry(id).or_default();
            e.0 += b.size;
            e.1 += b.usable;
            let age = snapshot.ticks_to_ns(now_tsc.saturating_sub(b.tsc));
            live.push((
                b.addr,
                Block {
                    size: b.size,
                    usable: b.usable,
                    time_ns: now_ns.saturating_sub(age),
                    stack: id,
                    tid: 0,
                    site: id as u32,
                    weight: w,
                },
            ));
        }
        // Raw freed bytes: the samples' bytes less those still live.
        for (i, s) in sites.iter_mut().enumerate() {
            let (live_bytes, live_usable) =
                live_of.get(&(i as u64 + 1)).copied().unwrap_or_default();
            s.freed_bytes = s.bytes.saturating_sub(live_bytes);
            s.freed_usable_bytes = s.usable_bytes.saturating_sub(live_usable);
        }
        let mut counters = [0u64; counter::COUNT as usize];
        counters[counter::STACKS_FULL as usize] = self.stats.without_site;
        KernelSnapshot {
            sites: sites
                .into_iter()
                .enumerate()
                .map(|(i, s)| (i as u64 + 1, s))
                .collect(),
            live,
            counters,
        }
    }

    /// The stack of id `id`: (pid, frames) as `report::build` takes it.
    pub fn stack(&self, id: u64) -> Option<(u32, Vec<u64>)> {
        let i = usize::try_from(id.checked_sub(1)?).ok()?;
        self.stacks.get(i).map(|f| (self.pid as u32, f.clone()))
    }

    /// What sampling did, with `taken` (the wrappers' count) from the snapshot.
    pub fn stats(&self, snapshot: &Snapshot) -> SamplingStats {
        SamplingStats {
            taken: snapshot.totals.samples,
            dropped: self.drain.dropped,
            bad: self.drain.bad,
            ..self.stats.clone()
        }
    }
}

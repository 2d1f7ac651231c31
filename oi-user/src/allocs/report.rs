//! The allocation report: the kernel's sites (one per stack id) symbolized, merged by their
//! frames, with types and classes, and printed (readable text or JSON), folded or drawn.
//!
//! A site's stack starts at the allocator's caller: the captured pc (the allocator's entry) and
//! any leading allocator frames are left out, and frames above `main` (the C runtime's start
//! code) too. Live numbers are allocs − frees of the blocks allocated while attached; the
//! oldest live block's age comes from the live table. With `--every N`, every count and byte
//! total is the sampled one times N (`"sampled": true`).

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
    sync::Arc,
};

use oi_common::allocs::{MAX_BUCKETS, SiteStats, WEIGHT_ONE, counter};
use serde::Serialize;

use super::{names, program::Snapshot};
use crate::{
    report::tree::{human, thousands},
    symbolize::Symbolizer,
    unwind::UnwindStats,
};

/// A site's aggregates merged over its stack ids, the oldest live block's time, its type, and
/// the first of its raw stacks.
type Merged = (SiteStats, Option<u64>, Option<String>, Option<RawStack>);

/// A stack as the kernel kept it: the process and its frames (the allocator's entry, then
/// return addresses).
pub type RawStack = (u32, Vec<u64>);

/// The frame of a site whose stack the kernel did not keep.
pub const NOT_KEPT: &str = "[stack not kept]";

/// One site as reported.
#[derive(Debug, Clone, Serialize)]
pub struct SiteView {
    pub stack: Vec<String>,
    #[serde(rename = "type")]
    pub type_name: Option<String>,
    pub allocs: u64,
    pub frees: u64,
    pub bytes: u64,
    pub usable_bytes: u64,
    pub live_allocs: u64,
    pub live_bytes: u64,
    pub lifetimes: Vec<u64>,
    /// Age in seconds of the oldest block of this site still live.
    pub oldest_live_s: Option<f64>,
    #[serde(skip)]
    pub classes: Vec<String>,
    /// One of the raw stacks merged into this site (they all name the same frames): what
    /// exports with addresses locate (`export::pprof`).
    #[serde(skip)]
    pub raw_stack: Option<RawStack>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub allocs: u64,
    pub frees: u64,
    pub bytes: u64,
    pub live_allocs: u64,
    pub live_bytes: u64,
    /// Frees of blocks allocated before attaching (or dropped). While sampling, an estimate:
    /// `counters.untracked_frees` less the estimated frees of blocks not sampled.
    pub unknown_frees: u64,
    /// While sampling: frees of blocks allocated while attached but not sampled, estimated as
    /// the sampled blocks' frees scaled up, less those frees themselves (0 without sampling).
    pub unsampled_frees: u64,
    pub dropped: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TypeView {
    #[serde(rename = "type")]
    pub type_name: String,
    pub allocs: u64,
    pub bytes: u64,
    pub live_bytes: u64,
    pub lifetimes: Vec<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClassView {
    pub class: String,
    pub allocs: u64,
    pub bytes: u64,
    pub live_bytes: u64,
}

/// What the kernel counted beyond the totals (JSON `"counters"`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counters {
    pub probe_hits: u64,
    pub nested_calls: u64,
    pub failed: u64,
    pub unseen: u64,
    /// Calls of an `operator new` left by an exception or a longjmp (never a C function's).
    pub abandoned: u64,
    /// Calls of a C allocation function whose return the kernel's uretprobe did not report
    /// (their blocks are not counted).
    pub returns_missed: u64,
    pub reused: u64,
    pub stacks_full: u64,
    pub sites_full: u64,
    pub threads_full: u64,
    pub skipped_by_sampling: u64,
    /// While sampling: frees of blocks not in the table (not sampled, or allocated before
    /// attaching), exact; `totals` splits them by estimate.
    pub untracked_frees: u64,
    /// Threads let go from the dynamic linker's probe before their new files were hooked.
    pub holds_expired: u64,
}

/// One report (`--format json`: these keys, in this order).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub pid: Option<i32>,
    pub elapsed_s: f64,
    /// `"uprobes"` (`--mechanism inject` prints `in_target::InjectReport`).
    pub mechanism: &'static str,
    pub sampled: bool,
    pub totals: Totals,
    pub buckets_s: Vec<f64>,
    pub sites: Vec<SiteView>,
    pub types: Vec<TypeView>,
    pub classes: Vec<ClassView>,
    /// `"glibc"`: usable sizes from glibc's chunk headers; `"jemalloc"`: jemalloc's size classes
    /// of the requests; `"requested"`: the requested size.
    pub usable_size: &'static str,
    pub counters: Counters,
    pub unwind: UnwindStats,
}

/// Decides which qualifiers name classes (DWARF, cached), for [`build`].
pub trait Classes {
    /// The qualifiers of `qualifiers` that are classes.
    fn classes(&mut self, qualifiers: &[String]) -> std::collections::HashSet<String>;
}

/// What [`build`] needs besides the snapshot.
pub struct Context<'a> {
    pub pid: Option<i32>,
    pub elapsed_s: f64,
    pub every: u64,
    /// `--sample-bytes`: numbers are the kernel's weighted estimates.
    pub sample_bytes: Option<u64>,
    pub bucket_s: &'a [f64],
    pub blocks: super::hooks::Blocks,
    pub unwind: UnwindStats,
    /// CLOCK_MONOTONIC now, in ns (the kernel's `bpf_ktime_get_ns`).
    pub now_ns: u64,
}

/// Builds the report from one snapshot: `stack_of(id)` gives a stack's (tgid, frames).
pub fn build(
    snapshot: &Snapshot,
    stack_of: &dyn Fn(u64) -> Option<(u32, Vec<u64>)>,
    symbolizer: &mut Symbolizer,
    classes: &mut dyn Classes,
    cx: &Context<'_>,
) -> Report {
    let scale = cx.every.max(1);
    let buckets = cx.bucket_s.len().min(MAX_BUCKETS) + 1;
    let mut oldest: HashMap<u64, u64> = HashMap::new();
    for (_, block) in &snapshot.live {
        let t = oldest.entry(block.stack).or_insert(block.time_ns);
        *t = (*t).min(block.time_ns);
    }
    // Sites merged by their symbolized frames.
    let mut merged: BTreeMap<Vec<Arc<str>>, Merged> = BTreeMap::new();
    for (id, stats) in &snapshot.sites {
        let raw = stack_of(*id);
        let (frames, type_name) = match &raw {
            Some((tgid, addrs)) => site_frames(symbolizer, *tgid, addrs),
            None => (vec![Arc::from(NOT_KEPT)], None),
        };
        let entry = merged
            .entry(frames)
            .or_insert((SiteStats::default(), None, type_name, raw));
        entry.0 += stats;
        if let Some(t) = oldest.get(id) {
            entry.1 = Some(entry.1.map_or(*t, |o: u64| o.min(*t)));
        }
    }
    let mut qualifiers: Vec<String> = merged
        .keys()
        .flatten()
        .filter_map(|f| names::qualifier(f))
        .filter(|q| !names::is_template_class(q))
        .map(str::to_string)
        .collect();
    qualifiers.sort();
    qualifiers.dedup();
    let known = classes.classes(&qualifiers);
    let sampled_frees: u64 = snapshot.sites.iter().map(|(_, s)| s.frees).sum();
    let mut sites: Vec<SiteView> = merged
        .into_iter()
        .map(|(stack, (s, oldest_ns, type_name, raw_stack))| {
            let classes = classes_of(&stack, &known);
            let s = if cx.sample_bytes.is_some() {
                estimates(&s)
            } else {
                scaled(&s, scale)
            };
            SiteView {
                type_name,
                allocs: s.allocs,
                frees: s.frees,
                bytes: s.bytes,
                usable_bytes: s.usable_bytes,
                live_allocs: s.allocs.saturating_sub(s.frees),
                live_bytes: s.bytes.saturating_sub(s.freed_bytes),
                lifetimes: s.lifetimes[..buckets].to_vec(),
                oldest_live_s: oldest_ns
                    .filter(|_| s.allocs > s.frees)
                    .map(|t| cx.now_ns.saturating_sub(t) as f64 / 1e9),
                classes,
                stack: stack.iter().map(|f| f.to_string()).collect(),
                raw_stack,
            }
        })
        .collect();
    sites.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.allocs.cmp(&a.allocs)));

    let c = |i: u32| snapshot.counters[i as usize];
    let frees: u64 = sites.iter().map(|s| s.frees).sum();
    let (unsampled_frees, unknown_frees) = split_untracked(
        c(counter::UNTRACKED_FREES),
        frees,
        sampled_frees,
        c(counter::UNKNOWN_FREES),
    );
    let totals = Totals {
        allocs: sites.iter().map(|s| s.allocs).sum(),
        frees,
        bytes: sites.iter().map(|s| s.bytes).sum(),
        live_allocs: sites.iter().map(|s| s.live_allocs).sum(),
        live_bytes: sites.iter().map(|s| s.live_bytes).sum(),
        unknown_frees,
        unsampled_frees,
        dropped: c(counter::DROPPED),
    };
    let mut types: BTreeMap<&str, TypeView> = BTreeMap::new();
    for s in &sites {
        let Some(t) = &s.type_name else { continue };
        let v = types.entry(t).or_insert_with(|| TypeView {
            type_name: t.clone(),
            allocs: 0,
            bytes: 0,
            live_bytes: 0,
            lifetimes: vec![0; buckets],
        });
        v.allocs += s.allocs;
        v.bytes += s.bytes;
        v.live_bytes += s.live_bytes;
        for (a, b) in v.lifetimes.iter_mut().zip(&s.lifetimes) {
            *a += b;
        }
    }
    let mut types: Vec<TypeView> = types.into_values().collect();
    types.sort_by_key(|t| std::cmp::Reverse(t.bytes));
    let mut class_map: BTreeMap<&str, ClassView> = BTreeMap::new();
    for s in &sites {
        for class in &s.classes {
            let v = class_map.entry(class).or_insert_with(|| ClassView {
                class: class.clone(),
                allocs: 0,
                bytes: 0,
                live_bytes: 0,
            });
            v.allocs += s.allocs;
            v.bytes += s.bytes;
            v.live_bytes += s.live_bytes;
        }
    }
    let mut class_list: Vec<ClassView> = class_map.into_values().collect();
    class_list.sort_by_key(|c| std::cmp::Reverse(c.bytes));
    Report {
        pid: cx.pid,
        elapsed_s: (cx.elapsed_s * 1000.0).round() / 1000.0,
        mechanism: "uprobes",
        sampled: scale > 1 || cx.sample_bytes.is_some(),
        totals,
        buckets_s: cx.bucket_s.to_vec(),
        sites,
        types,
        classes: class_list,
        usable_size: cx.blocks.name(),
        counters: Counters {
            probe_hits: c(counter::HITS),
            nested_calls: c(counter::NESTED),
            failed: c(counter::FAILED),
            unseen: c(counter::UNSEEN),
            abandoned: c(counter::ABANDONED),
            returns_missed: c(counter::RETURNS_MISSED),
            reused: c(counter::REUSED),
            stacks_full: c(counter::STACKS_FULL),
            sites_full: c(counter::SITES_FULL),
            threads_full: c(counter::THREADS_FULL),
            skipped_by_sampling: c(counter::SKIPPED),
            untracked_frees: c(counter::UNTRACKED_FREES),
            holds_expired: c(counter::HOLDS_EXPIRED),
        },
        unwind: cx.unwind,
    }
}

/// Splits the frees of blocks the table did not hold while sampling (`untracked`) into those
/// of blocks allocated while attached but not sampled, and the rest (blocks from before
/// attaching, as without sampling): the first are estimated as every free the sampled blocks
/// stand for (`estimated_frees`) less the sampled blocks' own frees (`sampled_frees`), at most
/// `untracked`. Returns (unsampled, unknown); without sampling `untracked` is 0 and the
/// kernel's exact `unknown` is kept.
fn split_untracked(
    untracked: u64,
    estimated_frees: u64,
    sampled_frees: u64,
    unknown: u64,
) -> (u64, u64) {
    let unsampled = estimated_frees.saturating_sub(sampled_frees).min(untracked);
    (unsampled, unknown + untracked - unsampled)
}

/// `--every N`: every number × N.
fn scaled(s: &SiteStats, n: u64) -> SiteStats {
    let mut out = *s;
    for v in [
        &mut out.allocs,
        &mut out.bytes,
        &mut out.usable_bytes,
        &mut out.frees,
        &mut out.freed_bytes,
        &mut out.freed_usable_bytes,
    ] {
        *v *= n;
    }
    for l in &mut out.lifetimes {
        *l *= n;
    }
    out
}

/// `--sample-bytes`: the kernel's weighted estimates; usable bytes and lifetimes scaled by the
/// same ratios as bytes and frees.
fn estimates(s: &SiteStats) -> SiteStats {
    let ratio = |est: u64, raw: u64| {
        if raw == 0 {
            0.0
        } else {
            est as f64 / raw as f64
        }
    };
    let byte_ratio = ratio(s.est_bytes, s.bytes);
    let free_ratio = ratio(s.est_frees, s.frees * WEIGHT_ONE);
    let mut out = *s;
    out.allocs = (s.est_allocs + WEIGHT_ONE / 2) / WEIGHT_ONE;
    out.frees = (s.est_frees + WEIGHT_ONE / 2) / WEIGHT_ONE;
    out.bytes = s.est_bytes;
    out.freed_bytes = s.est_freed_bytes;
    out.usable_bytes = (s.usable_bytes as f64 * byte_ratio).round() as u64;
    for l in &mut out.lifetimes {
        *l = (*l as f64 * free_ratio).round() as u64;
    }
    out
}

/// The frames of a site (innermost first, inlined frames included, the allocator's own left
/// out, cut after `main`) and the type its allocator frames name.
fn site_frames(
    symbolizer: &mut Symbolizer,
    tgid: u32,
    addrs: &[u64],
) -> (Vec<Arc<str>>, Option<String>) {
    // Return addresses name the call before them.
    let lookups: Vec<u64> = addrs.iter().skip(1).map(|a| a.saturating_sub(1)).collect();
    let symbolized = symbolizer.frames(tgid, &lookups);
    let mut frames: Vec<Arc<str>> = symbolized
        .iter()
        .flat_map(|f| f.iter().map(|frame| frame.function.clone()))
        .collect();
    let leading = frames
        .iter()
        .take_while(|f| names::is_allocator_frame(f))
        .count();
    frames.drain(..leading);
    if let Some(main) = frames.iter().position(|f| &**f == "main") {
        frames.truncate(main + 1);
    }
    let type_name = names::stack_type(&frames);
    if frames.is_empty() {
        frames.push(Arc::from(crate::symbolize::UNKNOWN));
    }
    (frames, type_name)
}

/// Every class with a method in the stack, once each, innermost first.
fn classes_of(stack: &[Arc<str>], known: &std::collections::HashSet<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for frame in stack {
        if let Some(q) = names::qualifier(frame)
            && !out.iter().any(|c| c == q)
            && (names::is_template_class(q) || known.contains(q))
        {
            out.push(q.to_string());
        }
    }
    out
}

pub(super) fn bucket_labels(bounds: &[f64]) -> Vec<String> {
    let mut labels: Vec<String> = bounds.iter().map(|b| format!("<{}s", b)).collect();
    if let Some(last) = bounds.last() {
        labels.push(format!(">={last}s"));
    }
    labels
}

/// The readable report.
pub fn text(report: &Report, place: &str, top: usize) -> String {
    let mut out = String::new();
    let t = &report.totals;
    let est = if report.sampled { " (estimated)" } else { "" };
    let _ = writeln!(
        out,
        "allocations of {place} over {:.1} s{est}: {} allocs ({}), {} frees; live: {} blocks \
         ({}); unknown frees: {}; dropped: {}",
        report.elapsed_s,
        thousands(t.allocs),
        human(t.bytes),
        thousands(t.frees),
        thousands(t.live_allocs),
        human(t.live_bytes),
        thousands(t.unknown_frees),
        thousands(t.dropped),
    );
    if report.sampled && report.counters.untracked_frees > 0 {
        let _ = writeln!(
            out,
            "  of the {} frees of blocks not sampled or from before attaching (sampling cannot \
             tell them apart), about {} were of blocks not sampled",
            thousands(report.counters.untracked_frees),
            thousands(t.unsampled_frees),
        );
    }
    out += &sections(report, top);
    out
}

/// The readable report's tables: sites, types, classes, live bytes by site.
pub fn sections(report: &Report, top: usize) -> String {
    let mut out = String::new();
    let labels = bucket_labels(&report.buckets_s);
    let _ = writeln!(out, "\ntop sites by bytes:");
    for s in report.sites.iter().take(top) {
        let _ = writeln!(
            out,
            "  {:>10}  {:>8} allocs  {:>8} frees  live {:>8} ({}){}",
            human(s.bytes),
            thousands(s.allocs),
            thousands(s.frees),
            thousands(s.live_allocs),
            human(s.live_bytes),
            s.type_name
                .as_ref()
                .map_or(String::new(), |t| format!("  type {t}"))
        );
        for f in s.stack.iter().take(6) {
            let _ = writeln!(out, "        {f}");
        }
        if s.stack.len() > 6 {
            let _ = writeln!(out, "        … {} more", s.stack.len() - 6);
        }
        // (`--mechanism inject` keeps no lifetimes per site: all zeros, not printed.)
        if s.frees > 0 && s.lifetimes.iter().any(|&n| n > 0) {
            let hist: Vec<String> = labels
                .iter()
                .zip(&s.lifetimes)
                .map(|(l, n)| format!("{l}: {}", thousands(*n)))
                .collect();
            let _ = writeln!(out, "        lifetimes {}", hist.join("  "));
        }
    }
    if !report.types.is_empty() {
        let _ = writeln!(out, "\ntop types by bytes:");
        for ty in report.types.iter().take(top) {
            let _ = writeln!(
                out,
                "  {:>10}  {:>8} allocs  live {:>10}  {}",
                human(ty.bytes),
                thousands(ty.allocs),
                human(ty.live_bytes),
                ty.type_name
            );
        }
    }
    if !report.classes.is_empty() {
        let _ = writeln!(out, "\ntop classes by bytes:");
        for c in report.classes.iter().take(top) {
            let _ = writeln!(
                out,
                "  {:>10}  {:>8} allocs  live {:>10}  {}",
                human(c.bytes),
                thousands(c.allocs),
                human(c.live_bytes),
                c.class
            );
        }
    }
    let mut live: Vec<&SiteView> = report.sites.iter().filter(|s| s.live_bytes > 0).collect();
    live.sort_by_key(|s| std::cmp::Reverse(s.live_bytes));
    if !live.is_empty() {
        let _ = writeln!(out, "\nlive bytes by site (oldest live block):");
        for s in live.iter().take(top) {
            let _ = writeln!(
                out,
                "  {:>10}  {:>8} blocks  {}  {}",
                human(s.live_bytes),
                thousands(s.live_allocs),
                s.oldest_live_s
                    .map_or("-".to_string(), |a| format!("{a:.1} s old")),
                s.stack.first().map_or("", String::as_str)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_labels() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(bucket_labels(&[1.0, 5.0]), vec!["<1s", "<5s", ">=5s"]);
    }

    #[test]
    fn untracked_frees_split_by_the_sampled_ones() {
        // Without sampling nothing is untracked: the kernel's unknown frees stay.
        assert_eq!(split_untracked(0, 40, 40, 7), (0, 7));
        // --every 4: 10 sampled frees stand for 40; 30 of the 35 untracked were not sampled.
        assert_eq!(split_untracked(35, 40, 10, 0), (30, 5));
        // An estimate above what was untracked is capped: never a negative unknown count.
        assert_eq!(split_untracked(20, 40, 10, 0), (20, 0));
    }
}

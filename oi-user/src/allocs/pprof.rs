//! `allocs --pprof` and `--pprof-lifetimes`: the allocation report as pprof profiles.
//!
//! The heap profile has Go's shape, so that every reader treats it as a Go heap profile: the
//! sample types `alloc_objects/count`, `alloc_space/bytes`, `inuse_objects/count`,
//! `inuse_space/bytes` in that order, `inuse_space` the default, period type `space/bytes`.
//! One sample per site of the report, with the report's numbers: when sampling was asked for
//! they are the report's estimates of the whole (scaled by the inverse of each allocation's
//! chance to be taken, as Go and tcmalloc write their heap profiles), and the comments say how
//! the run sampled.
//!
//! A sample's locations, leaf first: `type: T` when the allocator frames name the allocated
//! type, `class: C` for every class with a method on the stack (innermost first), then the
//! stack's code from the allocator's caller to `main`, as the report cuts it. Types and classes
//! are frames rather than labels: a label per type would make one series per type in
//! Pyroscope, and as frames `pprof -top` lists them with their bytes.
//!
//! Lifetimes are a second profile, `frees/count` per stack and bucket, the bucket a leaf frame
//! (`lifetime: < 0.001 s`) below the site's frames. A second profile rather than a fifth
//! sample type: frees by age are another population than allocations, and the heap profile
//! keeps exactly Go's four types.

use crate::export::pprof::{
    builder::{Builder, Head, write_file},
    proto::Profile,
    stacks::Stacks,
};
use crate::{
    allocs::{
        names,
        report::{NOT_KEPT, Report, SiteView},
    },
    cli::allocs::AllocsArgs,
    error::{Error, Result},
    symbolize::{Frame, Symbolizer, UNKNOWN},
};

/// Writes the profiles `--pprof` and `--pprof-lifetimes` ask for, if any. The processes must
/// still map their files (their mappings and build ids are read now).
pub fn write(
    report: &Report,
    args: &AllocsArgs,
    place: &str,
    elapsed: std::time::Duration,
    symbolizer: &mut Symbolizer,
) -> Result<()> {
    let run = Run {
        place,
        every: args.every.unwrap_or(1),
        sample_bytes: args.sample_bytes,
        elapsed,
    };
    let mut stacks = Stacks::new(symbolizer);
    for (path, make) in [
        (
            &args.pprof,
            heap as fn(&Report, &mut Stacks<'_>, &Run<'_>) -> Profile,
        ),
        (&args.pprof_lifetimes, lifetimes),
    ] {
        if let Some(path) = path {
            write_file(&make(report, &mut stacks, &run), path).map_err(|e| {
                Error::internal(format!(
                    "writing a pprof profile to {}: {e}",
                    path.display()
                ))
            })?;
        }
    }
    Ok(())
}

/// How the run sampled, and what else the comments say.
pub struct Run<'a> {
    /// `pid 4242` or `cgroup /sys/fs/cgroup/shop.slice`.
    pub place: &'a str,
    /// `--every N`.
    pub every: u64,
    /// `--sample-bytes B`.
    pub sample_bytes: Option<u64>,
    pub elapsed: std::time::Duration,
}

/// The heap profile of `report`.
pub fn heap(report: &Report, stacks: &mut Stacks<'_>, run: &Run<'_>) -> Profile {
    let mut b = Builder::new();
    main_binaries_first(&mut b, stacks, report);
    for site in &report.sites {
        let locations = site_locations(&mut b, stacks, site);
        b.sample(
            locations,
            [site.allocs, site.bytes, site.live_allocs, site.live_bytes]
                .map(|v| v as i64)
                .to_vec(),
        );
    }
    let (period, sampling) = sampling(run);
    b.finish(Head {
        sample_types: &[
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes"),
        ],
        default_sample_type: "inuse_space",
        period_type: ("space", "bytes"),
        period,
        time_nanos: crate::export::pprof::builder::started_ns(run.elapsed),
        duration_nanos: run.elapsed.as_nanos() as i64,
        comments: vec![
            format!("oi-trace allocs of {}", run.place),
            sampling,
            format!(
                "alloc_space and inuse_space are requested bytes; usable sizes: {}",
                report.usable_size
            ),
            "leaf frames `type: T` and `class: C` are the allocated C++ type and the classes \
             with a method on the stack, not code"
                .to_string(),
        ],
    })
}

/// The lifetimes profile of `report`: frees per stack and lifetime bucket.
pub fn lifetimes(report: &Report, stacks: &mut Stacks<'_>, run: &Run<'_>) -> Profile {
    let mut b = Builder::new();
    main_binaries_first(&mut b, stacks, report);
    let labels = bucket_labels(&report.buckets_s);
    for site in &report.sites {
        if site.lifetimes.iter().all(|&n| n == 0) {
            continue;
        }
        let locations = site_locations(&mut b, stacks, site);
        for (label, &n) in labels.iter().zip(&site.lifetimes) {
            if n == 0 {
                continue;
            }
            let mut with_bucket = vec![b.named_frame(label)];
            with_bucket.extend(&locations);
            b.sample(with_bucket, vec![n as i64]);
        }
    }
    let (_, sampling) = sampling(run);
    b.finish(Head {
        sample_types: &[("frees", "count")],
        default_sample_type: "frees",
        period_type: ("frees", "count"),
        period: 1,
        time_nanos: crate::export::pprof::builder::started_ns(run.elapsed),
        duration_nanos: run.elapsed.as_nanos() as i64,
        comments: vec![
            format!(
                "oi-trace allocs of {}: frees of blocks allocated while attached, by lifetime",
                run.place
            ),
            sampling,
            "leaf frames `lifetime: …` are the lifetime buckets (--buckets), then `type: T` and \
             `class: C` as in the heap profile"
                .to_string(),
        ],
    })
}

/// The period (in bytes) and the comment that says how the run sampled.
fn sampling(run: &Run<'_>) -> (i64, String) {
    match (run.sample_bytes, run.every) {
        (Some(b), _) => (
            b as i64,
            format!(
                "sampled with --sample-bytes {b}: an allocation of n < {b} bytes taken with \
                 probability n/{b} and counted as {b}/n allocations ({b} bytes), larger ones \
                 always; values are these estimates of every allocation"
            ),
        ),
        (None, n) if n > 1 => (
            0,
            format!(
                "sampled with --every {n}: every {n}th allocation taken; counts and bytes are \
                 the sampled ones times {n}"
            ),
        ),
        _ => (1, "not sampled: every allocation counted".to_string()),
    }
}

/// `< 0.001 s`, …, `>= 60 s`, one per bucket.
fn bucket_labels(bounds: &[f64]) -> Vec<String> {
    let mut labels: Vec<String> = bounds
        .iter()
        .map(|b| format!("lifetime: < {b} s"))
        .collect();
    if let Some(last) = bounds.last() {
        labels.push(format!("lifetime: >= {last} s"));
    }
    labels
}

/// Each process's main executable as the first mappings.
fn main_binaries_first(b: &mut Builder, stacks: &mut Stacks<'_>, report: &Report) {
    let mut seen = std::collections::HashSet::new();
    for (tgid, _) in report.sites.iter().filter_map(|s| s.raw_stack.as_ref()) {
        if seen.insert(*tgid) {
            stacks.main_binary_first(b, *tgid);
        }
    }
}

/// A site's locations, leaf first: its type, its classes, then its code.
fn site_locations(b: &mut Builder, stacks: &mut Stacks<'_>, site: &SiteView) -> Vec<u64> {
    let mut out = Vec::new();
    if let Some(t) = &site.type_name {
        out.push(b.named_frame(&format!("type: {t}")));
    }
    for class in &site.classes {
        out.push(b.named_frame(&format!("class: {class}")));
    }
    let code = match &site.raw_stack {
        Some((tgid, addrs)) => code_locations(b, stacks, *tgid, addrs),
        None => vec![b.named_frame(NOT_KEPT)],
    };
    out.extend(code);
    out
}

/// The code of a raw stack as locations, cut as the report cuts it: the captured pc (the
/// allocator's entry) and the allocator's own leading frames left out, nothing beyond `main`.
/// Each return address is located at the call, one byte before it.
fn code_locations(b: &mut Builder, stacks: &mut Stacks<'_>, tgid: u32, addrs: &[u64]) -> Vec<u64> {
    let calls: Vec<u64> = addrs.iter().skip(1).map(|a| a.saturating_sub(1)).collect();
    let symbolized = stacks.frames(tgid, &calls);
    let mut out = Vec::new();
    let mut leading = true;
    for (&address, frames) in calls.iter().zip(&symbolized) {
        let mut frames: Vec<Frame> = frames.to_vec();
        if leading {
            let allocator = frames
                .iter()
                .take_while(|f| names::is_allocator_frame(&f.function))
                .count();
            frames.drain(..allocator);
            if frames.is_empty() {
                continue;
            }
            leading = false;
        }
        let main = frames.iter().position(|f| &*f.function == "main");
        if let Some(m) = main {
            frames.truncate(m + 1);
        }
        out.push(stacks.location(b, tgid, address, &frames));
        if main.is_some() {
            break;
        }
    }
    if out.is_empty() {
        out.push(b.named_frame(UNKNOWN));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_sampling() {
        assert_eq!(
            bucket_labels(&[0.001, 1.0]),
            ["lifetime: < 0.001 s", "lifetime: < 1 s", "lifetime: >= 1 s"]
        );
        let run = |every, sample_bytes| Run {
            place: "pid 1",
            every,
            sample_bytes,
            elapsed: std::time::Duration::ZERO,
        };
        assert_eq!(sampling(&run(1, None)).0, 1);
        assert_eq!(sampling(&run(100, None)).0, 0);
        assert_eq!(sampling(&run(1, Some(4096))).0, 4096);
        assert!(sampling(&run(100, None)).1.contains("times 100"));
    }
}

//! One target's run cut into intervals: the `allocs` profiler hands over its cumulative report
//! at every tick ([`crate::allocs::Reports`]); this module turns each into the profile of the
//! interval just ended and hands it to the outlets (`--pprof-dir`, the delivery queue).
//!
//! The interval's allocations are the cumulative ones minus those of the previous report, site
//! by site (a site is its symbolized stack); what is in use is the report's own, at the end of
//! the interval. Sampled estimates are differences of monotonic weighted sums, so the
//! intervals of a run add up to the run's estimate exactly. The profile is
//! `allocs::pprof::heap` of that interval's report, with the interval's start and length as
//! its time and duration.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use super::{
    pprof_dir::PprofDir,
    queue,
    targets::{Kind, Target},
};
use crate::{
    allocs::{
        Reports,
        pprof::{Run, heap},
        report::Report,
    },
    event_loop::End,
    export::pprof::{builder, stacks::Stacks},
    symbolize::Symbolizer,
};

/// Where a target's profiles go, shared by every target.
pub struct Outlets {
    pub pprof_dir: Option<PprofDir>,
    /// One queue per network backend, with the backend's name.
    pub queues: Vec<(String, Arc<queue::Queue>)>,
    /// Profiles made, by every target.
    pub profiles: AtomicU64,
    /// Profiles that could not be written to `--pprof-dir`.
    pub write_errors: AtomicU64,
    /// The agent is stopping: every profiler ends, with its last report.
    pub stopping: AtomicBool,
}

/// The sampling the profiles say they were taken with.
#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    pub every: u64,
    pub sample_bytes: Option<u64>,
}

/// One target's state between ticks.
pub struct Intervals<'a> {
    target: &'a Target,
    labels: Arc<super::labels::Labels>,
    outlets: &'a Outlets,
    sampling: Sampling,
    place: String,
    /// Each site's cumulative (allocations, bytes) at the previous tick.
    previous: HashMap<Vec<String>, (u64, u64)>,
    /// The start of the current interval.
    from: SystemTime,
    /// When the profiler armed: a report's `elapsed_s` counts from then.
    armed_at: SystemTime,
}

impl<'a> Intervals<'a> {
    pub fn new(target: &'a Target, outlets: &'a Outlets, sampling: Sampling) -> Self {
        Self {
            target,
            labels: Arc::new(target.labels.clone()),
            outlets,
            sampling,
            place: target.place.clone(),
            previous: HashMap::new(),
            from: SystemTime::now(),
            armed_at: SystemTime::now(),
        }
    }
}

/// The report of the interval since `previous` (updated to `report`'s cumulative numbers):
/// each site's allocations and bytes since then, its in-use numbers as they are; sites with
/// nothing allocated and nothing in use are left out.
pub fn interval_of(previous: &mut HashMap<Vec<String>, (u64, u64)>, report: &Report) -> Report {
    let mut out = report.clone();
    out.sites.clear();
    out.totals.allocs = 0;
    out.totals.bytes = 0;
    for site in &report.sites {
        let (allocs, bytes) = previous
            .insert(site.stack.clone(), (site.allocs, site.bytes))
            .unwrap_or_default();
        let mut s = site.clone();
        s.allocs = site.allocs.saturating_sub(allocs);
        s.bytes = site.bytes.saturating_sub(bytes);
        if s.allocs == 0 && s.bytes == 0 && s.live_allocs == 0 && s.live_bytes == 0 {
            continue;
        }
        out.totals.allocs += s.allocs;
        out.totals.bytes += s.bytes;
        out.sites.push(s);
    }
    out
}

fn unix_ns(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as i64
}

impl Reports for Intervals<'_> {
    fn armed(&mut self) {
        self.armed_at = SystemTime::now();
        self.from = self.armed_at;
    }

    fn end(&mut self) -> Option<End> {
        if self.outlets.stopping.load(Ordering::Relaxed) {
            return Some(End::Finished);
        }
        match &self.target.kind {
            Kind::Cgroup(path)
                if self.target.drop_when_empty && !super::containers::has_processes(path) =>
            {
                Some(End::TargetExited)
            }
            _ => None,
        }
    }

    fn report(&mut self, report: &Report, symbolizer: &mut Symbolizer, _last: bool) {
        // The moment the kernel's maps were read, not now: naming the stacks took a while.
        let until = (self.armed_at + Duration::from_secs_f64(report.elapsed_s)).max(self.from);
        let interval = interval_of(&mut self.previous, report);
        let elapsed = until.duration_since(self.from).unwrap_or_default();
        let mut stacks = Stacks::new(symbolizer);
        let mut profile = heap(
            &interval,
            &mut stacks,
            &Run {
                place: &self.place,
                every: self.sampling.every,
                sample_bytes: self.sampling.sample_bytes,
                elapsed,
            },
        );
        profile.time_nanos = unix_ns(self.from);
        profile.duration_nanos = elapsed.as_nanos() as i64;
        let mut pprof_gz = Vec::new();
        let from = std::mem::replace(&mut self.from, until);
        if let Err(e) = builder::write(&profile, &mut pprof_gz) {
            eprintln!("oi-trace: agent: {}: encoding a profile: {e}", self.place);
            return;
        }
        self.outlets.profiles.fetch_add(1, Ordering::Relaxed);
        if let Some(dir) = &self.outlets.pprof_dir
            && let Err(e) = dir.write(&self.labels, &self.target.short, until, &pprof_gz)
            && self.outlets.write_errors.fetch_add(1, Ordering::Relaxed) == 0
        {
            eprintln!(
                "oi-trace: agent: writing a profile to {}: {e} (further failures are counted)",
                dir.dir.display()
            );
        }
        let profile = Arc::new(queue::Profile {
            labels: self.labels.clone(),
            from,
            until,
            pprof_gz,
        });
        for (_, queue) in &self.outlets.queues {
            queue.offer(profile.clone());
        }
    }
}

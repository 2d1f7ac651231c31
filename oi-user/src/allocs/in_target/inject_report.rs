//! The report of `allocs --mechanism inject`: the target's exact counts (`record::Snapshot`),
//! the sampled sites, types and classes where sampling is on, what this mechanism cannot say
//! yet, and its text and JSON forms.

use super::*;

/// Totals as `allocs`' uprobe report has them, and what only the target's counts have.
#[derive(Debug, Clone, Serialize)]
pub struct InjectTotals {
    pub allocs: u64,
    pub frees: u64,
    pub bytes: u64,
    pub usable_bytes: u64,
    pub freed_bytes: u64,
    pub live_allocs: u64,
    pub live_bytes: u64,
    pub live_usable_bytes: u64,
    pub unknown_frees: u64,
    /// Allocations whose block found the live table full (`--max-live`).
    pub dropped: u64,
    pub failed: u64,
    pub reallocs: u64,
}

/// What the target's counters say beyond the totals.
#[derive(Debug, Clone, Serialize)]
pub struct InjectCounters {
    /// Hooked calls inside another hooked call of the same thread (passed through).
    pub nested_calls: u64,
    /// Calls of threads that found no thread slot: not counted.
    pub no_slot: u64,
    /// Thread slots taken.
    pub threads: u64,
    /// Live-table entries older than another of the same address (a free a signal handler
    /// made inside an allocator call), and entries not believed.
    pub stale: u64,
    pub bad_entries: u64,
    /// Threads inside a wrapper when the counts were read (0 after detaching).
    pub in_flight: u64,
    /// Children the target forked that ran the patched code (found within a second, then
    /// unpatched): their allocations until then are in these counts.
    pub forked: u64,
}

/// The report of a run in the target (`--format json`: these keys).
#[derive(Debug, Clone, Serialize)]
pub struct InjectReport {
    pub pid: i32,
    pub elapsed_s: f64,
    pub mechanism: &'static str,
    pub sampled: bool,
    pub totals: InjectTotals,
    pub buckets_s: Vec<f64>,
    /// Freed blocks by lifetime: < each bound, then ≥ the last.
    pub lifetimes: Vec<u64>,
    pub usable_size: &'static str,
    /// Each allocator function and how it was counted.
    pub functions: Vec<FunctionMechanism>,
    /// How the sites were sampled, and what was lost.
    pub sampling: Option<SamplingStats>,
    /// Estimated from the samples, scaled as the uprobe path's `--sample-bytes` and `--every`
    /// are (`"sampled": true`): the same keys as its report's.
    pub sites: Vec<SiteView>,
    pub types: Vec<TypeView>,
    pub classes: Vec<ClassView>,
    /// What this mechanism does not report yet, and why.
    pub not_available: Vec<&'static str>,
    pub counters: InjectCounters,
    /// The top `--top` of each table in the readable report.
    #[serde(skip)]
    top: usize,
    #[serde(skip)]
    tables: Option<Report>,
}

/// Why sites, types and classes are missing.
const NO_STACKS: &str = "sites, types and classes: they need allocating stacks, which \
                         --mechanism inject does not take yet (use --mechanism uprobes)";
/// What the sampled sites do not have.
const NO_SITE_LIFETIMES: &str = "lifetimes per site: the lifetimes histogram counts every \
                                 freed block, but not by site";
/// Why new/delete are not told apart.
const NO_NEW_DELETE: &str = "operator new/delete kinds and mismatches: libstdc++'s operator \
                             new and delete are counted at the malloc and free they call";

impl InjectReport {
    pub(super) fn new(
        s: &Snapshot,
        pid: i32,
        elapsed: Duration,
        bucket_s: &[f64],
        functions: Vec<FunctionMechanism>,
        forked: &[i32],
        sites: Option<(&Report, SamplingStats)>,
    ) -> Self {
        let (live_bytes, live_usable_bytes) = s.live_bytes();
        let t = &s.totals;
        let tables = sites.as_ref().map(|(r, _)| *r);
        let mut not_available = vec![if sites.is_some() {
            NO_SITE_LIFETIMES
        } else {
            NO_STACKS
        }];
        if functions.iter().any(|f| f.mechanism == "none") {
            not_available.push(NO_NEW_DELETE);
        }
        Self {
            pid,
            elapsed_s: elapsed.as_secs_f64(),
            mechanism: "inject",
            sampled: sites.is_some(),
            totals: InjectTotals {
                allocs: t.allocs,
                frees: t.frees,
                bytes: t.bytes,
                usable_bytes: t.usable_bytes,
                freed_bytes: t.freed_bytes,
                live_allocs: s.live.len() as u64,
                live_bytes,
                live_usable_bytes,
                unknown_frees: t.unknown_frees,
                dropped: s.table_full,
                failed: t.failed,
                reallocs: t.reallocs,
            },
            buckets_s: bucket_s.to_vec(),
            lifetimes: t.lifetimes.clone(),
            usable_size: "glibc",
            functions,
            sampling: sites.as_ref().map(|(_, stats)| stats.clone()),
            sites: tables.map_or_else(Vec::new, |r| r.sites.clone()),
            types: tables.map_or_else(Vec::new, |r| r.types.clone()),
            classes: tables.map_or_else(Vec::new, |r| r.classes.clone()),
            tables: tables.cloned(),
            top: 10,
            not_available,
            counters: InjectCounters {
                nested_calls: t.nested,
                no_slot: s.no_slot,
                threads: s.threads,
                stale: s.stale,
                bad_entries: s.bad_entries,
                in_flight: s.in_flight,
                forked: forked.len() as u64,
            },
        }
    }

    fn text(&self, place: &str) -> String {
        let t = &self.totals;
        let mut out = format!(
            "allocations of {place} over {:.1} s: {} allocs ({}), {} frees; live: {} blocks ({}); \
             unknown frees: {}; dropped: {}\n",
            self.elapsed_s,
            thousands(t.allocs),
            human(t.bytes),
            thousands(t.frees),
            thousands(t.live_allocs),
            human(t.live_bytes),
            thousands(t.unknown_frees),
            thousands(t.dropped),
        );
        out += &format!(
            "usable bytes: {} allocated, {} live; failed allocations: {}; reallocs: {}\n",
            human(t.usable_bytes),
            human(t.live_usable_bytes),
            thousands(t.failed),
            thousands(t.reallocs),
        );
        let labels = crate::allocs::report::bucket_labels(&self.buckets_s);
        let hist: Vec<String> = labels
            .iter()
            .zip(&self.lifetimes)
            .map(|(l, n)| format!("{l}: {}", thousands(*n)))
            .collect();
        out += &format!("lifetimes of freed blocks: {}\n", hist.join("  "));
        let of = |m: &str| -> Vec<&str> {
            self.functions
                .iter()
                .filter(|f| f.mechanism == m)
                .map(|f| f.function.as_str())
                .collect()
        };
        out += &format!(
            "\ncounted in the target (patched): {}\n",
            of("inject").join(", ")
        );
        let mut files: Vec<&str> = self
            .functions
            .iter()
            .filter(|f| f.mechanism == "none")
            .map(|f| f.file.as_str())
            .collect();
        files.dedup();
        for file in files {
            let n = self
                .functions
                .iter()
                .filter(|f| f.mechanism == "none" && f.file == file)
                .count();
            out += &format!(
                "not hooked, counted at the C function they call: {file}'s operator new and \
                 delete ({n} variants)\n"
            );
        }
        for n in &self.not_available {
            out += &format!("not available: {n}\n");
        }
        if let (Some(tables), Some(s)) = (&self.tables, &self.sampling) {
            let how = match (s.mean_bytes, s.every) {
                (Some(b), _) => format!("a sample every {} allocated on average", human(b)),
                (None, Some(1)) => "every allocation".to_string(),
                (None, Some(n)) => format!("one allocation in {n}"),
                _ => String::new(),
            };
            out += &format!(
                "\nsites, types and classes: estimated from {} sampled allocations ({how}; {} \
                 lost, {} stacks cut short)\n",
                thousands(s.read),
                thousands(s.dropped + s.bad),
                thousands(s.truncated_stacks),
            );
            out += &crate::allocs::report::sections(tables, self.top);
        }
        if self.counters.forked > 0 {
            out += &format!(
                "forked: {} child process(es) ran the patched code until found and unpatched; \
                 their allocations until then are in the counts above\n",
                self.counters.forked
            );
        }
        out
    }
}

pub(super) fn print(report: &InjectReport, args: &AllocsArgs, scope: &Scope) {
    let report = &InjectReport {
        top: args.top,
        ..report.clone()
    };
    let mut out = std::io::stdout().lock();
    let written = match args.format {
        AllocsFormat::Text => out.write_all(report.text(&scope.place).as_bytes()),
        AllocsFormat::Json => serde_json::to_writer(&mut out, report)
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out)),
    };
    // A closed stdout (a pager that quit) is no failure of the profiler.
    let _ = written.and_then(|()| out.flush());
}

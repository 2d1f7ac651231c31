//! `oi-trace allocs`: options of the allocation profiler. Parsing and validation only.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::profiler::ScopeArgs;

/// Every allocation and free of a live process, by site, by C++ type and by class.
///
/// Hooks every allocation entry point the process maps (glibc's malloc family, every
/// operator new/delete, jemalloc and tcmalloc, allocators linked into the executable) with
/// eBPF uprobes: no LD_PRELOAD, no restart, the target is never stopped. A call that reaches
/// another hooked function counts once, at the outermost call. Stacks are unwound from the
/// binaries' CFI, so -O2 code without frame pointers gives whole stacks.
#[derive(Debug, Clone, Args)]
#[command(after_help = "\
Examples:
  oi-trace allocs --pid 4242 --duration 30
      every allocation for 30 s; top sites, types and classes, lifetimes, live bytes
  oi-trace allocs --pid 4242 --interval 10 --buckets 0.01,1,60
      a report every 10 s, lifetimes split at 10 ms, 1 s and 1 min
  oi-trace allocs --pid 4242 --sample-bytes 524288 --flamegraph allocs.svg
      a hot service: about one sample per 512 KiB, estimates scaled; a flame graph by bytes
  oi-trace allocs --cgroup /sys/fs/cgroup/shop.slice --format json --duration 60

Exit status: 0 success, 1 the profiler failed while running, 2 bad usage or input.")]
pub struct AllocsArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,

    /// Record every Nth allocation only (counted exactly in the kernel); figures are scaled
    /// by N and marked as estimates.
    #[arg(long, value_name = "N", conflicts_with = "sample_bytes")]
    pub every: Option<u64>,

    /// Record on average one allocation per B requested bytes, as jemalloc and tcmalloc sample;
    /// figures are scaled and marked as estimates.
    #[arg(long, value_name = "B")]
    pub sample_bytes: Option<u64>,

    /// Lifetime bucket bounds in seconds, ascending (default: 0.001,0.01,0.1,1,10,60).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub buckets: Vec<f64>,

    /// Most live blocks tracked at once; allocations beyond it are counted as dropped.
    #[arg(long, value_name = "N", default_value_t = 1 << 20)]
    pub max_live: u32,

    /// How many sites, types and classes the readable report lists.
    #[arg(long, value_name = "K", default_value_t = 10)]
    pub top: usize,

    /// Report format: a readable report, or one JSON object per report.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,

    /// At exit, write folded stacks weighted by bytes (for flame graph tools).
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,

    /// At exit, write a flame graph of the allocating stacks, weighted by bytes (SVG).
    #[arg(long, value_name = "FILE")]
    pub flamegraph: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Text,
    Json,
}

//! `oi-trace allocs`: options of the allocation profiler. Parsing and validation only.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::profiler::ScopeArgs;

/// Every allocation and free of a live process, by site, by C++ type and by class, with
/// lifetimes; no LD_PRELOAD, no restart, nothing stopped.
///
/// Puts uprobes on the entry and on every return instruction of every allocator function the
/// process maps: malloc, calloc, realloc, reallocarray, free, posix_memalign, aligned_alloc,
/// memalign, valloc, pvalloc; every operator new and delete (sized, aligned, nothrow) wherever
/// it is defined; jemalloc's *allocx and je_ names and tcmalloc's tc_ names when loaded. A call
/// that reaches another hooked function (operator new → malloc) counts once. The kernel keeps
/// the live blocks, the allocating stacks and their counts; nothing is sent per allocation.
///
/// A site is one allocating stack, innermost caller first, without the allocator's own frames.
/// Its type comes from the standard library's allocator frames in the stack
/// (std::__new_allocator<T>::allocate, _Rb_tree<…>::_M_get_node, make_shared<T>); a class gets
/// every allocation made beneath one of its methods. Sizes: the requested bytes, and for glibc
/// the usable bytes of the chunk (what malloc_usable_size says).
#[derive(Debug, Clone, Args)]
#[command(after_help = "\
Examples:
  oi-trace allocs --pid 4242 --duration 30
      30 s of allocations: top sites, types and classes, lifetimes, what is still live
  oi-trace allocs --pid 4242 --interval 10 --format json
      one JSON report every 10 s until Ctrl-C, and one at the end
  oi-trace allocs --pid 4242 --duration 60 --buckets 0.01,1,30 --flamegraph heap.svg
      lifetimes in four buckets (< 10 ms, < 1 s, < 30 s, longer), and a flame graph of bytes
  oi-trace allocs --cgroup /sys/fs/cgroup/shop.slice --every 100 --duration 10
      every process of the cgroup, every 100th allocation (estimates scaled by 100)
  oi-trace allocs --pid 4242 --duration 30 --pprof heap.pb.gz && go tool pprof -top heap.pb.gz
      a Go-style heap profile, read with pprof (or sent to Pyroscope)
  oi-trace allocs --pid 4242 --mechanism inject --duration 30
      exact totals, bytes, live blocks and lifetimes counted inside the process (glibc's
      malloc family patched, no trap per call); sites, types and classes estimated from a
      sample every 512 KiB allocated (--sample-bytes, --every)

Exit status: 0 success, 1 the profiler failed while running, 2 bad usage or input.")]
pub struct AllocsArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,

    /// Output format of the report.
    #[arg(long, value_enum, default_value_t = AllocsFormat::Text)]
    pub format: AllocsFormat,

    /// Lifetime bucket bounds in seconds, ascending (`1,5,30`): freed blocks are counted as
    /// < the first, < the second, …, ≥ the last. Default: 0.001,0.01,0.1,1,10,60.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub buckets: Option<Vec<f64>>,

    /// Take every Nth allocation only (exact, counted in the kernel; with --mechanism inject,
    /// the stacks of every Nth allocation of each thread); the report's numbers are scaled by
    /// N and marked as estimates.
    #[arg(long, value_name = "N", conflicts_with = "sample_bytes")]
    pub every: Option<u64>,

    /// Take on average one sample per B bytes allocated, as jemalloc and tcmalloc do: an
    /// allocation of n bytes is taken with probability n / B (always when n ≥ B) and stands for
    /// B / n allocations. Counts and bytes are estimates, marked as such; lifetimes count the
    /// samples. With --mechanism inject (default 524288 there): the stacks of the allocations
    /// that cross a Poisson process of mean B over each thread's bytes (probability
    /// 1 − exp(−n/B)); totals stay exact.
    #[arg(long, value_name = "B")]
    pub sample_bytes: Option<u64>,

    /// Most live blocks the kernel keeps; allocations beyond are counted as dropped.
    #[arg(long, value_name = "N", default_value_t = 262_144)]
    pub max_live: u32,

    /// Most distinct allocating stacks the kernel keeps; allocations of further stacks are
    /// counted, without a site.
    #[arg(long, value_name = "N", default_value_t = 16_384)]
    pub max_stacks: u32,

    /// Sites, types and classes shown in the readable report.
    #[arg(long, value_name = "K", default_value_t = 10)]
    pub top: usize,

    /// At exit, write folded stacks (innermost frame last), each weighted by its bytes.
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,

    /// At exit, write a flame graph of the allocated bytes by stack (SVG).
    #[arg(long, value_name = "FILE")]
    pub flamegraph: Option<PathBuf>,

    /// At exit, write a pprof heap profile (gzipped profile.proto, as Go writes one):
    /// alloc_objects, alloc_space, inuse_objects, inuse_space (the default) per stack, the
    /// C++ type and the classes as leaf frames (`type: shop::Item`); sampled numbers are
    /// scaled estimates. `go tool pprof -top FILE` reads it (docs/pprof.md).
    #[arg(long, value_name = "FILE")]
    pub pprof: Option<PathBuf>,

    /// At exit, write the lifetimes as a second pprof profile: frees per stack and lifetime
    /// bucket, the bucket a leaf frame (`lifetime: < 0.001 s`).
    #[arg(long, value_name = "FILE")]
    pub pprof_lifetimes: Option<PathBuf>,

    /// Where allocations are counted. `uprobes` (the default): a uprobe on every allocator
    /// function, counted in the kernel, with stacks. `inject`: glibc's malloc family patched
    /// to jump to counting code placed in the process (no trap per call); exact totals, bytes,
    /// live blocks and lifetimes; sites, types and classes estimated from sampled allocations
    /// (--sample-bytes, default 512 KiB, or --every N; --every 1 for exact sites); one --pid
    /// only. A process that cannot be patched whole stays on uprobes (one line on stderr says
    /// why).
    #[arg(long, value_enum, default_value_t = AllocsMechanism::Uprobes)]
    pub mechanism: AllocsMechanism,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AllocsMechanism {
    Uprobes,
    Inject,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AllocsFormat {
    Text,
    Json,
}

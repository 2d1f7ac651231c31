//! `oi-trace calls`: options of the call-tree profiler. Parsing and validation only.

use std::{path::PathBuf, time::Duration};

use clap::{Args, ValueEnum};

use super::profiler::{ScopeArgs, parse_time};

/// Times every call beneath an entry point, per thread, as a call tree.
///
/// Puts uprobes on the entry and on the return instructions of the entry function and of every
/// function the filters select (never uretprobes: an exception unwinding through one kills a C++
/// program). A call counts only while its thread is inside the entry function; per-thread
/// shadow stacks in the kernel aggregate the tree, so nothing is sent per call and the target is
/// never stopped.
#[derive(Debug, Clone, Args)]
#[command(after_help = "\
Examples:
  oi-trace calls --pid 4242 --entry shop::handle --duration 10
      the call tree beneath every shop::handle for 10 s
  oi-trace calls --pid 4242 --entry shop::handle --filter 'shop::*' --depth 4 --min-time 10us
      only shop's functions, 4 levels deep, hiding nodes under 10 us
  oi-trace calls --pid 4242 --entry shop::handle --count 100 --chrome trace.json
      the first 100 requests, and a Perfetto/Chrome timeline of the first 10
  oi-trace calls --pid 4242 --entry shop::handle --mechanism inject --duration 10
      timed inside the process by patched entries instead of uprobes

Exit status: 0 success, 1 the profiler failed while running, 2 bad usage or input.")]
pub struct CallsArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,

    /// The entry point: calls are counted only while a thread is inside it (mangled or
    /// demangled, with or without parameters).
    #[arg(long, value_name = "SYM")]
    pub entry: String,

    /// Instrument only functions whose demangled name (without parameters) matches GLOB
    /// (`shop::*`, `*::parse*`); may name functions of shared libraries. Repeatable.
    /// Default: every function of the binary that defines the entry, minus the C++ runtime.
    #[arg(long, value_name = "GLOB")]
    pub filter: Vec<String>,

    /// Leave out functions matching GLOB. Repeatable.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,

    /// Deepest level of the tree below the entry that is timed (the entry is level 0).
    #[arg(long, value_name = "D")]
    pub depth: Option<u32>,

    /// Hide nodes whose total time is below TIME (`10us`, `1ms`); their time stays in the
    /// parent's.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub min_time: Option<Duration>,

    /// Stop after K completed calls of the entry.
    #[arg(long, value_name = "K")]
    pub count: Option<u64>,

    /// Output format of the tree.
    #[arg(long, value_enum, default_value_t = TreeFormat::Tree)]
    pub format: TreeFormat,

    /// At exit, write folded stacks for flame graph tools: each path weighted by its self time
    /// in ns, so that a frame's width is its total time.
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,

    /// At exit, write a flame graph of the tree, weighted by time (SVG).
    #[arg(long, value_name = "FILE")]
    pub flamegraph: Option<PathBuf>,

    /// At exit, write the tree as a pprof profile (gzipped profile.proto): per stack beneath
    /// the entry, calls/count, wall/nanoseconds (total, callees included) and
    /// self/nanoseconds (the default). `go tool pprof -top FILE` reads it (docs/pprof.md).
    #[arg(long, value_name = "FILE")]
    pub pprof: Option<PathBuf>,

    /// Write a Chrome trace (Perfetto reads it) of every call of the first K entries
    /// (--trace-entries).
    #[arg(long, value_name = "FILE")]
    pub chrome: Option<PathBuf>,

    /// How many entries --chrome records call by call.
    #[arg(long, value_name = "K", default_value_t = 10, requires = "chrome")]
    pub trace_entries: u32,

    /// Also print a latency histogram per function.
    #[arg(long)]
    pub histograms: bool,

    /// Most nodes (function × path) the kernel keeps; calls beyond are counted, not timed.
    #[arg(long, value_name = "N", default_value_t = 65536)]
    pub max_nodes: u32,

    /// How calls are timed. `uprobes` (the default): a uprobe on each function's entry and
    /// returns, aggregated in the kernel. `inject` (opt-in): each function's entry patched to
    /// jump to a stub placed in the process, which times calls inside the entry's window and
    /// passes the others on after one check; one --pid only; no --histograms or --chrome yet.
    /// Functions whose first instructions cannot be moved are left untimed and listed on
    /// stderr with the reason (docs/calls.md).
    #[arg(long, value_enum, default_value_t = CallsMechanism::Uprobes)]
    pub mechanism: CallsMechanism,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CallsMechanism {
    Uprobes,
    Inject,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TreeFormat {
    Tree,
    Json,
}

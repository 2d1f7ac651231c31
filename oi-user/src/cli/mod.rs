//! Command-line arguments. Parsing and validation only; `footprint` (footprints) and the
//! profilers do the work. Without a tool name, oi-trace measures footprints; `oi-trace calls …`
//! is the call-tree profiler and `oi-trace allocs …` the allocation profiler, whose options
//! live in files of their own.

pub mod agent;
pub mod allocs;
pub mod calls;
pub mod profiler;

use std::path::PathBuf;

use clap::{ArgGroup, Parser, Subcommand, ValueEnum};

/// Where the memory and the time of a running C++ process go.
///
/// Without a tool name: exact memory footprints of live objects. oi-trace puts an eBPF uprobe on
/// SYMBOL in a running process (or every process of a cgroup), counts its hits in the kernel,
/// and on every Nth hit briefly freezes the calling thread and measures the function's
/// arguments: the object, every container inside it, every heap block it owns.
///
/// `oi-trace calls` times call trees without stopping the target (`oi-trace calls --help`);
/// `oi-trace allocs` profiles every allocation and free (`oi-trace allocs --help`);
/// `oi-trace agent` does so continuously and delivers pprof profiles (`oi-trace agent --help`).
///
/// Needs root, or CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (docs/privileges.md,
/// "Running without root"), and binaries built with -g.
#[derive(Debug, Parser)]
#[command(name = "oi-trace", version, max_term_width = 100)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
#[command(subcommand_value_name = "TOOL", subcommand_help_heading = "Tools")]
pub struct Cli {
    #[command(subcommand)]
    pub tool: Option<Tool>,

    #[command(flatten)]
    pub footprint: Args,
}

#[derive(Debug, Subcommand)]
pub enum Tool {
    /// Time every call beneath an entry point, per thread, as a call tree.
    Calls(calls::CallsArgs),
    /// Every allocation and free, by site, type and class, with lifetimes.
    Allocs(allocs::AllocsArgs),
    /// Continuous profiling: a pprof profile per target and interval, to files or Pyroscope.
    Agent(agent::AgentArgs),
}

/// Footprints: measure a function's arguments at its entry or return.
#[derive(Debug, clap::Args)]
#[command(group(ArgGroup::new("target").required(true).args(["pid", "cgroup"])))]
#[command(group(ArgGroup::new("probes").required(true).multiple(true).args(["uprobe", "uretprobe", "global"])))]
#[command(after_help = "\
Examples:
  oi-trace --pid 4242 --uprobe 'shop::Ledger::inspect' --count 1 --format tree
      measure arg0 of the next call of shop::Ledger::inspect, print a readable tree
  oi-trace --pid 4242 --uprobe _ZN4shop6Ledger7inspectEi --arg this,arg0 --every 1000
      every 1000th call, measure the object and the first argument, one JSON line each
  oi-trace --pid 4242 --uprobe 'shop::Ledger::inspect(int)' --count-only --duration 10
      count calls for 10 seconds without freezing anything
  oi-trace --cgroup /sys/fs/cgroup/shop.slice --uprobe shop::Ledger::inspect --every 100
      every process of the cgroup and its descendants, now and later
  oi-trace --pid 4242 --uprobe shop::Ledger::inspect --arg this --count 1 --format tree \
           --values --svg ledger.svg
      the object as C++ names it, largest members first, with values, and as a picture
  oi-trace --pid 4242 --uprobe shop::Cache::get --arg this --every 1000 --duration 60 \
           --growth growth.json --interval 10
      which member keeps growing: per member, first/last/min/max bytes over a minute

An argument whose walk fails (a corrupt or freed object) beside arguments that were
measured is `{}` in its place in the JSON (a line saying why in the tree and CSV, a warning
on stderr): the sample counts as measured.

Exit status: 0 success, 1 a sample failed or the target exited, 2 bad usage or input, 6 the
only failed samples were samples of several arguments none of which could be measured (OI's
oid status; a single argument that fails is exit 1).")]
pub struct Args {
    /// Trace this process (all of its threads).
    #[arg(long, value_name = "PID")]
    pub pid: Option<i32>,

    /// Trace every process in this cgroup v2 directory and below it, current and future.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,

    /// Probe the entry of SYM (mangled or demangled, with or without parameters). Repeatable.
    #[arg(long, value_name = "SYM")]
    pub uprobe: Vec<String>,

    /// Probe the returns of SYM (uprobes on its return instructions: exceptions pass
    /// through unharmed; returns through a tail call are counted, not measured); lets you
    /// measure `retval`. Repeatable.
    #[arg(long, value_name = "SYM")]
    pub uretprobe: Vec<String>,

    /// Measure the global or namespace-scope variable NAME, with no probe: once, or every
    /// --interval S. Named as --uprobe names functions (`shop::ledger`, a unique suffix
    /// `ledger`, anonymous namespaces left out, or the mangled name). Repeatable; --pid only. In jit mode one thread
    /// is interrupted for the walk; in remote mode the process runs while it is read.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["uprobe", "uretprobe", "cgroup"])]
    pub global: Vec<String>,

    /// With --global --mode remote: freeze every thread while the variable is read, for a
    /// snapshot no other thread changes meanwhile.
    #[arg(long, requires = "global")]
    pub stop_all: bool,

    /// With --cgroup: also arm SYM in this binary, for processes that have not started yet.
    #[arg(long, value_name = "PATH", requires = "cgroup")]
    pub binary: Vec<PathBuf>,

    /// What to measure: arg0..argN, this, retval; comma-separated.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "arg0",
        value_delimiter = ','
    )]
    pub arg: Vec<String>,

    /// Sample every Nth hit of each probe (counted exactly in the kernel).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub every: u64,

    /// Stop after K samples.
    #[arg(long, value_name = "K")]
    pub count: Option<u64>,

    /// Stop after S seconds (decimals allowed).
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,

    /// Freeze nothing, only count hits; the summary is the result.
    #[arg(long, conflicts_with_all = ["count", "arg", "feature", "sample_log"])]
    pub count_only: bool,

    /// Output format of each sample.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,

    /// Indent the JSON (one sample then spans several lines).
    #[arg(long)]
    pub pretty: bool,

    /// With --format json: one object per sample that says whose it is,
    /// {"probe","pid","tid","hit","args","sizes","roots"}, `roots` being the OI array of the
    /// arguments in `args` order (OI's readers take the bare array, the default).
    #[arg(long)]
    pub framed: bool,

    /// How containers' bytes are counted. `real` (the default): the bytes each container
    /// really obtained from the allocator for the object, as its library lays it out (a
    /// heap string's terminator, hash nodes with the hash code only where the library caches
    /// it, no bucket array for a one-bucket table, make_shared's control block). `oi`:
    /// Object Introspection's rules, byte for byte, for comparing with OI. The JSON format
    /// is the same; the summary line and --framed say which was used (docs/semantics.md).
    #[arg(long, value_enum, default_value_t = Sizes::Real)]
    pub sizes: Sizes,

    /// OI features: chase-raw-pointers, capture-keys, polymorphic-inheritance. Repeatable.
    #[arg(long, value_name = "NAME")]
    pub feature: Vec<String>,

    /// OI's configuration file (TOML, as oid reads it): its `features`, `[[codegen.ignore]]`
    /// (a type measured as opaque, or some of its members left out) and
    /// `[[codegen.capture_keys]]`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Container descriptions (TOML, docs/containers.md), on top of the shipped ones.
    /// Repeatable; a later file wins for the same container name.
    #[arg(long, value_name = "FILE")]
    pub containers: Vec<PathBuf>,

    /// Where the walker runs: `jit` compiles it and runs it inside the target (fast, the
    /// default); `remote` reads the target's memory from outside (no code enters the target).
    #[arg(long, value_enum, default_value_t = Mode::Jit)]
    pub mode: Mode,

    /// With --mode jit: give up a walk after S seconds (the thread is restored, the sample
    /// reported as failed; of several arguments, each is then walked alone with the same
    /// limit and only the one that fails is `{}`).
    #[arg(long, value_name = "S", default_value_t = 2.0)]
    pub walk_timeout: f64,

    /// At exit, write per-probe counters as JSON: [{"probe","hits","sampled","dropped","filtered",
    /// …,"samples_failed","roots_failed"}] (roots_failed: arguments printed as `{}`).
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,

    /// Refuse a binary whose debug information (its .debug_* sections, uncompressed) exceeds
    /// MB megabytes: a crafted or absurd file is a clear error, not an exhausted machine.
    #[arg(long, value_name = "MB", default_value_t = crate::debuginfo::dwarf::DEFAULT_MAX_DEBUGINFO_MB)]
    pub max_debuginfo_mb: u64,

    /// With --mode jit: append one line per mapping of our code into a process (who, into
    /// which pid, executable and cgroup, which probes, the code's BLAKE3, the region) to FILE,
    /// as well as to syslog (authpriv), which always gets it.
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,

    /// Write one JSON line per sample: {"probe","pid","tid","hit","pause_us","walk_us",
    /// "in_target_ns","regs"}.
    #[arg(long, value_name = "FILE")]
    pub sample_log: Option<PathBuf>,

    /// On stderr, per sample: the walk's time inside the target (--mode jit), the pause the
    /// sampled thread felt, and the report thread's CPU time to decode and print it.
    #[arg(short, long)]
    pub verbose: bool,

    /// With --format tree: children shown per node, largest first; the rest are summed up
    /// in one line (`… 990 more elements (3.9 KiB)`). Default 10.
    #[arg(long, value_name = "K", help_heading = "Output for people")]
    pub top: Option<usize>,

    /// With --format tree: type names as C++ is written (`std::map<int, std::string>`), or
    /// as Object Introspection spells them in the JSON (`oi`). Default: readable.
    #[arg(long, value_enum, help_heading = "Output for people")]
    pub names: Option<Names>,

    /// With --format tree: show scalar values (integers, enums by name, bools, floating
    /// point, pointers in hex or null), read by the same walk. Off by default: the walk
    /// then reads no values and the pause is unchanged.
    #[arg(long, help_heading = "Output for people")]
    pub values: bool,

    /// Draw the footprint as an icicle picture (SVG, width = bytes, tooltips with exact
    /// sizes) of the last sample, written at exit.
    #[arg(long, value_name = "FILE", help_heading = "Output for people")]
    pub svg: Option<PathBuf>,

    /// Write the last sample's footprint as folded stacks (`root;member;… bytes`), for
    /// flamegraph tools.
    #[arg(long, value_name = "FILE", help_heading = "Output for people")]
    pub folded: Option<PathBuf>,

    /// Write the last sample's footprint as a pprof profile (gzipped profile.proto):
    /// inuse_space/bytes per member path, so that `go tool pprof -top FILE` lists the members
    /// that hold the most (docs/pprof.md).
    #[arg(long, value_name = "FILE", help_heading = "Output for people")]
    pub pprof: Option<PathBuf>,

    /// Follow every member over the samples: at exit, write per member path the first,
    /// last, min and max inclusive bytes (JSON, largest growth first) and print the table.
    #[arg(long, value_name = "FILE", help_heading = "Output for people")]
    pub growth: Option<PathBuf>,

    /// With --growth: print the growth table so far on stderr every S seconds. With
    /// --global: take a snapshot every S seconds (until --count, --duration or Ctrl-C).
    #[arg(long, value_name = "S", help_heading = "Output for people")]
    pub interval: Option<f64>,
}

/// The rules that count containers' bytes (`--sizes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Sizes {
    /// What the object's containers really obtained from the allocator.
    Real,
    /// Object Introspection's rules.
    Oi,
}

/// Spelling of type names in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Names {
    /// As C++ is written: `std::string`, `std::map<int, std::string>`, `unsigned long`.
    Readable,
    /// As Object Introspection's JSON spells them.
    Oi,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Object Introspection's JSON, one line per sample.
    Json,
    /// An indented tree for people: readable names, largest first, summaries. Each root is
    /// labelled with the argument and its parameter name (`arg1 count:`, `this:`, `retval:`).
    Tree,
    /// Object Introspection's CSV exporter: one row per node, for spreadsheets.
    Csv,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Compiled walker, run inside the target on the sampled thread.
    Jit,
    /// Walk from outside the target with process_vm_readv.
    Remote,
}

impl Args {
    /// Checks that clap cannot express; the message is the user's error line.
    pub fn validate(&self) -> Result<(), String> {
        if self.every == 0 {
            return Err("--every must be at least 1 (sample every Nth hit), got 0".into());
        }
        if self.count == Some(0) {
            return Err("--count must be at least 1 (stop after K samples), got 0".into());
        }
        if let Some(d) = self.duration
            && !(d.is_finite() && d > 0.0)
        {
            return Err(format!(
                "--duration must be a positive number of seconds, got {d}"
            ));
        }
        if !(self.walk_timeout.is_finite() && self.walk_timeout > 0.0) {
            return Err(format!(
                "--walk-timeout must be a positive number of seconds, got {}",
                self.walk_timeout
            ));
        }
        for a in &self.arg {
            let ok = a == "this"
                || a == "retval"
                || a.strip_prefix("arg")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if !ok {
                return Err(format!("--arg {a:?}: expected arg0..argN, this or retval"));
            }
        }
        if self.arg.iter().any(|a| a == "retval") && !self.uprobe.is_empty() {
            return Err("--arg retval needs a return probe (--uretprobe), not --uprobe".into());
        }
        const FEATURES: [&str; 3] = [
            "chase-raw-pointers",
            "capture-keys",
            "polymorphic-inheritance",
        ];
        if let Some(f) = self
            .feature
            .iter()
            .find(|f| !FEATURES.contains(&f.as_str()))
        {
            return Err(format!(
                "unknown --feature {f:?}: expected one of {}",
                FEATURES.join(", ")
            ));
        }
        if self.pretty && self.format != Format::Json {
            return Err("--pretty applies to --format json only".into());
        }
        if self.framed && self.format != Format::Json {
            return Err("--framed applies to --format json only".into());
        }
        if let Some(s) = self.interval {
            if self.growth.is_none() && self.global.is_empty() {
                return Err("--interval applies to --growth or --global".into());
            }
            if !(s.is_finite() && s > 0.0) {
                return Err(format!(
                    "--interval must be a positive number of seconds, got {s}"
                ));
            }
        }
        if self.stop_all && self.mode != Mode::Remote {
            return Err("--stop-all applies to --mode remote (jit mode stops one thread)".into());
        }
        self.validate_outputs()
    }

    /// The options of the outputs for people (tree, pictures, growth).
    fn validate_outputs(&self) -> Result<(), String> {
        if self.top == Some(0) {
            return Err("--top must be at least 1 (children shown per node), got 0".into());
        }
        if self.format != Format::Tree {
            let tree_only = [
                (self.values, "--values"),
                (self.top.is_some(), "--top"),
                (self.names.is_some(), "--names"),
            ];
            if let Some((_, flag)) = tree_only.iter().find(|(set, _)| *set) {
                return Err(format!("{flag} applies to --format tree only"));
            }
        }
        if let Some(s) = self.interval
            && !(s.is_finite() && s > 0.0)
        {
            return Err(format!(
                "--interval must be a positive number of seconds, got {s}"
            ));
        }
        if self.count_only {
            let sampled = [
                (self.values, "--values"),
                (self.svg.is_some(), "--svg"),
                (self.folded.is_some(), "--folded"),
                (self.pprof.is_some(), "--pprof"),
                (self.growth.is_some(), "--growth"),
            ];
            if let Some((_, flag)) = sampled.iter().find(|(set, _)| *set) {
                return Err(format!("{flag} needs samples; --count-only takes none"));
            }
        }
        Ok(())
    }

    /// The features the walk plan is built with: the OI features, and `values` when the
    /// tree shows values (it changes what the walk reads).
    /// The features a plan is built with: `--feature`, the config file's, `--values` and
    /// `--sizes`.
    pub fn plan_features(&self) -> Result<Vec<String>, String> {
        let mut f = self.feature.clone();
        if let Some(path) = &self.config {
            for extra in crate::oi_config::features(path)? {
                if !f.contains(&extra) {
                    f.push(extra);
                }
            }
        }
        if self.values {
            f.push(crate::plan::build::VALUES.to_string());
        }
        f.push(
            match self.sizes {
                Sizes::Real => crate::plan::build::SIZES_REAL,
                Sizes::Oi => crate::plan::build::SIZES_OI,
            }
            .to_string(),
        );
        f.extend(crate::describe::parse::load_files(&self.containers)?);
        Ok(f)
    }
}

//! `oi-dev`: the drivers that `cargo xtask` runs once the machine is set up and oi-trace is
//! built. They link the oi-trace library and the journeys' fixture helpers, so they live
//! apart from `xtask`, which must compile on a machine that has none of the eBPF toolchain
//! yet. Run them through `cargo xtask demo | bench | soak | fuzz | conformance | protos`.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
};

mod bench;
mod conformance;
mod demo;
mod fuzz;
mod protos;
mod soak;

use anyhow::{Context as _, Result, ensure};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "oi-trace's demo, bench, soak, fuzz, conformance and protos drivers"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Start the bundled example program and show the four tools on it.
    Demo,
    /// Measure pause, time to first result, probe cost, DWARF at scale and throughput against
    /// baselines measured in the same run.
    Bench {
        /// Smaller objects and fewer repetitions (under two minutes).
        #[arg(long)]
        quick: bool,
        /// Only these figures (repeatable): pause, first-result, start-up, probe-cost, dwarf, throughput,
        /// calls, allocs, agent, oil, unwind, protobuf, record.
        #[arg(long, value_name = "FIGURE")]
        only: Vec<String>,
    },
    /// Fuzz the ELF/DWARF reader and the data-stream decoder with cargo-fuzz, seeded with
    /// corrupted copies of the fixtures (not part of CI).
    Fuzz {
        /// How long to run each fuzz target.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
    /// Run Object Introspection's own integration suite against this build and print its
    /// table. Not part of CI: it needs an OI repository.
    Conformance(conformance::Args),
    /// Sample an 8-thread fixture every 10 ms for N minutes and check oi-trace's memory, the
    /// target's threads and every sample.
    Soak {
        #[arg(long, default_value_t = 10)]
        minutes: u64,
        /// Soak `oi-trace agent` instead: four busy processes, every allocation counted, 5 s
        /// intervals; checks every interval delivered, exact counts and the agent's memory.
        #[arg(long)]
        agent: bool,
    },
    /// Regenerate the committed Rust of the vendored `.proto` files with prost-build.
    Protos,
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Demo => demo::run(),
        Task::Bench { quick, only } => bench::run(&root(), quick, &only),
        Task::Fuzz { seconds } => fuzz::run(&root(), seconds),
        Task::Conformance(args) => conformance::run(&root(), &args),
        Task::Soak { minutes, agent } => {
            if agent {
                soak::agent::run(minutes)
            } else {
                soak::run(minutes)
            }
        }
        Task::Protos => protos::run(&root()),
    }
}

fn root() -> PathBuf {
    oi_e2e::workspace_root()
}

/// Runs a command, failing with its command line when it fails.
fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?} failed: {status}");
    Ok(())
}

fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

//! Developer entry points: `cargo xtask setup | build | test | demo | bench | soak | fuzz |
//! conformance`.
//!
//! `setup` makes a fresh machine able to build oi-trace: it is idempotent and takes a second
//! when nothing is missing, and every other task runs it first. This crate depends on nothing
//! but clap and anyhow, because it must compile before the eBPF toolchain that oi-trace's build
//! script needs (nightly's rust-src, bpf-linker) is installed. The tasks that drive oi-trace
//! (demo, bench, soak, fuzz, conformance) live in `oi-devtools`, which this runs after setup.

mod setup;

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
};

use anyhow::{Context as _, Result, ensure};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "oi-trace developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

/// The arguments of a task that `oi-dev` parses; `--help` is passed on too.
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
struct Forwarded {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building and testing need: nightly's rust-src, LLVM and bpf-linker, g++,
    /// and the libraries and tools the journeys use. Prints each step and its time.
    Setup {
        /// Install nothing: print the Debian packages setup installs that a new machine of
        /// this kind lacks, one per line (CI removes them to look like a new machine).
        #[arg(long)]
        list_packages: bool,
    },
    /// Set up, then build target/release/oi-trace (with its eBPF objects) and liboil.so.
    Build,
    /// Set up, build, then run fmt and clippy checks and every test. Arguments go to
    /// `cargo test` (a test name filter, `-- --nocapture`).
    Test {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        cargo_args: Vec<String>,
    },
    /// Set up, build, start the bundled example program and show the four tools on it.
    Demo(Forwarded),
    /// Set up, build, then measure oi-trace against baselines taken in the same run
    /// (`cargo xtask bench --help` lists the figures).
    Bench(Forwarded),
    /// Set up, build, then sample a busy fixture for N minutes (`--minutes N`) and check
    /// oi-trace's memory, the target's threads and every sample.
    Soak(Forwarded),
    /// Set up, then fuzz the ELF/DWARF reader and the stream decoder (`--seconds N`).
    Fuzz(Forwarded),
    /// Set up, build, then run Object Introspection's integration suite against this build
    /// (`--oi-repo PATH`; `cargo xtask conformance --help` for the rest).
    Conformance(Forwarded),
}

fn main() -> Result<()> {
    let task = Cli::parse().task;
    if let Task::Setup {
        list_packages: true,
    } = task
    {
        for package in setup::added_packages()? {
            println!("{package}");
        }
        return Ok(());
    }
    let mut warm_up = (!matches!(task, Task::Setup { .. }))
        .then(warm_up)
        .flatten();
    let set_up = setup::run();
    if let Some(child) = &mut warm_up {
        // A failed setup stops the warm-up rather than leave it compiling after xtask exits.
        // The warm-up's own errors, if any, show again in the build itself.
        if set_up.is_err() {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
    set_up?;
    let (name, forwarded) = match task {
        Task::Setup { .. } => return Ok(()),
        Task::Build => return build(),
        Task::Test { cargo_args } => return build().and_then(|()| test(&cargo_args)),
        Task::Demo(f) => ("demo", f.args),
        Task::Bench(f) => ("bench", f.args),
        Task::Soak(f) => ("soak", f.args),
        Task::Fuzz(f) => ("fuzz", f.args),
        Task::Conformance(f) => ("conformance", f.args),
    };
    // The binary the build just made: `cargo run -p oi-devtools` would resolve features for
    // that one package and compile oi-user a second time.
    build()?;
    run(Command::new(target_dir().join("release/oi-dev"))
        .arg(name)
        .args(&forwarded)
        .current_dir(root()))
}

/// Where cargo puts what it builds.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// The workspace root: this crate's parent folder.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
        .to_path_buf()
}

/// Runs a command, failing with its command line when it fails.
fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?} failed: {status}");
    Ok(())
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

/// Compiles the largest dependencies while setup waits on apt and builds bpf-linker: they
/// need none of what setup installs, and they are most of a cold release build. Built with
/// the workspace's features, so the build after setup finds them fresh.
fn warm_up() -> Option<Child> {
    cargo()
        .args(["build", "--release", "--quiet"])
        .args([
            "-p",
            "cranelift-jit",
            "-p",
            "aya",
            "-p",
            "blazesym",
            "-p",
            "tokio",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// Builds the default members in one go (oi-trace with its eBPF objects, liboil.so, the
/// drivers): one cargo run unifies their features, so nothing is compiled twice.
fn build() -> Result<()> {
    run(cargo().args(["build", "--release"]))
}

fn test(cargo_args: &[String]) -> Result<()> {
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    run(cargo().args([
        "clippy",
        "--release",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    let bin = target_dir().join("release/oi-trace");
    run(cargo()
        .args(["test", "--release"])
        .args(cargo_args)
        .env("OI_TRACE_BIN", &bin))
}

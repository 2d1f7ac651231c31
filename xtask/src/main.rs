//! Developer entry points: `cargo xtask setup | build | test | demo | bench | fuzz | soak`.
//!
//! `setup` makes a fresh machine able to build oi-trace (idempotent, a second or two when
//! nothing is missing); every other command runs it first.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
};

mod bench;
mod fuzz;
mod soak;

use anyhow::{Context as _, Result, bail, ensure};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "oi-trace developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building needs: nightly rust-src, LLVM for bpf-linker, bpf-linker, g++.
    Setup,
    /// Set up, then build target/release/oi-trace with the eBPF object embedded, and
    /// target/release/liboil.so.
    Build,
    /// Set up, build, then run fmt and clippy checks and every test.
    Test {
        /// Extra arguments for `cargo test` (e.g. a test name filter).
        #[arg(trailing_var_arg = true)]
        cargo_args: Vec<String>,
    },
    /// Set up, build, start the bundled example program and trace it.
    Demo,
    /// Set up, build, then measure pause, time to first result, probe cost, DWARF at scale
    /// and throughput against baselines measured in the same run.
    Bench {
        /// Smaller objects and fewer repetitions (under two minutes).
        #[arg(long)]
        quick: bool,
        /// Only these figures (repeatable): pause, first-result, probe-cost, dwarf, throughput,
        /// calls, allocs, oil, unwind.
        #[arg(long, value_name = "FIGURE")]
        only: Vec<String>,
    },
    /// Set up, then fuzz the ELF/DWARF reader and the data-stream decoder with cargo-fuzz,
    /// seeded with corrupted copies of the fixtures (not part of CI).
    Fuzz {
        /// How long to run each fuzz target.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
    /// Set up, build, then run Object Introspection's own integration suite against this
    /// build (the harness in ../shared/oi-conformance) and print its table. Not part of CI:
    /// it needs an OI repository (`fetch github:facebookexperimental/object-introspection`).
    Conformance {
        /// The OI repository: a checkout, or the git directory `fetch` gives.
        #[arg(long, value_name = "PATH")]
        oi_repo: PathBuf,
        /// Also run the cases OI itself skips.
        #[arg(long)]
        force: bool,
        /// Only the cases whose `suite.case` matches this regular expression.
        #[arg(long, value_name = "REGEX")]
        filter: Option<String>,
    },
    /// Set up, build, then sample an 8-thread fixture every 10 ms for N minutes and check
    /// oi-trace's memory, the target's threads and every sample.
    Soak {
        #[arg(long, default_value_t = 10)]
        minutes: u64,
    },
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Setup => setup(),
        Task::Build => setup().and_then(|()| build()),
        Task::Test { cargo_args } => setup()
            .and_then(|()| build())
            .and_then(|()| test(&cargo_args)),
        Task::Demo => setup().and_then(|()| build()).and_then(|()| demo()),
        Task::Bench { quick, only } => setup()
            .and_then(|()| build())
            .and_then(|()| bench::run(&root(), quick, &only)),
        Task::Fuzz { seconds } => setup().and_then(|()| fuzz::run(&root(), seconds)),
        Task::Conformance {
            oi_repo,
            force,
            filter,
        } => setup()
            .and_then(|()| build())
            .and_then(|()| conformance(&oi_repo, force, filter.as_deref())),
        Task::Soak { minutes } => setup()
            .and_then(|()| build())
            .and_then(|()| soak::run(minutes)),
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

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stderr(Stdio::null())
        .output()
        .with_context(|| format!("starting {cmd:?}"))?;
    ensure!(out.status.success(), "{cmd:?} failed: {}", out.status);
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn setup() -> Result<()> {
    // The eBPF crate needs nightly with rust-src (-Z build-std=core).
    if !succeeds(Command::new("rustc").arg("+nightly").arg("-V")) {
        bail!("no nightly Rust toolchain; this machine kind ships one (rustup toolchain list)");
    }
    let installed = output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]))?;
    if !installed.lines().any(|l| l.starts_with("rust-src")) {
        eprintln!("setup: adding rust-src to nightly");
        run(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    // bpf-linker must be built against the LLVM major of the nightly that emits the bitcode.
    let version = output(Command::new("rustc").args(["+nightly", "-vV"]))?;
    let major = version
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next())
        .context("nightly rustc does not report its LLVM version")?
        .to_string();
    let mut packages = Vec::new();
    let llvm_prefix = PathBuf::from(format!("/usr/lib/llvm-{major}"));
    let linker_ok = bpf_linker_matches(&major);
    if !linker_ok && !llvm_prefix.join("lib/libLLVM.so").exists() {
        packages.extend([format!("llvm-{major}-dev"), format!("libpolly-{major}-dev")]);
    }
    if !succeeds(Command::new("g++").arg("--version")) {
        packages.push("g++".into());
    }
    // The real C++ library the tests drive (tests/fixtures/real_json.cpp).
    if !std::path::Path::new("/usr/include/nlohmann/json.hpp").exists() {
        packages.push("nlohmann-json3-dev".into());
    }
    // The other allocators the allocation profiler's journeys link (tests/tests/allocs.rs), and
    // bpftrace, the baseline of its benchmark.
    for (file, package) in [
        (
            "/usr/lib/x86_64-linux-gnu/libjemalloc.so",
            "libjemalloc-dev",
        ),
        (
            "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so",
            "libgoogle-perftools-dev",
        ),
        ("/usr/bin/bpftrace", "bpftrace"),
        // protobuf and Abseil, whose containers the shipped descriptions cover
        // (tests/tests/beyond_stdlib.rs): headers and libraries, and protoc for the fixture's
        // generated message.
        ("/usr/include/google/protobuf/message.h", "libprotobuf-dev"),
        ("/usr/bin/protoc", "protobuf-compiler"),
        ("/usr/include/absl/container/flat_hash_map.h", "libabsl-dev"),
        // Boost 1.81's headers (Boost.Container, Boost.Unordered's flat maps): the shipped
        // descriptions' fixture (tests/fixtures/footprint_boost.cpp).
        (
            "/usr/include/boost/unordered/unordered_flat_map.hpp",
            "libboost1.81-dev",
        ),
    ] {
        if !std::path::Path::new(file).exists() {
            packages.push(package.into());
        }
    }
    // setcap: the least-privilege journeys give a copy of oi-trace file capabilities.
    if !succeeds(Command::new("sh").args(["-c", "command -v setcap"])) {
        packages.push("libcap2-bin".into());
    }
    if !packages.is_empty() {
        eprintln!("setup: apt-get install {}", packages.join(" "));
        run(Command::new("apt-get").args(["update", "-q"]))?;
        run(Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&packages)
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
    }
    if !linker_ok {
        eprintln!("setup: building bpf-linker for LLVM {major} (about a minute)");
        run(Command::new("cargo")
            .args([
                "install",
                "bpf-linker",
                "--version",
                "0.13.0",
                "--force",
                "--no-default-features",
            ])
            .args(["--features", &format!("llvm-{major}")])
            .env("LLVM_PREFIX", &llvm_prefix))?;
    }
    Ok(())
}

/// bpf-linker is installed and linked against libLLVM of this major version.
fn bpf_linker_matches(major: &str) -> bool {
    let Ok(path) = output(Command::new("sh").args(["-c", "command -v bpf-linker"])) else {
        return false;
    };
    output(Command::new("ldd").arg(path.trim())).is_ok_and(|libs| {
        libs.contains(&format!("libLLVM.so.{major}")) || libs.contains(&format!("libLLVM-{major}"))
    })
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

fn build() -> Result<()> {
    run(cargo().args(["build", "--release", "--bin", "oi-trace"]))?;
    // liboil.so (oil/include/oil.h), which the OIL journeys link.
    run(cargo().args(["build", "--release", "-p", "oil"]))
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
    let bin = root().join("target/release/oi-trace");
    run(cargo()
        .args(["test", "--release"])
        .args(cargo_args)
        .env("OI_TRACE_BIN", &bin))
}

/// OI's suite through the shared harness, against target/release/oi-trace; its build cache
/// and results stay under target/oi-conformance.
fn conformance(oi_repo: &std::path::Path, force: bool, filter: Option<&str>) -> Result<()> {
    // The harness lives in `shared/` beside the repository; a git worktree sits deeper
    // (`wt/NAME`), so look beside every ancestor.
    let rel = "shared/oi-conformance/oi_conformance.py";
    let Some(harness) = root()
        .ancestors()
        .skip(1)
        .map(|d| d.join(rel))
        .find(|p| p.exists())
    else {
        bail!("no conformance harness at ../{rel} (it lives beside this repository, in shared/)");
    };
    let mut cmd = Command::new("python3");
    cmd.arg(&harness)
        .arg(oi_repo)
        .arg("--work")
        .arg(root().join("target/oi-conformance"))
        .arg("--oi-trace")
        .arg(root().join("target/release/oi-trace"))
        .arg("-j2");
    if force {
        cmd.arg("--force");
    }
    if let Some(f) = filter {
        cmd.args(["--filter", f]);
    }
    // The harness exits 1 when a case fails: its table is the result, not an error here.
    let status = cmd.status().context("running python3")?;
    match status.code() {
        Some(0 | 1) => Ok(()),
        _ => bail!("the conformance harness failed: {status}"),
    }
}

/// Starts the bundled example (a small shop that inspects its ledger about a thousand times a
/// second), counts its calls for a second, then measures the ledger at its 100th next call.
fn demo() -> Result<()> {
    let example = oi_e2e::FixtureBuild::new("demo_shop").build();
    let bin = root().join("target/release/oi-trace");
    let fixture = oi_e2e::Fixture::start(&example, &[]);
    let pid = fixture.pid.to_string();
    println!(
        "demo: example program {} running as pid {pid}",
        example.display()
    );
    let symbol = "shop::Ledger::inspect";
    let pictures = root().join("target/demo");
    std::fs::create_dir_all(&pictures)?;
    let svg = pictures.join("ledger.svg");
    let svg_arg = svg.display().to_string();
    let counting = [
        "--pid",
        &pid,
        "--uprobe",
        symbol,
        "--count-only",
        "--duration",
        "1",
    ];
    let measuring = [
        "--pid",
        &pid,
        "--uprobe",
        symbol,
        "--arg",
        "this",
        "--every",
        "100",
        "--count",
        "1",
        "--format",
        "tree",
        "--svg",
        &svg_arg,
        "--sample-log",
        "/dev/stdout",
    ];
    for args in [&counting[..], &measuring[..]] {
        println!("\n$ oi-trace {}", args.join(" "));
        run(Command::new(&bin).args(args))?;
    }
    println!(
        "\ndemo: the ledger's footprint as a picture (width = bytes, hover for sizes): {}",
        svg.display()
    );
    fixture.assert_running();
    println!("\ndemo: the example is still running, untouched; stopping it");
    ensure!(
        fixture.finish().success(),
        "the example exited with an error"
    );
    Ok(())
}

//! `cargo xtask setup`: installs what building and testing oi-trace need, and nothing twice.
//!
//! - nightly's `rust-src`: the eBPF crate is built with `-Z build-std=core`;
//! - Debian's LLVM of the nightly's major version, and `bpf-linker` built against it (the
//!   linker must read the bitcode that nightly emits);
//! - g++, clang with libc++, and the libraries and tools the journeys build against or
//!   compare with.
//!
//! Each step prints what it installs and how long it took. bpf-linker compiles while apt
//! installs the other packages, since the two compete for nothing but the network.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, Result, bail, ensure};

use crate::run as run_command;

/// Files whose absence means a Debian package is missing, and that package.
const PACKAGES: [(&str, &str); 17] = [
    ("/usr/bin/g++", "g++"),
    // The real C++ library the journeys drive (tests/fixtures/real_json.cpp).
    ("/usr/include/nlohmann/json.hpp", "nlohmann-json3-dev"),
    // The other allocators the allocation journeys link.
    (
        "/usr/lib/x86_64-linux-gnu/libjemalloc.so",
        "libjemalloc-dev",
    ),
    (
        "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so",
        "libgoogle-perftools-dev",
    ),
    // The baselines of the profilers' benchmarks (heaptrack attaches with `-p` through gdb).
    ("/usr/bin/bpftrace", "bpftrace"),
    ("/usr/bin/heaptrack", "heaptrack"),
    ("/usr/bin/gdb", "gdb"),
    // protobuf, Abseil and Boost, whose containers the shipped descriptions cover.
    ("/usr/include/google/protobuf/message.h", "libprotobuf-dev"),
    // protoc also decodes the profiles of `--pprof` in the journeys, and regenerates their
    // Rust (`cargo xtask protos`).
    ("/usr/bin/protoc", "protobuf-compiler"),
    // `go tool pprof`: the journeys read every `--pprof` profile with the reader people use.
    ("/usr/bin/go", "golang-go"),
    ("/usr/include/absl/container/flat_hash_map.h", "libabsl-dev"),
    (
        "/usr/include/boost/unordered/unordered_flat_map.hpp",
        "libboost1.81-dev",
    ),
    // setcap: the least-privilege journeys give a copy of oi-trace file capabilities.
    ("/usr/sbin/setcap", "libcap2-bin"),
    // nm: the conformance harness checks each built case for its symbol.
    ("/usr/bin/nm", "binutils"),
    // clang and libc++: the journeys build fixtures against another standard library too.
    // The versioned packages, which own the files (`libc++-dev` only depends on them, so CI,
    // removing it, would leave them).
    ("/usr/bin/clang++", "clang"),
    ("/usr/lib/llvm-14/include/c++/v1/vector", "libc++-14-dev"),
    ("/usr/lib/llvm-14/lib/libc++abi.so", "libc++abi-14-dev"),
];

/// Packages of [`PACKAGES`] that a new machine of this kind already has (the workplace's
/// description of the `rust` machine); CI leaves them in place.
const ON_A_NEW_MACHINE: [&str; 3] = ["g++", "libcap2-bin", "binutils"];

/// The Debian packages setup installs on a new machine: LLVM's development packages for
/// bpf-linker and every package of [`PACKAGES`] a new machine lacks.
pub fn added_packages() -> Result<Vec<String>> {
    let major = nightly_llvm_major()?;
    let mut packages = vec![format!("llvm-{major}-dev"), format!("libpolly-{major}-dev")];
    packages.extend(
        PACKAGES
            .iter()
            .map(|(_, package)| package.to_string())
            .filter(|p| !ON_A_NEW_MACHINE.contains(&p.as_str())),
    );
    Ok(packages)
}

/// The bpf-linker release this project builds with.
const BPF_LINKER_VERSION: &str = "0.13.0";

pub fn run() -> Result<()> {
    let started = Instant::now();
    let mut did_something = false;
    if !succeeds(Command::new("rustc").args(["+nightly", "-V"])) {
        bail!(
            "no nightly Rust toolchain (`rustup toolchain list`); this machine kind ships one, \
             and the eBPF crate needs it"
        );
    }
    if !has_rust_src()? {
        step("adding rust-src to the nightly toolchain", || {
            run_command(Command::new("rustup").args([
                "component",
                "add",
                "rust-src",
                "--toolchain",
                "nightly",
            ]))
        })?;
        did_something = true;
    }
    let major = nightly_llvm_major()?;
    let llvm_prefix = PathBuf::from(format!("/usr/lib/llvm-{major}"));
    let linker_ok = bpf_linker_matches(&major);
    let mut llvm = Vec::new();
    if !linker_ok && !llvm_prefix.join("lib/libLLVM.so").exists() {
        llvm.extend([format!("llvm-{major}-dev"), format!("libpolly-{major}-dev")]);
    }
    let others: Vec<String> = PACKAGES
        .iter()
        .filter(|(file, _)| !Path::new(file).exists())
        .map(|(_, package)| package.to_string())
        .collect();
    if !llvm.is_empty() || !others.is_empty() {
        step("apt-get update", || {
            run_command(Command::new("apt-get").args(["update", "-q"]))
        })?;
        did_something = true;
    }
    if !llvm.is_empty() {
        step(&format!("apt-get install {}", llvm.join(" ")), || {
            apt_install(&llvm)
        })?;
    }
    // bpf-linker compiles in the background while apt installs the rest.
    let linker = if linker_ok {
        None
    } else {
        did_something = true;
        eprintln!(
            "setup: building bpf-linker {BPF_LINKER_VERSION} for LLVM {major}, in the background"
        );
        Some((
            Instant::now(),
            spawn_bpf_linker_build(&major, &llvm_prefix)?,
        ))
    };
    if !others.is_empty() {
        step(&format!("apt-get install {}", others.join(" ")), || {
            apt_install(&others)
        })?;
    }
    if let Some((since, mut child)) = linker {
        let status = child
            .wait()
            .context("waiting for cargo install bpf-linker")?;
        ensure!(
            status.success(),
            "building bpf-linker failed ({status}); its log is above"
        );
        ensure!(
            bpf_linker_matches(&major),
            "bpf-linker was installed but is not on PATH or not linked against LLVM {major}"
        );
        eprintln!(
            "setup: bpf-linker built ({:.1} s)",
            since.elapsed().as_secs_f64()
        );
    }
    if did_something {
        eprintln!("setup: done in {:.1} s", started.elapsed().as_secs_f64());
    }
    Ok(())
}

/// Runs one step, printing what it is and how long it took.
fn step(what: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    eprintln!("setup: {what}");
    let started = Instant::now();
    f()?;
    eprintln!(
        "setup: {what}: done ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn has_rust_src() -> Result<bool> {
    let installed = output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]))?;
    Ok(installed.lines().any(|l| l.starts_with("rust-src")))
}

fn nightly_llvm_major() -> Result<String> {
    let version = output(Command::new("rustc").args(["+nightly", "-vV"]))?;
    Ok(version
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next())
        .context("nightly rustc does not report its LLVM version")?
        .to_string())
}

fn apt_install(packages: &[String]) -> Result<()> {
    run_command(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

fn spawn_bpf_linker_build(major: &str, llvm_prefix: &Path) -> Result<Child> {
    Command::new("cargo")
        .args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION])
        .args(["--force", "--quiet", "--no-default-features"])
        .args(["--features", &format!("llvm-{major}")])
        .env("LLVM_PREFIX", llvm_prefix)
        // Not the workspace's toolchain overrides: bpf-linker builds with the default one.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .spawn()
        .context("starting cargo install bpf-linker")
}

/// bpf-linker is on PATH and linked against libLLVM of this major version.
fn bpf_linker_matches(major: &str) -> bool {
    let Ok(path) = output(Command::new("sh").args(["-c", "command -v bpf-linker"])) else {
        return false;
    };
    output(Command::new("ldd").arg(path.trim())).is_ok_and(|libs| {
        libs.contains(&format!("libLLVM.so.{major}")) || libs.contains(&format!("libLLVM-{major}"))
    })
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

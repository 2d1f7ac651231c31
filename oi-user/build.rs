//! Compiles `oi-ebpf` for the BPF target (nightly, `-Z build-std=core`, bpf-linker) and leaves
//! one object per eBPF binary in OUT_DIR, where the tools embed them with
//! `include_bytes_aligned!`: one object per `src/bin/NAME.rs` (`footprint`, the trigger; a
//! profiler's programs and maps), so a tool loads only its own.
//!
//! This is aya-build's recipe with one change: `-C target-cpu=v3`. The trigger needs the value
//! returned by an atomic fetch-and-add (exact hit numbers), which BPF has only from ISA v3
//! (kernel 5.12); aya-build fixes the flags and its default CPU cannot express it.
use std::{env, path::PathBuf, process::Command};

use anyhow::{Context as _, bail};

fn main() -> anyhow::Result<()> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let ebpf_dir = manifest_dir.join("../oi-ebpf");
    println!("cargo:rerun-if-changed={}", ebpf_dir.display());
    println!(
        "cargo:rerun-if-changed={}",
        manifest_dir.join("../oi-common").display()
    );
    println!("cargo:rerun-if-env-changed=OI_SKIP_EBPF");
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let objects = ebpf_binaries(&ebpf_dir)?;
    if env::var_os("OI_SKIP_EBPF").is_some() {
        // For tooling that only type-checks (e.g. a quick `cargo check`): empty objects make
        // loading fail at run time with a clear error.
        for name in &objects {
            std::fs::write(out_dir.join(name), [])?;
        }
        return Ok(());
    }
    let target_dir = out_dir.join("ebpf-target");
    let flags = [
        "--cfg=bpf_target_arch=\"x86_64\"",
        "-Cdebuginfo=2",
        "-Clink-arg=--btf",
        "-Ctarget-cpu=v3",
    ]
    .join("\x1f");
    let mut cmd = Command::new("rustup");
    cmd.args([
        "run",
        "nightly",
        "cargo",
        "build",
        "--package",
        "oi-ebpf",
        "--bins",
    ])
    .args([
        "--release",
        "--target",
        "bpfel-unknown-none",
        "-Z",
        "build-std=core",
    ])
    .arg("--target-dir")
    .arg(&target_dir)
    .env("CARGO_ENCODED_RUSTFLAGS", flags)
    .current_dir(&ebpf_dir);
    // The outer build's toolchain must not leak into the nightly one.
    for key in [
        "RUSTC",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "CARGO_TARGET_DIR",
        "RUSTFLAGS",
    ] {
        cmd.env_remove(key);
    }
    let status = cmd.status().context(
        "running `rustup run nightly cargo build` for oi-ebpf (run `cargo xtask setup` first)",
    )?;
    if !status.success() {
        bail!(
            "building the eBPF object failed ({status}); `cargo xtask setup` installs what it needs"
        );
    }
    for name in &objects {
        let built = target_dir.join("bpfel-unknown-none/release").join(name);
        std::fs::copy(&built, out_dir.join(name))
            .with_context(|| format!("copying {}", built.display()))?;
    }
    Ok(())
}

/// The eBPF binaries of the crate: every `src/bin/NAME.rs`.
fn ebpf_binaries(ebpf_dir: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    let bin_dir = ebpf_dir.join("src/bin");
    if let Ok(entries) = std::fs::read_dir(&bin_dir) {
        for entry in entries {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "rs")
                && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
            {
                names.push(stem.to_string());
            }
        }
    }
    names.sort();
    Ok(names)
}

//! `cargo xtask demo`: starts the bundled example program and shows oi-trace on it.

use std::process::Command;

use anyhow::{Result, ensure};

use crate::{root, run as run_command};

/// Starts the bundled example (a small shop that inspects its ledger about a thousand times a
/// second), counts its calls for a second, then measures the ledger at its 100th next call.
pub fn run() -> Result<()> {
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
        run_command(Command::new(&bin).args(args))?;
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

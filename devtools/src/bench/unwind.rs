//! The `unwind` figures of `cargo xtask bench`: what a uprobe hit costs when its program walks
//! the whole user stack with the CFI unwinder (`oi_ebpf::stack::user_stack`), against a bare
//! uprobe and against the kernel's frame-pointer walk (`bpf_get_stack`), on the 12-frame chain
//! of `tests/fixtures/unwind_chain.cpp` built at -O2 -fomit-frame-pointer.
//!
//! The unwinder's check program (`oi_trace::unwind::check`) is attached to the chain's
//! innermost function in one mode at a time, or not at all; the fixture times its own loop
//! of calls. Rounds interleave the modes and each mode's best round counts, so that load from
//! elsewhere on the machine does not favour one mode. What tracking costs user space (a fresh
//! process, then one unchanged) is printed beside the figures.

use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, Result, bail, ensure};
use oi_common::stack::check_mode;
use oi_trace::unwind::{Unwinder, check};

use super::Figure;

/// Calls of the chain per timed run.
const CALLS: u64 = 200_000;

pub fn run(figures: &mut Vec<Figure>) -> Result<()> {
    let exe = oi_e2e::unwind_chain(&["-O2", "-fomit-frame-pointer"]);
    // A copy of its own: a test running at the same time may rebuild the fixture.
    let bench = exe.with_file_name("unwind_chain_bench");
    let _ = std::fs::remove_file(&bench);
    std::fs::copy(&exe, &bench).context("copying the unwind fixture")?;
    let modes = [
        None,
        Some(0),
        Some(check_mode::FRAME_POINTERS),
        Some(check_mode::CFI),
    ];
    let mut best = [f64::MAX; 4];
    for _round in 0..3 {
        for (i, mode) in modes.iter().enumerate() {
            best[i] = best[i].min(cost_per_call(&bench, *mode)?);
        }
    }
    track_cost(&bench)?;
    let [_, bare, fp, cfi] = best;
    figures.push(Figure {
        name: "unwind: uprobe hit walking 12 -O2 frames with user_stack, vs a bare uprobe".into(),
        value: cfi,
        baseline: bare,
        unit: "ns",
        goal: "≤ 1.5× bare uprobe".into(),
        pass: Some(cfi <= 1.5 * bare),
    });
    figures.push(Figure {
        name: "unwind: uprobe hit with user_stack, vs bpf_get_stack (frame pointers, wrong stack)"
            .into(),
        value: cfi,
        baseline: fp,
        unit: "ns",
        goal: "≤ 1.5× bpf_get_stack".into(),
        pass: Some(cfi <= 1.5 * fp),
    });
    Ok(())
}

/// Runs the fixture in `calls` mode (`UNWIND_CALLS` chains back to back, then exit), probed
/// in `mode` (none: no probe), and returns its wall time per chain in ns.
fn cost_per_call(exe: &Path, mode: Option<u32>) -> Result<f64> {
    let mut child = Command::new(exe)
        .env("UNWIND_CALLS", CALLS.to_string())
        .stdout(Stdio::piped())
        .stdin(Stdio::piped())
        .spawn()
        .context("starting the unwind fixture")?;
    let pid = child.id();
    let result = (|| -> Result<f64> {
        let mut stdout = BufReader::new(child.stdout.take().context("stdout")?);
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let mut probed = None;
        if let Some(mode) = mode {
            let mut ebpf = check::load(pid, mode, &[])?;
            let mut unwinder = Unwinder::new(&mut ebpf)?;
            unwinder.track(pid as i32)?;
            check::attach(&mut ebpf, exe, "chain_leaf", pid)?;
            probed = Some((ebpf, unwinder));
        }
        // Go: the fixture times its loop and prints the nanoseconds.
        drop(child.stdin.take());
        line.clear();
        stdout.read_line(&mut line)?;
        if let Some((mut ebpf, _)) = probed {
            let hits = check::hits(&mut ebpf)?;
            ensure!(hits == CALLS, "{hits} probe hits for {CALLS} calls");
        }
        let ns: f64 = line
            .trim()
            .parse()
            .with_context(|| format!("the fixture printed {line:?}"))?;
        Ok(ns / CALLS as f64)
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// Prints what tracking a process costs user space: a fresh one (every file's rows compiled
/// and loaded), then the once-a-second call that finds nothing changed.
fn track_cost(exe: &Path) -> Result<()> {
    let mut child = Command::new(exe)
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the unwind fixture")?;
    let pid = child.id();
    let result = (|| -> Result<()> {
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
        if line.trim() != "READY" {
            bail!("the unwind fixture said {line:?}");
        }
        let mut ebpf = check::load(pid, 0, &[])?;
        let mut unwinder = Unwinder::new(&mut ebpf)?;
        let t = Instant::now();
        unwinder.track(pid as i32)?;
        let fresh = t.elapsed();
        let t = Instant::now();
        unwinder.track(pid as i32)?;
        let unchanged = t.elapsed();
        let stats = unwinder.stats();
        eprintln!(
            "bench: unwind track: {} files, {} rows loaded in {:.1} ms; unchanged again in {:.0} µs",
            stats.files,
            stats.rows,
            fresh.as_secs_f64() * 1e3,
            unchanged.as_secs_f64() * 1e6
        );
        Ok(())
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

//! The `unwind` figures of `cargo xtask bench`: what a uprobe hit costs when its program walks
//! the whole user stack with the CFI unwinder (`oi_ebpf::stack::user_stack`), against a bare
//! uprobe and against the kernel's frame-pointer walk (`bpf_get_stack`), on the 12-frame chain
//! of `tests/fixtures/unwind_chain.cpp` built at -O2 -fomit-frame-pointer.
//!
//! The measurement lives beside the unwinder, as an ignored test of `oi-user` (it needs the
//! test-only eBPF program and the crate's internals): this runs it and reads its lines. The
//! fixture times its own loop; each mode is the best of three interleaved rounds.

use std::{path::Path, process::Command};

use anyhow::{Context as _, Result, bail};

use super::Figure;

pub fn run(root: &Path, figures: &mut Vec<Figure>) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["test", "--release", "-p", "oi-user", "--lib"])
        .args([
            "unwind::live_tests::unwind_cost",
            "--",
            "--ignored",
            "--exact",
        ])
        .arg("--nocapture")
        .current_dir(root)
        .output()
        .context("running the unwind cost measurement")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "the unwind cost measurement failed: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let cost = |label: &str| -> Result<f64> {
        let prefix = format!("unwind cost: {label}: ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .with_context(|| format!("no `{prefix}` line in: {text}"))
    };
    let (bare, fp, cfi) = (
        cost("bare uprobe")?,
        cost("bpf_get_stack")?,
        cost("user_stack")?,
    );
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

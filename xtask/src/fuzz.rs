//! `cargo xtask fuzz`: not written yet.

use std::path::Path;

use anyhow::{Result, bail};

pub fn run(_root: &Path, _seconds: u64) -> Result<()> {
    bail!("`cargo xtask fuzz` is not implemented yet")
}

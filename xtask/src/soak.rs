//! `cargo xtask soak`: not written yet.

use std::path::Path;

use anyhow::{Result, bail};

pub fn run(_root: &Path, _minutes: u64) -> Result<()> {
    bail!("`cargo xtask soak` is not implemented yet")
}

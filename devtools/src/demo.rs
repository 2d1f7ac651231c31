//! `cargo xtask demo`: each tool on the bundled example, printed to stdout. The steps live in
//! the journeys' crate (`oi_e2e::demo`), where a journey runs the same demo and checks what it
//! shows.

use anyhow::{Context as _, Result};

pub fn run() -> Result<()> {
    oi_e2e::demo::run(&mut std::io::stdout().lock()).context("the demo failed")
}

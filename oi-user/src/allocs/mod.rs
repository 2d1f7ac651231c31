//! `oi-trace allocs`: the allocation profiler (being built on branch `allocs`).

use crate::{
    cli::allocs::AllocsArgs,
    error::{Error, Result},
};

pub fn run(_args: &AllocsArgs) -> Result<()> {
    Err(Error::input("oi-trace allocs is not built yet"))
}

//! `oi-trace calls`: the call-tree profiler (being built on branch `calls`).

use crate::{
    cli::calls::CallsArgs,
    error::{Error, Result},
};

pub fn run(_args: &CallsArgs) -> Result<()> {
    Err(Error::input("oi-trace calls is not built yet"))
}

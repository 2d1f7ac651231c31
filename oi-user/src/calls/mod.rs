//! `oi-trace calls --entry F`: the call-tree profiler.
pub mod program;
pub mod select;
pub mod sites;

use crate::{
    cli::calls::CallsArgs,
    error::{Error, Result},
};

pub fn run(_args: &CallsArgs) -> Result<()> {
    Err(Error::input("oi-trace calls is not built yet"))
}

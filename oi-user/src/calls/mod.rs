//! `oi-trace calls --entry F`: the call-tree profiler.
pub mod program;
pub mod select;
pub mod sites;

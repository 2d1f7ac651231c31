//! The footprint tool (`oi-trace` with no subcommand) end to end, one module per journey:
//! live g++ fixtures measured exactly (`fixtures`, `foreign`, `beyond_stdlib`, `described`,
//! `unions`, `floats`, `globals`, `heap_blocks`, `multi_arg`, `oi_config`, `output`,
//! `real_binaries`, `real_program`, `real_sizes`, `mapped_files`), the trigger (`trigger`), the
//! walker inside the target (`jit`), and how runs end when users or targets misbehave
//! (`bad_input`, `races`). What is injected and who may is `tests/tests/trust`, a binary of
//! its own. `common` starts fixtures and compares their own numbers.

mod bad_input;
mod beyond_stdlib;
mod common;
mod described;
mod fixtures;
mod floats;
mod foreign;
mod globals;
mod heap_blocks;
mod jit;
mod mapped_files;
mod multi_arg;
mod oi_config;
mod output;
mod races;
mod real_binaries;
mod real_program;
mod real_sizes;
mod trigger;
mod unions;

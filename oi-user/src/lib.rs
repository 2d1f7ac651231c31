//! oi-trace as a library: every stage of the pipeline, so that the binary, the tests and the
//! benchmarks call the same code. `main.rs` only parses arguments and wires these together.
//!
//! Pure stages (no process is touched): `debuginfo`, `typegraph`, `containers`, `plan`,
//! `report`. Stages with side effects: `probe` (eBPF), `target` (ptrace), `interp` (reads
//! target memory through a `MemoryReader`).

pub mod allocs;
pub mod audit;
pub mod calls;
pub mod cgroup;
pub mod cli;
pub mod containers;
pub mod debuginfo;
pub mod describe;
pub mod disk_cache;
pub mod error;
pub mod event_loop;
pub mod interp;
pub mod jit;
pub mod kernel_features;
pub mod measure;
pub mod oi_config;
pub mod plan;
pub mod plan_cache;
pub mod privileges;
pub mod probe;
pub mod report;
pub mod session;
pub mod symbolize;
pub mod target;
pub mod typegraph;
pub mod unwind;

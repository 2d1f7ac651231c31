//! The footprint tool: at a probed function, freeze the thread, walk its arguments (or
//! globals) with the JIT walker or the interpreter, and print their exact memory footprint.
//!
//! `session` runs one `oi-trace` invocation (arm, serve, sample, summarise); `trigger` loads
//! the eBPF trigger that freezes the thread; `measure` is the per-probe facade from a hit to a
//! report (also OIL's engine); `plan_cache` and `audit` keep plans and injected code honest.
//! Must never be reached from the core modules or the other tools.

pub mod audit;
pub mod measure;
pub mod plan_cache;
pub mod pprof;
pub mod session;
pub mod trigger;

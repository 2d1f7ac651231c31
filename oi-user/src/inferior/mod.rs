//! Everything that touches a live process: `/proc` reading and ptrace.
//!
//! Must never leave a thread stopped or traced when the tracer ends, and never deliver a
//! signal of ours to the target: the SIGSTOPs the eBPF trigger sends are always suppressed.

pub mod bootstrap;
pub mod hijack;
pub mod procfs;
pub mod remote;
pub mod tracer;

pub use procfs::{Mapping, ProcessInfo};
pub use tracer::{Stop, Tracer};

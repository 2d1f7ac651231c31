//! oi-trace as a library: every stage of the pipeline, so that the binary, the tests and the
//! benchmarks call the same code. `main.rs` only parses arguments and wires these together.

/// `oi-trace agent`: the continuous mode, which drives a tool (`allocs`) per target and
/// delivers its profiles; the one module above the tools.
pub mod agent;
// The tools. Each one reaches the core below, never another tool.
/// `oi-trace allocs`: heap allocations by call stack.
pub mod allocs;
/// `oi-trace calls`: call trees and latencies of chosen functions.
pub mod calls;
/// The tools' results in formats other programs read (pprof, OTLP profiles); each tool calls
/// it where it writes its outputs, and the agent where it delivers them.
pub mod export;
/// `oi-trace` (footprints): exact memory footprints of live objects at a probed function.
pub mod footprint;

// What the command line and the tools share to run: arguments, the profilers' event loop,
// errors, privileges and the kernel's features. No measuring here.
pub mod cgroup;
pub mod cli;
pub mod error;
pub mod event_loop;
pub mod kernel_features;
pub mod privileges;
pub mod uptime;

// The core, pure stages (no process is touched): from an ELF file and its DWARF to types,
// container descriptions, walk plans, walkers and reports.
pub mod containers;
pub mod cpp_name;
pub mod debuginfo;
pub mod describe;
pub mod disk_cache;
pub mod jit;
pub mod oi_config;
pub mod plan;
pub mod report;
pub mod resolve;
pub mod symbolize;
pub mod typegraph;

// The core stages with side effects: the eBPF probe layer, the live process (ptrace, /proc),
// the code we place in it, the guardian that restores it if oi-trace is killed, reading its
// memory, and unwinding its stacks.
pub mod guardian;
pub mod inferior;
pub mod inject;
pub mod interp;
pub mod probe;
pub mod unwind;
